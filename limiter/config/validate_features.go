package config

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// Messages of the v1beta1 CRD's rules on what a limit's type and
// algorithm take, repeated word for word.
const (
	policyBurstMsg           = "spec.limit.rate.burst applies only to TokenBucket and GCRA"
	policyCalendarMsg        = "spec.limit.rate.calendar applies only to FixedWindow"
	policySlidingLogMsg      = "spec.limit.rate.limit may be at most 10000 for SlidingLog, which keeps one entry per admitted request: use SlidingWindow or TokenBucket/GCRA for larger limits"
	policySlidingLogExactMsg = "spec.limit.rate.localTier and spec.limit.rate.cost.reserve are not supported with SlidingLog, which stays exact and whose log cannot be charged after the fact"
	policyMaxCostMsg         = "spec.limit.rate.cost.max must not exceed the capacity: burst, or limit without it"
	policyOneHoldingMsg      = "spec.limit.rate takes at most one of localTier (spends leased units locally), cost.reserve (holds what it takes in the store) and penalty (counts the exact decision's denials)"
	policyLocalTierExactMsg  = "spec.limit.rate.localTier is not supported with calendar or priority, which need the store's exact count"
	policyScopeSlidingLogMsg = "spec.limit.rate.scope Global is not supported with SlidingLog, which stays exact: use SlidingWindow, FixedWindow, TokenBucket or GCRA"
	policyScopeMsg           = "spec.limit.rate.scope Global is not supported with localTier, cost.reserve, penalty, priority or calendar: a region spends grants leased from the key's home region, which these would need counted exactly there"
	requestOverrideMsg       = "spec.limit.rate.requestOverride needs a fixed period and is not supported with calendar, SlidingLog, burst, localTier, cost.reserve or scope Global: a request's own limit replaces limit (and the bucket size) for that request only, which these can't honour"
	policySoftHiddenMsg      = "spec.mode Soft is not supported with spec.response.visibility Hidden: the mark on the requests over a soft limit would show its threshold; use mode Shadow for a limit that only operators see"
	policySoftPenaltyMsg     = "spec.limit.rate.penalty does not apply to mode Soft, which never denies: use it on the hard limit"
)

// validateFeatures checks what a spec's fields say together: which
// features the limit's type and algorithm take, and which features go
// together. It is the one place for these checks, mirroring the v1beta1
// CRD's CEL rules (and those v1alpha1 made, which say the same); fld is
// spec. Each field is valid on its own when it is called.
func validateFeatures(s *v1beta1.RateLimitPolicySpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if modeIs(s, v1beta1.Soft) && isHidden(s) {
		errs = append(errs, field.Forbidden(fld.Child("mode"), policySoftHiddenMsg))
	}
	if modeIs(s, v1beta1.Soft) && penaltyOf(s) != nil {
		errs = append(errs, field.Forbidden(fld.Child("mode"), policySoftPenaltyMsg))
	}
	r := s.Limit.Rate
	if r == nil || isConcurrency(s) {
		return errs
	}
	rfld := fld.Child("limit", "rate")
	a := v1beta1.Algorithm(algorithmOf(s))
	reserve, global := reserveOf(s) != nil, r.Scope != nil && *r.Scope == v1beta1.ScopeGlobal
	if r.Burst != nil && a != v1beta1.TokenBucket && a != v1beta1.GCRA {
		errs = append(errs, field.Forbidden(rfld.Child("burst"), policyBurstMsg))
	}
	if r.Calendar != nil && a != v1beta1.FixedWindow {
		errs = append(errs, field.Forbidden(rfld.Child("calendar"), policyCalendarMsg))
	}
	if a == v1beta1.SlidingLog && r.Limit > maxSlidingLogLimit {
		errs = append(errs, field.Invalid(rfld.Child("limit"), r.Limit, policySlidingLogMsg))
	}
	if a == v1beta1.SlidingLog && (r.LocalTier != nil || reserve) {
		errs = append(errs, field.Forbidden(rfld.Child("algorithm"), policySlidingLogExactMsg))
	}
	if c := r.Cost; c != nil && c.Max != nil && *c.Max > capacityOf(s) {
		errs = append(errs, field.Invalid(rfld.Child("cost", "max"), *c.Max, policyMaxCostMsg))
	}
	if n := count(r.LocalTier != nil, reserve, r.Penalty != nil); n > 1 {
		errs = append(errs, field.Forbidden(rfld, policyOneHoldingMsg))
	}
	if r.LocalTier != nil && (r.Calendar != nil || r.Priority != nil) {
		errs = append(errs, field.Forbidden(rfld.Child("localTier"), policyLocalTierExactMsg))
	}
	switch {
	case global && a == v1beta1.SlidingLog:
		errs = append(errs, field.Invalid(rfld.Child("scope"), *r.Scope, policyScopeSlidingLogMsg))
	case global && (r.LocalTier != nil || reserve || r.Penalty != nil || r.Priority != nil || r.Calendar != nil):
		errs = append(errs, field.Invalid(rfld.Child("scope"), *r.Scope, policyScopeMsg))
	}
	if r.RequestOverride != nil && (r.Period == nil || a == v1beta1.SlidingLog || r.Burst != nil || r.LocalTier != nil || reserve || global) {
		errs = append(errs, field.Forbidden(rfld.Child("requestOverride"), requestOverrideMsg))
	}
	return errs
}

// count is how many of bs are true.
func count(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}
