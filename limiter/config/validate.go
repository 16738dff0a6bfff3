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

package config

import (
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// Messages of the v1beta1 RateLimitPolicy CRD's rules, repeated word for
// word where the CRD has one.
const (
	policyDuplicateKeyMsg   = "descriptor keys must be unique"
	policyLimitMemberMsg    = "spec.limit must set the member its type names, and only it: rate with type Rate, concurrency with type Concurrency"
	policyPeriodOrCalMsg    = "spec.limit.rate takes period, or calendar instead of it: set exactly one"
	policyPeriodRangeMsg    = "period must be between 1s and 720h"
	policyTTLRangeMsg       = "ttl must be between 100ms and 1m"
	policyMaxOvershootMsg   = "maxOvershoot must be a count from 0 to 1000000000 or a percentage from 0% to 100%"
	policyLeaseDurationMsg  = "leaseDuration must be above 0s and at most 24h"
	policyExpireAfterMsg    = "expireAfter must be between 1s and 24h"
	policyLeaseEntryDescMsg = "the policy's lease entry (LimiterFleet spec.entries.lease; spec.concurrency.leaseEntry or spec.reserve.leaseEntry in v1alpha1) must not be one of the policy's descriptor keys"
)

var (
	limitTypes   = []v1beta1.LimitType{v1beta1.LimitRate, v1beta1.LimitConcurrency}
	algorithms   = []v1beta1.Algorithm{v1beta1.TokenBucket, v1beta1.GCRA, v1beta1.SlidingWindow, v1beta1.FixedWindow, v1beta1.SlidingLog}
	failureModes = []v1beta1.FailureMode{v1beta1.FailOpen, v1beta1.FailClosed, v1beta1.FailLocal}
	modes        = []v1beta1.Mode{v1beta1.Enforce, v1beta1.Soft, v1beta1.Shadow}
)

// ValidatePolicy checks p against the rules the v1beta1 CRD enforces
// through its OpenAPI schema and CEL rules, so that a policy loaded from a
// file meets the same bar as one the API server admitted. Errors name
// v1beta1 field paths. Unset optional fields are read as their defaults;
// ValidatePolicy does not change p.
func ValidatePolicy(p *v1beta1.RateLimitPolicy) field.ErrorList {
	return ValidateSource(&Source{RateLimitPolicy: *p})
}

// ValidateSource is ValidatePolicy with the lease entry and priority key
// the policy counts on.
func ValidateSource(p *Source) field.ErrorList {
	errs := validatePolicyMeta(&p.ObjectMeta, field.NewPath("metadata"))
	return append(errs, validatePolicySpec(&p.Spec, p.Entries, field.NewPath("spec"))...)
}

func validatePolicyMeta(m *metav1.ObjectMeta, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m.Name == "" {
		errs = append(errs, field.Required(fld.Child("name"), ""))
	} else {
		for _, msg := range validation.IsDNS1123Subdomain(m.Name) {
			errs = append(errs, field.Invalid(fld.Child("name"), m.Name, msg))
		}
	}
	if m.Namespace != "" {
		for _, msg := range validation.IsDNS1123Label(m.Namespace) {
			errs = append(errs, field.Invalid(fld.Child("namespace"), m.Namespace, msg))
		}
	}
	return errs
}

// validatePolicySpec checks each field on its own, then what fields say
// together (validateFeatures) when each was valid.
func validatePolicySpec(s *v1beta1.RateLimitPolicySpec, e *v1beta1.FleetEntries, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validatePolicyString(s.Domain, true, maxDomainLength, fld.Child("domain"))...)
	errs = append(errs, validatePolicyDescriptors(s.Descriptors, fld.Child("descriptors"))...)
	if s.FailureMode != nil && !slices.Contains(failureModes, *s.FailureMode) {
		errs = append(errs, field.NotSupported(fld.Child("failureMode"), *s.FailureMode, failureModes))
	}
	if s.Mode != nil && !slices.Contains(modes, *s.Mode) {
		errs = append(errs, field.NotSupported(fld.Child("mode"), *s.Mode, modes))
	}
	errs = append(errs, validateLimit(&s.Limit, fld.Child("limit"))...)
	errs = append(errs, validatePolicyResponse(s.Response, fld.Child("response"))...)
	if len(errs) > 0 {
		return errs
	}
	errs = append(errs, validateFeatures(s, fld)...)
	return append(errs, validateEntries(s, e, fld)...)
}

