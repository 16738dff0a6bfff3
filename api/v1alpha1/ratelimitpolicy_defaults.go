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
// TokenBucket and GCRA, else rate.limit.
func (s *RateLimitPolicySpec) Capacity() int64 {
	if a := s.EffectiveAlgorithm(); a == TokenBucket || a == GCRA {
		return s.EffectiveBurst()
	}
	return s.Rate.Limit
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
