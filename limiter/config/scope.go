package config

import (
	"fmt"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// A policy's scope (v1beta1 spec.limit.rate.scope) has no v1alpha1 field:
// a v1alpha1 policy converted from a v1beta1 one carries it in the
// conversion annotation (v1alpha1.V1beta1SpecAnnotation), which is where
// the limiter reads it, and a snapshot document carries it beside the
// spec (DocumentPolicy.Scope).

const policyScopeMsg = "spec.limit.rate.scope Global is not supported with SlidingLog, Concurrency, localTier, reserve, penalty, priority or calendar: a region spends grants taken from the key's home region, which these would need counted exactly there"

// scopeOf returns the scope p's conversion annotation says, nil for none
// (Region): only an annotation that says what p's spec does is believed
// (v1alpha1.HubSpecOf).
func scopeOf(p *v1alpha1.RateLimitPolicy) *v1beta1.RegionScope {
	s := hubSpecOf(p)
	if s == nil || s.Limit.Rate == nil {
		return nil
	}
	return s.Limit.Rate.Scope
}

// hubSpecOf is p's v1beta1 spec from its conversion annotation, when the
// annotation says what p's spec does (both sides defaulted), else nil.
func hubSpecOf(p *v1alpha1.RateLimitPolicy) *v1beta1.RateLimitPolicySpec {
	return v1alpha1.HubSpecOf(p, DefaultPolicy)
}

// validateScope checks scope against the spec it applies to, as the CRD's
// rule does.
func validateScope(src *v1alpha1.RateLimitPolicy, scope *v1beta1.RegionScope) error {
	if scope == nil || *scope == v1beta1.ScopeRegion {
		return nil
	}
	if *scope != v1beta1.ScopeGlobal {
		return fmt.Errorf("%s/%s: spec.limit.rate.scope %q: want Region or Global", src.Namespace, src.Name, *scope)
	}
	s := &src.Spec
	a := s.EffectiveAlgorithm()
	if a == v1alpha1.SlidingLog || a == v1alpha1.Concurrency || s.LocalTierEnabled() || s.Reserve != nil || s.Penalty != nil ||
		s.Priority != nil || s.Rate.Calendar != nil {
		return fmt.Errorf("%s/%s: %s", src.Namespace, src.Name, policyScopeMsg)
	}
	return nil
}

// globalOnly is scope when it is Global, else nil: a document says Region
// by saying nothing, so that its bytes (and version) are what they were
// before scopes.
func globalOnly(scope *v1beta1.RegionScope) *v1beta1.RegionScope {
	if scope == nil || *scope == v1beta1.ScopeRegion {
		return nil
	}
	return scope
}

func ptrTo[T any](v T) *T { return &v }
