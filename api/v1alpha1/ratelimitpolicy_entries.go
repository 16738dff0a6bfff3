/*
Copyright 2026 The Sluice Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

import (
	"fmt"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// A v1alpha1 policy names its own lease entry (spec.concurrency.leaseEntry
// or spec.reserve.leaseEntry) and priority key (spec.priority.key); a
// v1beta1 policy leaves both to its fleet (LimiterFleet spec.entries). A
// snapshot document carries v1beta1 specs, and beside each the entries it
// names where they are not the defaults, in the fleet's own words
// (v1beta1.FleetEntries, lease and priority only): these two functions
// convert a spec and its entries, with no conversion annotation.

// SpecEntries is the lease entry and priority key a names where they are
// not the defaults (sluice_lease, priority), or nil.
func SpecEntries(a *RateLimitPolicySpec) *v1beta1.FleetEntries {
	var e v1beta1.FleetEntries
	if le, holds := a.LeaseEntry(); holds && le != DefaultLeaseEntry {
		e.Lease = ptrTo(le)
	}
	if a.Priority != nil && a.Priority.Key != DefaultPriorityEntry {
		e.Priority = ptrTo(a.Priority.Key)
	}
	if e == (v1beta1.FleetEntries{}) {
		return nil
	}
	return &e
}

// SpecFromV1beta1Entries is SpecFromV1beta1 with the lease entry and
// priority key of e (SpecEntries) in place of the defaults. e may name
// only those two, and the lease entry only for a spec that holds (a
// Concurrency limit, or a rate with cost.reserve), the priority key only
// for one with priority levels.
func SpecFromV1beta1Entries(b *v1beta1.RateLimitPolicySpec, e *v1beta1.FleetEntries) (RateLimitPolicySpec, error) {
	a, err := SpecFromV1beta1(b)
	if err != nil || e == nil {
		return a, err
	}
	if e.Idempotency != nil || e.Accept != nil {
		return a, fmt.Errorf("entries: only lease and priority may be given for one policy")
	}
	if e.Lease != nil {
		switch {
		case a.Concurrency != nil:
			a.Concurrency.LeaseEntry = ptrTo(*e.Lease)
		case a.Reserve != nil:
			a.Reserve.LeaseEntry = ptrTo(*e.Lease)
		default:
			return a, fmt.Errorf("entries.lease: the policy holds nothing (no Concurrency limit, no spec.limit.rate.cost.reserve)")
		}
	}
	if e.Priority != nil {
		if a.Priority == nil {
			return a, fmt.Errorf("entries.priority: the policy has no priority levels")
		}
		a.Priority.Key = *e.Priority
	}
	return a, nil
}
