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

package v1beta1

// Defaults of a namespace's budget (TenantBudget), which every namespace
// served by a fleet gets unless the fleet says otherwise.
const (
	// DefaultMaxPoliciesPerNamespace is how many of a namespace's policies
	// a fleet's snapshot holds.
	DefaultMaxPoliciesPerNamespace = 200
	// DefaultMaxSnapshotBytesPerNamespace is how many bytes of the
	// snapshot document (its canonical JSON, before compression) a
	// namespace's policies may take: a quarter of the 1 MiB ConfigMap.
	DefaultMaxSnapshotBytesPerNamespace = 256 << 10
	// DefaultMaxPoliciesPerRequest is how many of a namespace's policies
	// one request may match.
	DefaultMaxPoliciesPerRequest = 32
	// DefaultStoreCallsPerSecondPerNamespace is how many policy decisions
	// against the store one limiter pod makes per second for a namespace.
	DefaultStoreCallsPerSecondPerNamespace = 20000
)

// EffectiveBudget is namespace ns's budget on the fleet, every field set:
// its override's fields, else the fleet's, else the defaults.
func (s *LimiterFleetSpec) EffectiveBudget(ns string) TenantBudget {
	var fleet TenantBudget
	var over *TenantBudget
	if b := s.TenantBudget; b != nil {
		fleet = b.TenantBudget
		for i := range b.Overrides {
			if b.Overrides[i].Namespace == ns {
				over = &b.Overrides[i].TenantBudget
				break
			}
		}
	}
	pick := func(o, f *int32, def int32) *int32 {
		switch {
		case o != nil:
			return ptrTo(*o)
		case f != nil:
			return ptrTo(*f)
		default:
			return ptrTo(def)
		}
	}
	if over == nil {
		over = &TenantBudget{}
	}
	return TenantBudget{
		MaxPoliciesPerNamespace:         pick(over.MaxPoliciesPerNamespace, fleet.MaxPoliciesPerNamespace, DefaultMaxPoliciesPerNamespace),
		MaxSnapshotBytesPerNamespace:    pick(over.MaxSnapshotBytesPerNamespace, fleet.MaxSnapshotBytesPerNamespace, DefaultMaxSnapshotBytesPerNamespace),
		MaxPoliciesPerRequest:           pick(over.MaxPoliciesPerRequest, fleet.MaxPoliciesPerRequest, DefaultMaxPoliciesPerRequest),
		StoreCallsPerSecondPerNamespace: pick(over.StoreCallsPerSecondPerNamespace, fleet.StoreCallsPerSecondPerNamespace, DefaultStoreCallsPerSecondPerNamespace),
	}
}

func ptrTo[T any](v T) *T { return &v }