func validateLimit(l *v1beta1.Limit, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case l.Type == "":
		errs = append(errs, field.Required(fld.Child("type"), ""))
	case !slices.Contains(limitTypes, l.Type):
		errs = append(errs, field.NotSupported(fld.Child("type"), l.Type, limitTypes))
	case l.Type == v1beta1.LimitRate && l.Rate == nil:
		errs = append(errs, field.Required(fld.Child("rate"), policyLimitMemberMsg))
	case l.Type == v1beta1.LimitRate && l.Concurrency != nil:
		errs = append(errs, field.Forbidden(fld.Child("concurrency"), policyLimitMemberMsg))
	case l.Type == v1beta1.LimitConcurrency && l.Concurrency == nil:
		errs = append(errs, field.Required(fld.Child("concurrency"), policyLimitMemberMsg))
	case l.Type == v1beta1.LimitConcurrency && l.Rate != nil:
		errs = append(errs, field.Forbidden(fld.Child("rate"), policyLimitMemberMsg))
	}
	if r := l.Rate; r != nil {
		errs = append(errs, validateRate(r, fld.Child("rate"))...)
	}
	if c := l.Concurrency; c != nil {
		errs = append(errs, validateConcurrency(c, fld.Child("concurrency"))...)
	}
	return errs
}

func validateRate(r *v1beta1.RateLimit, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r.Algorithm != nil && !slices.Contains(algorithms, *r.Algorithm) {
		errs = append(errs, field.NotSupported(fld.Child("algorithm"), *r.Algorithm, algorithms))
	}
	errs = append(errs, validatePolicyRange(r.Limit, 1, maxLimit, fld.Child("limit"))...)
	if (r.Period == nil) == (r.Calendar == nil) {
		errs = append(errs, field.Invalid(fld.Child("period"), r.Period, policyPeriodOrCalMsg))
	}
	errs = append(errs, validatePolicyDuration(r.Period, minPeriod, maxPeriod, policyPeriodRangeMsg, fld.Child("period"))...)
	errs = append(errs, validatePolicyCalendar(r.Calendar, fld.Child("calendar"))...)
	if r.Burst != nil {
		errs = append(errs, validatePolicyRange(*r.Burst, 1, maxLimit, fld.Child("burst"))...)
	}
	if c := r.Cost; c != nil {
		if c.Max != nil {
			errs = append(errs, validatePolicyRange(*c.Max, 1, maxLimit, fld.Child("cost", "max"))...)
		}
		if res := c.Reserve; res != nil {
			errs = append(errs, validatePolicyDuration(res.ExpireAfter, minExpireAfter, maxExpireAfter, policyExpireAfterMsg,
				fld.Child("cost", "reserve", "expireAfter"))...)
		}
	}
	if t := r.LocalTier; t != nil {
		errs = append(errs, validatePolicyLocalTier(t, fld.Child("localTier"))...)
	}
	errs = append(errs, validatePolicyPriority(r.Priority, fld.Child("priority"))...)
	errs = append(errs, validatePolicyPenalty(r.Penalty, fld.Child("penalty"))...)
	if s := r.Scope; s != nil && *s != v1beta1.ScopeRegion && *s != v1beta1.ScopeGlobal {
		errs = append(errs, field.NotSupported(fld.Child("scope"), *s, []v1beta1.RegionScope{v1beta1.ScopeRegion, v1beta1.ScopeGlobal}))
	}
	if o := r.RequestOverride; o != nil {
		errs = append(errs, validatePolicyRange(o.Maximum, 1, maxRequestOverride, fld.Child("requestOverride", "maximum"))...)
	}
	return errs
}

func validateConcurrency(c *v1beta1.ConcurrencyLimit, fld *field.Path) field.ErrorList {
	errs := validatePolicyRange(c.MaxInFlight, 1, maxInFlight, fld.Child("maxInFlight"))
	if d := c.LeaseDuration; d != nil {
		if v, err := parseDuration(*d); err != nil {
			errs = append(errs, field.Invalid(fld.Child("leaseDuration"), *d, err.Error()))
		} else if v <= 0 || v > maxLeaseDuration {
			errs = append(errs, field.Invalid(fld.Child("leaseDuration"), *d, policyLeaseDurationMsg))
		}
	}
	return append(errs, validatePolicyPriority(c.Priority, fld.Child("priority"))...)
}

