package service

import (
	"math"
	"slices"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/compiled"
)

// erlUnlimited is the result of an ERL limit marked unlimited: allowed,
// with ERL's limit_remaining (the largest uint32), nothing counted.
var erlUnlimited = algo.Result{Allowed: true, Remaining: math.MaxUint32}

// replace drops, in an ERL domain's plan, the limits that another limit
// the request matched replaces (rate_limit.replaces by name), as ERL
// does: every matched limit's names are collected first, an unlimited
// one's too, so that the order of the descriptors does not matter. The
// work is the descriptors' matches (at most one each) times the names
// their limits replace, which the configuration bounds.
func (pl *plan) replace() {
	var drop uint64 // MaxDescriptors is below 64
	for i := range pl.steps {
		st := &pl.steps[i]
		if len(st.matches) == 0 || st.matches[0].ERL == nil || st.matches[0].ERL.Name == "" {
			continue
		}
		name := st.matches[0].ERL.Name
		for j := range pl.steps {
			other := pl.steps[j].matches
			if len(other) > 0 && other[0].ERL != nil && slices.Contains(other[0].ERL.Replaces, name) {
				drop |= 1 << i
				break
			}
		}
	}
	for i := range pl.steps {
		if drop&(1<<i) != 0 {
			pl.steps[i].matches = pl.steps[i].matches[:0]
		}
	}
}

// validateOverride checks descriptor i's own limit in an ERL domain dom:
// its unit must be one of ERL's, and its rate at most the bound, which is
// Options.ERLMaxOverride when set, else the rate of the ERL limit the
// descriptor matches (a descriptor that matches none may then take no
// limit of its own). A client that could raise its own limit would have
// none: past the bound, the descriptor is refused (refuse.go).
func (s *Service) validateOverride(i int, d *Descriptor, dom *compiled.Domain) error {
	o := d.Override
	if !o.Valid() {
		return invalidf("descriptors[%d].limit.unit %d is not a unit of envoyproxy/ratelimit (1 SECOND to 7 WEEK)", i, o.Unit)
	}
	bound, from := s.opts.ERLMaxOverride, "the limiter's --erl-max-override"
	if !bound.Valid() {
		var matched *compiled.Policy
		if m := dom.AppendMatches(nil, d.Entries); len(m) == 1 && !m[0].ERL.Unlimited {
			matched = m[0]
		}
		if matched == nil {
			return invalidf("descriptors[%d].limit %s: the descriptor matches no limit of domain %s to bound it, and the limiter has no --erl-max-override", i, o, dom.Name)
		}
		bound, from = compiled.ERLRate{RequestsPerUnit: matched.ERL.RequestsPerUnit, Unit: matched.ERL.Unit}, "the limit "+matched.ID()+" it matches"
	}
	if !o.AtMost(bound) {
		return invalidf("descriptors[%d].limit %s is above %s, %s", i, o, bound, from)
	}
	return nil
}

// overrideLimit makes st, in an ERL domain, decided by the domain's
// policy of its own limit in d's unit instead of what it matched, as ERL
// does (validateOverride bounded it).
func (pl *plan) overrideLimit(st *step, d *Descriptor) {
	p := pl.dom.ERLOverride(d.Override.Unit)
	if p == nil {
		return
	}
	pl.matches = append(pl.matches[:st.from], p)
	st.to = len(pl.matches)
	st.override = int64(d.Override.RequestsPerUnit)
}

// withOverride is p, a policy of a request's own limit, with that limit.
// It is made per request: the request chose the limit.
func withOverride(p *compiled.Policy, limit int64) *compiled.Policy {
	cp, e := *p, *p.ERL
	cp.Limit.Limit, cp.Limit.Burst = limit, limit
	e.RequestsPerUnit = uint32(limit)
	cp.ERL = &e
	return &cp
}

// QuotaOverReason is the reason of a request denied because every quota
// mode limit it matched is over its quota.
const QuotaOverReason = "every quota_mode limit of the request is over its quota"

// quotaOver is ERL's overall answer in quota mode (after #1059): a
// request is over its limit when it matched quota mode limits and every
// one of them is over its quota (one under its quota lets it through;
// other limits decide as always). Quota mode limits are shadow policies
// here, so that alone none denies; this makes resp a denial when all are
// over, reported with the quota that frees first (a retry then passes).
// A quota mode limit in shadow_mode too is answered OK by ERL, so it is
// never over. With enforcement off, the descriptors report no policy and
// nothing is denied.
func quotaOver(resp *Response) {
	total, over := 0, 0
	var first *Decision
	for i := range resp.Decisions {
		d := &resp.Decisions[i]
		if d.Policy == nil || d.Policy.ERL == nil || !d.Policy.ERL.QuotaMode {
			continue
		}
		total++
		if d.Result.Allowed || d.Policy.ERL.ShadowMode {
			continue
		}
		over++
		if first == nil || longerWait(first.Result.RetryAfter, d.Result.RetryAfter) {
			first = d
		}
	}
	if total == 0 || over < total {
		return
	}
	resp.OverLimit = true
	dec := Decision{Policy: first.Policy, Result: first.Result, OverLimit: true, RetryAfter: first.Result.RetryAfter,
		Denied: first.Policy, Reason: QuotaOverReason}
	resp.Reported.merge(&dec)
}
