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
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// Defaults and bounds of a RateLimitPolicySpec. The CRD markers in
// ratelimitpolicy_types.go repeat these values; tests keep the two in step.
const (
	DefaultAlgorithm    = TokenBucket
	DefaultFailureMode  = FailOpen
	DefaultLocalTierTTL = 2 * time.Second

	MaxDomainLength          = 253
	MaxDescriptors           = 8
	MaxDescriptorKeyLength   = 253
	MaxDescriptorValueLength = 1024
	MaxLimit                 = 1_000_000_000
	// MaxSlidingLogLimit bounds rate.limit for SlidingLog, which keeps one
	// entry per admitted unit: a request's work and a counter's memory
	// grow with it.
	MaxSlidingLogLimit = 10_000
	MaxBurst           = 1_000_000_000
	MaxMaxCost         = 1_000_000_000
	MinPeriod          = time.Second
	MaxPeriod          = 720 * time.Hour
	MinLocalTierTTL    = 100 * time.Millisecond
	MaxLocalTierTTL    = time.Minute
	MaxOvershootCount  = 1_000_000_000

	// MaxInFlight bounds concurrency.maxInFlight: a counter keeps one
	// entry per lease.
	MaxInFlight          = 10_000
	DefaultLeaseDuration = 5 * time.Minute
	MaxLeaseDuration     = 24 * time.Hour
	DefaultExpireAfter   = 10 * time.Minute
	MinExpireAfter       = time.Second
	MaxExpireAfter       = 24 * time.Hour
	// DefaultLeaseEntry is the default descriptor entry key that carries a
	// lease or reservation ID, on the call that ends a request.
	DefaultLeaseEntry = "sluice_lease"
)

// The helpers below apply the defaults to fields that are nil. The API server
// fills those fields in, but a limiter that loads manifests from a file does not
// go through it.

// EffectiveAlgorithm returns algorithm, or TokenBucket when unset.
func (s *RateLimitPolicySpec) EffectiveAlgorithm() Algorithm {
	if s.Algorithm == nil || *s.Algorithm == "" {
		return DefaultAlgorithm
	}
	return *s.Algorithm
}

// EffectiveFailureMode returns failureMode, or Open when unset.
func (s *RateLimitPolicySpec) EffectiveFailureMode() FailureMode {
	if s.FailureMode == nil || *s.FailureMode == "" {
		return DefaultFailureMode
	}
	return *s.FailureMode
}

// EffectiveBurst returns burst, or rate.limit when unset. Algorithms without a
// bucket ignore it.
func (s *RateLimitPolicySpec) EffectiveBurst() int64 {
	if s.Burst == nil {
		return s.Rate.Limit
	}
	return *s.Burst
}

// Capacity is the most units one counter admits at once: burst for
// TokenBucket and GCRA, concurrency.maxInFlight for Concurrency, else
// rate.limit.
func (s *RateLimitPolicySpec) Capacity() int64 {
	switch a := s.EffectiveAlgorithm(); {
	case a == TokenBucket || a == GCRA:
		return s.EffectiveBurst()
	case a == Concurrency && s.Concurrency != nil:
		return s.Concurrency.MaxInFlight
	}
	return s.Rate.Limit
}

// EffectiveLeaseDuration returns leaseDuration, or 5m when unset.
func (c *ConcurrencyLimit) EffectiveLeaseDuration() time.Duration {
	if c == nil || c.LeaseDuration == nil {
		return DefaultLeaseDuration
	}
	return c.LeaseDuration.Duration
}

// EffectiveLeaseEntry returns leaseEntry, or sluice_lease when unset.
func (c *ConcurrencyLimit) EffectiveLeaseEntry() string {
	if c == nil || c.LeaseEntry == nil {
		return DefaultLeaseEntry
	}
	return *c.LeaseEntry
}

// EffectiveExpireAfter returns expireAfter, or 10m when unset.
func (r *Reserve) EffectiveExpireAfter() time.Duration {
	if r == nil || r.ExpireAfter == nil {
		return DefaultExpireAfter
	}
	return r.ExpireAfter.Duration
}

// EffectiveLeaseEntry returns leaseEntry, or sluice_lease when unset.
func (r *Reserve) EffectiveLeaseEntry() string {
	if r == nil || r.LeaseEntry == nil {
		return DefaultLeaseEntry
	}
	return *r.LeaseEntry
}

// LeaseEntry is the descriptor entry key that ends a request's holding on
// this policy (a Concurrency lease, or a reservation), and false for a
// policy that holds nothing.
func (s *RateLimitPolicySpec) LeaseEntry() (string, bool) {
	switch {
	case s.EffectiveAlgorithm() == Concurrency:
		return s.Concurrency.EffectiveLeaseEntry(), true
	case s.Reserve != nil:
		return s.Reserve.EffectiveLeaseEntry(), true
	}
	return "", false
}

// EffectiveMaxCost returns maxCost, or the capacity when unset.
func (s *RateLimitPolicySpec) EffectiveMaxCost() int64 {
	if s.MaxCost == nil {
		return s.Capacity()
	}
	return *s.MaxCost
}

// IsShadow reports whether the policy only counts and logs, never denies.
func (s *RateLimitPolicySpec) IsShadow() bool {
	return s.Shadow != nil && *s.Shadow
}

// LocalTierEnabled reports whether two-tier mode is on.
func (s *RateLimitPolicySpec) LocalTierEnabled() bool {
	return s.LocalTier != nil && s.LocalTier.Enabled != nil && *s.LocalTier.Enabled
}

// EffectiveTTL returns ttl, or 2s when unset.
func (t *LocalTier) EffectiveTTL() time.Duration {
	if t == nil || t.TTL == nil {
		return DefaultLocalTierTTL
	}
	return t.TTL.Duration
}

// OvershootBound returns the overshoot maxOvershoot allows for limit, in units,
// and false when maxOvershoot is unset.
func (t *LocalTier) OvershootBound(limit int64) (int64, bool) {
	if t == nil || t.MaxOvershoot == nil {
		return 0, false
	}
	if t.MaxOvershoot.Type == intstr.Int {
		return int64(t.MaxOvershoot.IntVal), true
	}
	v, err := intstr.GetScaledValueFromIntOrPercent(t.MaxOvershoot, int(limit), false)
	if err != nil {
		return 0, false
	}
	return int64(v), true
}
