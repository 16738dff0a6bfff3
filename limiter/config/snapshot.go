package config

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

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

// SpecOf is the defaulted v1beta1 spec p was compiled from.
func SpecOf(p *Policy) *v1beta1.RateLimitPolicySpec {
	return &sourceOf(p).Spec
}

// sourceOf is the defaulted source p was compiled from.
func sourceOf(p *Policy) *Source {
	return p.Source.(*Source)
}

// Compile validates and compiles v1beta1 policies into a Snapshot, each
// with the default lease entry and priority key. Two policies with the
// same domain and descriptors (keys and values, in any order) conflict:
// the error names both.
func Compile(policies []v1beta1.RateLimitPolicy) (*Snapshot, error) {
	sources := make([]Source, len(policies))
	for i := range policies {
		sources[i].RateLimitPolicy = policies[i]
	}
	return CompileSources(sources)
}

// CompileSources is Compile for policies with the lease entry and priority
// key each counts on.
func CompileSources(policies []Source) (*Snapshot, error) {
	snap := &Snapshot{}
	seen := map[string]*Policy{}
	ids := map[string]bool{}
	for i := range policies {
		src := &Source{RateLimitPolicy: *policies[i].DeepCopy()}
		if e := policies[i].Entries; e != nil {
			src.Entries = e.DeepCopy()
		}
		DefaultPolicy(&src.RateLimitPolicy)
		if errs := ValidateSource(src); len(errs) > 0 {
			return nil, fmt.Errorf("%s/%s: %v", src.Namespace, src.Name, errs.ToAggregate())
		}
		p := compilePolicy(src)
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

func compilePolicy(src *Source) *Policy {
	s := &src.Spec
	a, err := algo.Parse(algorithmOf(s))
	if err != nil {
		panic(err) // validation admitted only known algorithms
	}
	p := &Policy{
		Namespace:   src.Namespace,
		Name:        src.Name,
		UID:         string(src.UID),
		Generation:  src.Generation,
		Domain:      s.Domain,
		Descriptors: compileDescriptors(s.Descriptors),
		FailureMode: FailureMode(*s.FailureMode),
		Shadow:      modeIs(s, v1beta1.Shadow),
		Soft:        modeIs(s, v1beta1.Soft),
		Hidden:      isHidden(s),
		ProblemType: string(v1beta1.QuotaExceeded),
		Source:      src,
	}
	if r := s.Response; r != nil && r.Problem != nil {
		if r.Problem.Type != nil && *r.Problem.Type != "" {
			p.ProblemType = string(*r.Problem.Type)
		}
		if r.Problem.Detail != nil {
			p.ProblemDetail = *r.Problem.Detail
		}
	}
	if c := s.Limit.Concurrency; isConcurrency(s) {
		lease := durationOf(c.LeaseDuration, 5*time.Minute)
		p.Limit = algo.Limit{Algorithm: a, Limit: c.MaxInFlight, Period: lease, Burst: c.MaxInFlight}
		p.MaxCost = math.MaxInt64
		p.LeaseEntry, _ = leaseEntryOf(s, src.Entries)
		p.HoldTTL = lease
	} else {
		compileRate(p, a, s.Limit.Rate, src.Entries)
	}
	// Shares of the capacity: units, or for Concurrency slots.
	ps, _ := priorityOf(s)
	p.Priority = compilePriority(ps, priorityKeyOf(src.Entries), p.Limit.Capacity())
	p.Limit.Penalty, p.Penalty = compilePenalty(penaltyOf(s), p.ID(), p.Hidden)
	return p
}

// compileRate compiles a rate limit into p.
func compileRate(p *Policy, a algo.Algorithm, r *v1beta1.RateLimit, e *v1beta1.FleetEntries) {
	p.Limit = algo.Limit{Algorithm: a, Limit: r.Limit, Period: durationOf(r.Period, 0), Burst: r.Limit}
	if r.Burst != nil && a.UsesBurst() {
		p.Limit.Burst = *r.Burst
	}
	p.MaxCost = p.Limit.Burst // the capacity: burst (TokenBucket and GCRA only) or limit
	if r.Cost != nil && r.Cost.Max != nil {
		p.MaxCost, p.MaxCostSet = *r.Cost.Max, true
	}
	if r.Cost != nil && r.Cost.Reserve != nil {
		p.LeaseEntry = defaultLeaseEntry
		if e != nil && e.Lease != nil {
			p.LeaseEntry = *e.Lease
		}
		p.HoldTTL = durationOf(r.Cost.Reserve.ExpireAfter, 10*time.Minute)
	}
	p.Limit.Calendar = compileCalendar(r.Calendar)
	if t := r.LocalTier; t != nil {
		p.LocalTier = &compiled.LocalTier{TTL: durationOf(t.TTL, 2*time.Second), Bound: -1}
		if b, ok := overshootBound(t.MaxOvershoot, p.Limit.Limit); ok {
			p.LocalTier.Bound = b
		}
	}
	p.Global = r.Scope != nil && *r.Scope == v1beta1.ScopeGlobal
	if r.RequestOverride != nil {
		p.RequestOverrideMax = r.RequestOverride.Maximum
	}
}

// compileDescriptors copies a spec's descriptors.
func compileDescriptors(ds []v1beta1.Descriptor) []Descriptor {
	out := make([]Descriptor, len(ds))
	for i, d := range ds {
		out[i] = Descriptor{Key: d.Key, Value: d.Value}
	}
	return out
}

// compileCalendar is a rate's calendar, or none.
func compileCalendar(c *v1beta1.Calendar) algo.Calendar {
	if c == nil {
		return algo.Calendar{}
	}
	tz := defaultTimeZone
	if c.TimeZone != nil && *c.TimeZone != "" {
		tz = *c.TimeZone
	}
	period, err1 := algo.ParseCalendarPeriod(string(c.Period))
	loc, err2 := algo.LoadTimeZone(tz)
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
func Signature(spec *v1beta1.RateLimitPolicySpec) string {
	parts := make([]string, len(spec.Descriptors))
	for i, d := range spec.Descriptors {
		parts[i] = fmt.Sprintf("%q", d.Key)
		if d.Value != nil {
			parts[i] += fmt.Sprintf("=%q", *d.Value)
		}
	}
	slices.Sort(parts)
	sig := fmt.Sprintf("%q|%s", spec.Domain, strings.Join(parts, ","))
	if modeIs(spec, v1beta1.Soft) {
		sig += "|soft"
	}
	return sig
}
