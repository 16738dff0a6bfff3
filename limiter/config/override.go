package config

import (
	"fmt"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// A policy's requestOverride (v1beta1 spec.limit.rate.requestOverride) has
// no v1alpha1 field either: it travels as the scope does (scope.go), in
// the conversion annotation, and beside the spec in a snapshot document
// (DocumentPolicy.RequestOverride).

const requestOverrideMsg = "spec.limit.rate.requestOverride needs a fixed period and is not supported with calendar, SlidingLog, Concurrency, burst, localTier, cost.reserve or scope Global: a request's own limit replaces limit (and the bucket size) for that request only, which these can't honour"

// requestOverrideOf returns the requestOverride p's conversion annotation
// says, nil for none (only an annotation that says what p's spec does).
func requestOverrideOf(p *v1alpha1.RateLimitPolicy) *v1beta1.RequestOverride {
	s := hubSpecOf(p)
	if s == nil || s.Limit.Rate == nil {
		return nil
	}
	return s.Limit.Rate.RequestOverride
}

// validateRequestOverride checks o against the spec it applies to, and
// scope, as the CRD's rules do.
func validateRequestOverride(src *v1alpha1.RateLimitPolicy, o *v1beta1.RequestOverride, scope *v1beta1.RegionScope) error {
	if o == nil {
		return nil
	}
	if o.Maximum < 1 || o.Maximum > 1_000_000_000 {
		return fmt.Errorf("%s/%s: spec.limit.rate.requestOverride.maximum %d: want 1 to 1000000000", src.Namespace, src.Name, o.Maximum)
	}
	s := &src.Spec
	a := s.EffectiveAlgorithm()
	if a == v1alpha1.SlidingLog || a == v1alpha1.Concurrency || s.Rate.Calendar != nil || s.Burst != nil || s.LocalTierEnabled() || s.Reserve != nil ||
		(scope != nil && *scope == v1beta1.ScopeGlobal) {
		return fmt.Errorf("%s/%s: %s", src.Namespace, src.Name, requestOverrideMsg)
	}
	return nil
}
