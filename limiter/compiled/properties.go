package compiled

import (
	"math"
	"time"
)

// Behaviours are what a policy may do beside counting its Limit, each a
// general property of the compiled model that the request path
// (limiter/service) decides by. limiter/config sets them when it compiles
// an edge's configuration (envoyproxy/ratelimit's, erl.go there); a
// RateLimitPolicy sets none, and the zero value changes nothing.
type Behaviours struct {
	// Replacement, when set, names the policy, and the policies it
	// replaces (nil for neither: a pointer, so that a per-request copy of
	// a policy stays small).
	Replacement *Replacement
	// Unlimited: the policy allows every request it matches, counts
	// nothing, and reports UnlimitedRemaining.
	Unlimited bool
	// Quota: the policy is one of a request's quotas. Alone it never
	// denies (it is Shadow too); a request that matched quotas is over its
	// limit when every one of them is over (limiter/service quota.go), so
	// its figures are reported, as ReportShadow's.
	Quota bool
	// DryRun: the policy was asked only to count (its source's shadow
	// mode), whatever else makes it Shadow: a DryRun quota is never over,
	// and its denied hits count as dry-run hits in its hit statistics.
	DryRun bool
	// ReportShadow: while the policy is Shadow, its figures are still
	// reported to the client, as an allowed decision's (the shadow
	// policies of a RateLimitPolicy are invisible).
	ReportShadow bool
	// Untenanted: the policy belongs to no tenant: no namespace budget
	// meters its store calls or counts its matches (a configuration the
	// platform hands over whole).
	Untenanted bool
	// HitStats: the limiter keeps hit statistics of the policy, by
	// HitStatsKey: every hit, and the hits over, near and within the
	// limit, and over it while DryRun (limiter/service hitstats.go).
	HitStats bool
}

// Replacement is a policy's name and the names of the policies it
// replaces: a request that matches it is decided without them, whichever
// descriptors matched which, and whether or not it was itself replaced
// (limiter/service replace.go).
type Replacement struct {
	// Name names the policy for others' Replaces ("" for none).
	Name     string
	Replaces []string
}

// UnlimitedRemaining is what an Unlimited policy reports remaining: the
// most an RLS response can tell.
const UnlimitedRemaining = math.MaxUint32

// HasQuotas reports whether some policy of the domain is a Quota.
func (d *Domain) HasQuotas() bool { return d != nil && d.hasQuotas }

// HasReplaces reports whether some policy of the domain Replaces others.
func (d *Domain) HasReplaces() bool { return d != nil && d.hasReplaces }

// DecidesOwnLimits reports whether the domain decides a request's own
// limit (an RLS descriptor's limit field) by a policy of its own for the
// limit's unit (OwnLimitPolicy), instead of what the descriptor matched;
// elsewhere, only the policies that opted in (RequestOverrideMax) take it.
func (d *Domain) DecidesOwnLimits() bool { return d != nil && d.ownLimits != nil }

// OwnLimitPolicy is the domain's policy of a request's own limit in RLS
// unit unit, or nil when the domain decides none (DecidesOwnLimits) or
// the unit is not one. Its Limit.Limit is a placeholder: each request's
// limit takes its place.
func (d *Domain) OwnLimitPolicy(unit int32) *Policy {
	if !d.DecidesOwnLimits() || unit < 0 || int(unit) >= len(d.ownLimits) {
		return nil
	}
	return d.ownLimits[unit]
}

// UnitRate is the policy's limit as a rate in an RLS unit, when its
// period is one unit's length (UnitRate.UnitSeconds) and the limit fits
// in a uint32.
func (p *Policy) UnitRate() (UnitRate, bool) {
	for u, secs := range erlUnitSeconds {
		if secs != 0 && p.Limit.Period == time.Duration(secs)*time.Second && p.Limit.Limit >= 0 && p.Limit.Limit <= math.MaxUint32 {
			return UnitRate{RequestsPerUnit: uint32(p.Limit.Limit), Unit: int32(u)}, true
		}
	}
	return UnitRate{}, false
}

// Matching is how a domain's descriptors are matched (Domain.Matching).
type Matching int

const (
	// MatchEvery: a descriptor matches every policy of the domain whose
	// descriptors its entries carry (a RateLimitPolicy's domain).
	MatchEvery Matching = iota
	// MatchTree: a descriptor matches at most one policy, walking the
	// domain's tree of levels entry by entry, the first level that matches
	// each entry, and taking the policy at its last entry
	// (envoyproxy/ratelimit's: ERLTree).
	MatchTree
)

// Matching is how the domain's descriptors are matched.
func (d *Domain) Matching() Matching {
	if d != nil && d.erl != nil {
		return MatchTree
	}
	return MatchEvery
}
