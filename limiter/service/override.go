package service

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/compiled"
)

// A RateLimitPolicy with requestOverride (v1beta1
// spec.limit.rate.requestOverride) takes a request's own limit, the RLS
// descriptor's limit field, for that request: its requests_per_unit per
// unit is converted to the policy's period (rounded down) and clamped to
// the policy's maximum. The counter stays the policy's (same key, same
// window), so a client that switches units or values meets the count it
// already has. A limit of 0, one that rounds down to 0, or a unit that is
// none of the RLS units, is a denial with a reason, never an error. A
// policy that did not opt in ignores the request's limit. ERL domains
// decide a request's own limit their way (erl.go).

// ownLimitDeniedReason starts the reason of a request denied by its own
// limit on a policy that opted in.
const ownLimitDeniedReason = "the request's own limit (descriptor limit) "

// requestLimit is p as step st decides it: with the request's own limit,
// in an ERL domain (erl.go) or on a policy that opted in; and the reason
// that limit denies the request, or "".
func requestLimit(st *step, p *compiled.Policy) (*compiled.Policy, string) {
	if st.override >= 0 && p.ERL != nil && p.ERL.Override {
		return withOverride(p, st.override), ""
	}
	if st.hasOwn && p.RequestOverrideMax > 0 {
		own, reason := ownLimit(p, st.own)
		if own == nil {
			return p, reason
		}
		return own, ""
	}
	return p, ""
}

// ownLimit is p, which opted in to a request's own limit, with o in its
// place, or nil and the reason o denies the request.
func ownLimit(p *compiled.Policy, o compiled.ERLRate) (*compiled.Policy, string) {
	if !o.Valid() {
		return nil, fmt.Sprintf("%sunit %d is none of the RLS units (1 SECOND to 7 WEEK)", ownLimitDeniedReason, o.Unit)
	}
	limit := convertRate(o, p.Limit.Period)
	if limit == 0 {
		return nil, fmt.Sprintf("%s%s allows nothing per the policy's period %s", ownLimitDeniedReason, o, p.Limit.Period)
	}
	limit = min(limit, p.RequestOverrideMax)
	cp := *p
	cp.Limit.Limit, cp.Limit.Burst = limit, limit
	return &cp, ""
}

// convertRate is o's requests per period, rounded down, or a number above
// any maximum when that does not fit in 64 bits. o must be valid.
func convertRate(o compiled.ERLRate, period time.Duration) int64 {
	unit := uint64(o.UnitSeconds()) * uint64(time.Second)
	hi, lo := bits.Mul64(uint64(o.RequestsPerUnit), uint64(period))
	if hi >= unit {
		return 1<<63 - 1
	}
	q, _ := bits.Div64(hi, lo, unit)
	if q > 1<<62 {
		return 1<<63 - 1
	}
	return int64(q)
}

// ownLimitDenial is the decision of p denied by a request's own limit.
func ownLimitDenial(p *compiled.Policy, reason string) Decision {
	return Decision{Policy: p, Result: algo.Result{RetryAfter: algo.Never}, Reason: reason}
}
