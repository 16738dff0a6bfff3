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

// The readers below say what the operator's collector needs of a spec,
// defaulted or not.

// IsSoft reports whether the policy's mode is Soft.
func (s *RateLimitPolicySpec) IsSoft() bool { return s.Mode != nil && *s.Mode == Soft }

// Holds reports whether a request's decision holds something until the
// request ends: a Concurrency lease, or a rate's cost.reserve.
func (s *RateLimitPolicySpec) Holds() bool {
	if s.Limit.Type == LimitConcurrency {
		return true
	}
	r := s.Limit.Rate
	return r != nil && r.Cost != nil && r.Cost.Reserve != nil
}

// HasPenalty reports whether the rate has a penalty.
func (s *RateLimitPolicySpec) HasPenalty() bool {
	return s.Limit.Rate != nil && s.Limit.Rate.Penalty != nil
}
