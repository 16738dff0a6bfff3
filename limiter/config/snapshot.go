package config

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/compiled"
)

// The compiled configuration is package compiled's, which the request
// path reads without linking the API types: these names keep config's
// callers (the loaders, the operator, tests) as they were.
type (
	Snapshot    = compiled.Snapshot
	Policy      = compiled.Policy
	Domain      = compiled.Domain
	Entry       = compiled.Entry
	Descriptor  = compiled.Descriptor
	FailureMode = compiled.FailureMode
)

// SpecOf is the defaulted spec p was compiled from.
func SpecOf(p *Policy) *v1alpha1.RateLimitPolicySpec {
	return p.Source.(*v1alpha1.RateLimitPolicySpec)
}

// Compile validates and compiles policies into a Snapshot. Two policies with
// the same domain and descriptors (keys and values, in any order) conflict:
// the error names both.
func Compile(policies []v1alpha1.RateLimitPolicy) (*Snapshot, error) {
	scopes := make([]*v1beta1.RegionScope, len(policies))
	overrides := make([]*v1beta1.RequestOverride, len(policies))
	for i := range policies {
		scopes[i], overrides[i] = scopeOf(&policies[i]), requestOverrideOf(&policies[i])
	}
	return compileScoped(policies, scopes, overrides)
}

// compileScoped is Compile with each policy's scope and requestOverride
// given beside it.
func compileScoped(policies []v1alpha1.RateLimitPolicy, scopes []*v1beta1.RegionScope, overrides []*v1beta1.RequestOverride) (*Snapshot, error) {
	snap := &Snapshot{}
	seen := map[string]*Policy{}
	ids := map[string]bool{}
	for i := range policies {
		src := policies[i].DeepCopy()
		DefaultPolicy(src)
		if errs := ValidatePolicy(src); len(errs) > 0 {
			return nil, fmt.Errorf("%s/%s: %v", src.Namespace, src.Name, errs.ToAggregate())
		}
		if err := validateScope(src, scopes[i]); err != nil {
			return nil, err
		}
		if err := validateRequestOverride(src, overrides[i], scopes[i]); err != nil {
			return nil, err
		}
		p := compilePolicy(src)
		p.Global = scopes[i] != nil && *scopes[i] == v1beta1.ScopeGlobal
		if overrides[i] != nil {
			p.RequestOverrideMax = overrides[i].Maximum
		}
		if ids[p.ID()] {
			return nil, fmt.Errorf("%s: defined twice", p.ID())
		}
		ids[p.ID()] = true
		sig := signature(p)
		if other, ok := seen[sig]; ok {
			return nil, fmt.Errorf("%s conflicts with %s: same domain %q and descriptors", p.ID(), other.ID(), p.Domain)
		}
		seen[sig] = p
		snap.Policies = append(snap.Policies, p)
	}
	if err := checkEntries(snap.Policies); err != nil {
		return nil, err
	}
	snap = compiled.New(snap.Policies)
	snap.Version = hash(snap)
	return snap, nil
}

func compilePolicy(src *v1alpha1.RateLimitPolicy) *Policy {
	s := &src.Spec
	a, err := algo.Parse(string(s.EffectiveAlgorithm()))
	if err != nil {
		panic(err) // ValidatePolicy admitted only known algorithms
	}
	p := &Policy{
		Namespace:   src.Namespace,
		Name:        src.Name,
		UID:         string(src.UID),
		Generation:  src.Generation,
		Domain:      s.Domain,
		Descriptors: compileDescriptors(s.Descriptors),
		Limit: algo.Limit{
			Algorithm: a,
			Limit:     s.Rate.Limit,
			Period:    s.Rate.Period.Duration,
			Burst:     s.EffectiveBurst(),
		},
		MaxCost:       s.EffectiveMaxCost(),
		MaxCostSet:    s.MaxCost != nil,
		Shadow:        s.IsShadow(),
		Soft:          s.IsSoft(),
		Hidden:        s.IsHidden(),
		FailureMode:   FailureMode(s.EffectiveFailureMode()),
		ProblemType:   string(s.EffectiveProblemType()),
		ProblemDetail: s.ProblemDetail(),
		Source:        s,
	}
	if !a.UsesBurst() {
		p.Limit.Burst = p.Limit.Limit
	}
	switch {
	case a == algo.Concurrency:
		c := s.Concurrency
		p.Limit = algo.Limit{Algorithm: a, Limit: c.MaxInFlight, Period: c.EffectiveLeaseDuration(), Burst: c.MaxInFlight}
		p.MaxCost = math.MaxInt64
		p.LeaseEntry, p.HoldTTL = c.EffectiveLeaseEntry(), c.EffectiveLeaseDuration()
	case s.Reserve != nil:
		p.LeaseEntry, p.HoldTTL = s.Reserve.EffectiveLeaseEntry(), s.Reserve.EffectiveExpireAfter()
	}
	p.Limit.Calendar = compileCalendar(&s.Rate)
	if s.LocalTierEnabled() {
		p.LocalTier = &compiled.LocalTier{TTL: s.LocalTier.EffectiveTTL(), Bound: -1}
		if b, ok := s.LocalTier.OvershootBound(p.Limit.Limit); ok {
			p.LocalTier.Bound = b
		}
	}
	// Shares of the capacity: units, or for Concurrency slots.
	p.Priority = compilePriority(s.Priority, p.Limit.Capacity())
	p.Limit.Penalty, p.Penalty = compilePenalty(s.Penalty, p.ID(), s.IsHidden())
	return p
}

// compileDescriptors copies a spec's descriptors.
func compileDescriptors(ds []v1alpha1.Descriptor) []Descriptor {
	out := make([]Descriptor, len(ds))
	for i, d := range ds {
		out[i] = Descriptor{Key: d.Key, Value: d.Value}
	}
	return out
}

// compileCalendar is rate's calendar, or none.
func compileCalendar(r *v1alpha1.Rate) algo.Calendar {
	if r.Calendar == nil {
		return algo.Calendar{}
	}
	period, err1 := algo.ParseCalendarPeriod(string(*r.Calendar))
	loc, err2 := algo.LoadTimeZone(r.EffectiveTimeZone())
	if err1 != nil || err2 != nil {
		panic(fmt.Sprintf("compiling a calendar ValidatePolicy admitted: %v %v", err1, err2))
	}
	return algo.Calendar{Period: period, Location: loc}
}

// signature identifies what a policy matches.
func signature(p *Policy) string { return Signature(SpecOf(p)) }

// Signature identifies what a policy matches: its domain and its sorted
// descriptor keys and values, and whether it is a soft limit, which may
// sit beside the hard limit of the same requests. Two policies with equal
// signatures conflict.
func Signature(spec *v1alpha1.RateLimitPolicySpec) string {
	parts := make([]string, len(spec.Descriptors))
	for i, d := range spec.Descriptors {
		parts[i] = fmt.Sprintf("%q", d.Key)
		if d.Value != nil {
			parts[i] += fmt.Sprintf("=%q", *d.Value)
		}
	}
	slices.Sort(parts)
	sig := fmt.Sprintf("%q|%s", spec.Domain, strings.Join(parts, ","))
	if spec.IsSoft() {
		sig += "|soft"
	}
	return sig
}