// validateEntries checks the lease entry and priority key the policy
// counts on against its descriptors and each other. A v1alpha1 policy
// names them in its spec; v1beta1 leaves them to the fleet.
func validateEntries(s *v1beta1.RateLimitPolicySpec, e *v1beta1.FleetEntries, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	efld := field.NewPath("entries")
	if e != nil && (e.Idempotency != nil || e.Accept != nil) {
		errs = append(errs, field.Forbidden(efld, "only lease and priority may be given for one policy"))
	}
	le, holds := leaseEntryOf(s, e)
	if holds {
		errs = append(errs, validatePolicyString(le, false, maxDescriptorKeyLength, efld.Child("lease"))...)
		for _, d := range s.Descriptors {
			if d.Key == le {
				errs = append(errs, field.Invalid(efld.Child("lease"), le, policyLeaseEntryDescMsg))
			}
		}
	} else if e != nil && e.Lease != nil {
		errs = append(errs, field.Forbidden(efld.Child("lease"), "the policy holds nothing: no Concurrency limit, no spec.limit.rate.cost.reserve"))
	}
	ps, member := priorityOf(s)
	if ps == nil {
		if e != nil && e.Priority != nil {
			errs = append(errs, field.Forbidden(efld.Child("priority"), "the policy has no priority levels"))
		}
		return errs
	}
	return append(errs, validatePriorityKey(s, priorityKeyOf(e), le, holds, fld.Child("limit", member, "priority"))...)
}

func validatePolicyDescriptors(ds []v1beta1.Descriptor, fld *field.Path) field.ErrorList {
	if errs := validateDescriptorCount(len(ds), fld); errs != nil {
		return errs
	}
	var errs field.ErrorList
	seen := make(map[string]bool, len(ds))
	for i, d := range ds {
		idx := fld.Index(i)
		errs = append(errs, validatePolicyString(d.Key, true, maxDescriptorKeyLength, idx.Child("key"))...)
		if d.Value != nil {
			errs = append(errs, validatePolicyString(*d.Value, false, maxDescriptorValueLength, idx.Child("value"))...)
		}
		if seen[d.Key] {
			errs = append(errs, field.Invalid(idx.Child("key"), d.Key, policyDuplicateKeyMsg))
		}
		seen[d.Key] = true
	}
	return errs
}

// validatePolicyString checks a string's length in characters, as OpenAPI's
// minLength and maxLength do.
func validatePolicyString(v string, required bool, maxLen int, fld *field.Path) field.ErrorList {
	switch n := utf8.RuneCountInString(v); {
	case n == 0 && required:
		return field.ErrorList{field.Required(fld, "")}
	case n == 0:
		return field.ErrorList{field.Invalid(fld, v, "should be at least 1 chars long")}
	case n > maxLen:
		return field.ErrorList{field.TooLong(fld, v, maxLen)}
	}
	return nil
}

func validatePolicyRange(v, minV, maxV int64, fld *field.Path) field.ErrorList {
	switch {
	case v < minV:
		return field.ErrorList{field.Invalid(fld, v, fmt.Sprintf("should be greater than or equal to %d", minV))}
	case v > maxV:
		return field.ErrorList{field.Invalid(fld, v, fmt.Sprintf("should be less than or equal to %d", maxV))}
	}
	return nil
}

// validatePolicyDuration checks a v1beta1 duration's form and range; nil
// is left to the caller.
func validatePolicyDuration(d *v1beta1.Duration, minD, maxD time.Duration, msg string, fld *field.Path) field.ErrorList {
	if d == nil {
		return nil
	}
	v, err := parseDuration(*d)
	if err != nil {
		return field.ErrorList{field.Invalid(fld, *d, err.Error())}
	}
	if v < minD || v > maxD {
		return field.ErrorList{field.Invalid(fld, *d, msg)}
	}
	return nil
}

// validateDescriptorCount checks that a list of descriptors holds 1 to
// maxDescriptors entries.
func validateDescriptorCount(n int, fld *field.Path) field.ErrorList {
	switch {
	case n == 0:
		return field.ErrorList{field.Required(fld, fmt.Sprintf("must have 1 to %d entries", maxDescriptors))}
	case n > maxDescriptors:
		return field.ErrorList{field.TooMany(fld, n, maxDescriptors)}
	}
	return nil
}
