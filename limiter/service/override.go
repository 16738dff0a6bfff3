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
// policy that did not opt in ignores the request's limit. A domain that
// decides own limits by policies of its own (compiled.Domain
// DecidesOwnLimits: envoyproxy/ratelimit's) decides a request's own limit
// by the policy of its unit, with the limit as asked (validateOverride
// bounds it).

// ownLimitDeniedReason starts the reason of a request denied by its own
// limit on a policy that opted in.
const ownLimitDeniedReason = "the request's own limit (descriptor limit) "

// requestLimit is p as step st decides it: with the request's own limit,
// when p is its domain's policy of own limits (overrideLimit) or opted
// in; and the reason that limit denies the request, or "".
func requestLimit(st *step, p *compiled.Policy) (*compiled.Policy, string) {
	if st.override >= 0 {
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
func ownLimit(p *compiled.Policy, o compiled.UnitRate) (*compiled.Policy, string) {
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
func convertRate(o compiled.UnitRate, period time.Duration) int64 {
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

// validateOverride checks descriptor i's own limit in domain dom, which
// decides own limits by policies of its own (DecidesOwnLimits): its unit
// must be an RLS unit, and its rate at most the bound, which is
// Options.MaxOwnLimit when set, else the rate of the one policy the
// descriptor matches (not Unlimited; a descriptor that matches none may
// then take no limit of its own). A client that could raise its own limit
// would have none: past the bound, the descriptor is refused (refuse.go).
func (s *Service) validateOverride(i int, d *Descriptor, dom *compiled.Domain) error {
	o := d.Override
	if !o.Valid() {
		return invalidf("descriptors[%d].limit.unit %d is not a unit of envoyproxy/ratelimit (1 SECOND to 7 WEEK)", i, o.Unit)
	}
	bound, from := s.opts.MaxOwnLimit, "the limiter's --erl-max-override"
	if !bound.Valid() {
		var matched *compiled.Policy
		if m := dom.AppendMatches(nil, d.Entries); len(m) == 1 && !m[0].Unlimited {
			if r, ok := m[0].UnitRate(); ok {
				matched, bound = m[0], r
			}
		}
		if matched == nil {
			return invalidf("descriptors[%d].limit %s: the descriptor matches no limit of domain %s to bound it, and the limiter has no --erl-max-override", i, o, dom.Name)
		}
		from = "the limit " + matched.ID() + " it matches"
	}
	if !o.AtMost(bound) {
		return invalidf("descriptors[%d].limit %s is above %s, %s", i, o, bound, from)
	}
	return nil
}

// overrideLimit makes st, in a domain that decides own limits, decided by
// the domain's policy of its own limit in d's unit instead of what it
// matched (validateOverride bounded it).
func (pl *plan) overrideLimit(st *step, d *Descriptor) {
	p := pl.dom.OwnLimitPolicy(d.Override.Unit)
	if p == nil {
		return
	}
	pl.matches = append(pl.matches[:st.from], p)
	st.to = len(pl.matches)
	st.override = int64(d.Override.RequestsPerUnit)
}

// withOverride is p, a domain's policy of a request's own limit, with that
// limit. It is made per request: the request chose the limit.
func withOverride(p *compiled.Policy, limit int64) *compiled.Policy {
	cp := *p
	cp.Limit.Limit, cp.Limit.Burst = limit, limit
	return &cp
}
