package config

import (
	"fmt"
	"iter"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// Snapshot is an immutable compiled configuration: every policy, indexed by
// domain for matching. The limiter swaps whole snapshots atomically.
type Snapshot struct {
	// Version is the content hash of the canonical policies: equal policies
	// give equal versions, whatever their order in the source.
	Version string
	// Policies are sorted by namespace and name.
	Policies []*Policy
	// Enforcement is the fleet's kill switch: with EnforcementDisabled every
	// request is allowed, and would-be denials are counted as shadow.
	Enforcement Enforcement
	// Pods is how many limiter pods share the limits (the failureMode Local
	// divisor), from the operator; 0 when unknown (a policy file).
	Pods int32
	// ForwardAuth are the forward-auth mappings, defaulted and sorted by
	// domain (see ForwardAuthFor).
	ForwardAuth []v1alpha1.ForwardAuth
	// Budgets are the per-namespace budgets of the limiter, nil for none.
	Budgets *Budgets
	domains map[string]*Domain
}

// Policy is one compiled RateLimitPolicy.
type Policy struct {
	Namespace, Name string
	// UID and Generation identify the object version, when known (from the
	// API server); a file gives neither.
	UID        string
	Generation int64
	Domain     string
	// Descriptors are the entries a request must carry, in the policy's order.
	Descriptors []v1alpha1.Descriptor
	Limit       algo.Limit
	// MaxCost is the most units one request may spend (spec.maxCost, or
	// the capacity); math.MaxInt64 for Concurrency, which counts requests.
	MaxCost int64
	// LeaseEntry is the descriptor entry key whose value is a lease or
	// reservation ID, on the call that ends a request (spec.concurrency's
	// or spec.reserve's leaseEntry); empty for a policy that holds nothing.
	LeaseEntry string
	// HoldTTL is how long a holding lives unless ended: the lease duration,
	// or a reservation's expireAfter.
	HoldTTL     time.Duration
	Shadow      bool
	FailureMode v1alpha1.FailureMode
	// Priority is spec.priority compiled, nil without it.
	Priority *Priority
	// Penalty is how spec.penalty answers a penalized request, nil
	// without it; Limit.Penalty counts.
	Penalty *PenaltyAnswer
	// Spec is the defaulted source, kept for status and debugging.
	Spec v1alpha1.RateLimitPolicySpec
	// order is the policy's index in Snapshot.Policies.
	order int
	// counterID starts every counter key of this policy. It holds the
	// identity and whatever makes stored state incompatible (algorithm and
	// period, or calendar period and time zone); a changed limit or burst
	// keeps the counters.
	counterID string
	// id is ID(), built once: every decided request names its policy.
	id string
}

// ID is "namespace/name".
func (p *Policy) ID() string {
	if p.id == "" {
		return p.Namespace + "/" + p.Name
	}
	return p.id
}

// Domain holds one domain's policies, indexed by their first descriptor key.
type Domain struct {
	Name     string
	Policies []*Policy
	byKey    map[string][]*Policy
	// minMaxCost is the least MaxCost of the domain's enforcing (neither
	// shadow nor soft) policies, math.MaxInt64 without any.
	minMaxCost int64
	// leaseEntries are the distinct LeaseEntry keys of its policies.
	leaseEntries []string
}

// LeaseEntries are the distinct keys that its policies' LeaseEntry name: a
// descriptor that carries one ends a request's holdings, and spends
// nothing.
func (d *Domain) LeaseEntries() []string {
	if d == nil {
		return nil
	}
	return d.leaseEntries
}

// Holds reports whether the policy holds what it takes until the request
// ends: a Concurrency lease, or a reservation.
func (p *Policy) Holds() bool { return p.LeaseEntry != "" }

// MinMaxCost is the least MaxCost of the domain's enforcing (neither
// shadow nor soft) policies: a cost up to it is within every policy's cap,
// and needs no matching to know it. math.MaxInt64 when none enforces.
func (d *Domain) MinMaxCost() int64 { return d.minMaxCost }

// Domain returns the named domain, or nil when no policy uses it.
func (s *Snapshot) Domain(name string) *Domain {
	if s == nil {
		return nil
	}
	return s.domains[name]
}

// Compile validates and compiles policies into a Snapshot. Two policies with
// the same domain and descriptors (keys and values, in any order) conflict:
// the error names both.
func Compile(policies []v1alpha1.RateLimitPolicy) (*Snapshot, error) {
	snap := &Snapshot{domains: map[string]*Domain{}}
	seen := map[string]*Policy{}
	ids := map[string]bool{}
	for i := range policies {
		src := policies[i].DeepCopy()
		DefaultPolicy(src)
		if errs := ValidatePolicy(src); len(errs) > 0 {
			return nil, fmt.Errorf("%s/%s: %v", src.Namespace, src.Name, errs.ToAggregate())
		}
		p := compilePolicy(src)
		if ids[p.ID()] {
			return nil, fmt.Errorf("%s: defined twice", p.ID())
		}
		ids[p.ID()] = true
		sig := p.signature()
		if other, ok := seen[sig]; ok {
			return nil, fmt.Errorf("%s conflicts with %s: same domain %q and descriptors", p.ID(), other.ID(), p.Domain)
		}
		seen[sig] = p
		snap.Policies = append(snap.Policies, p)
	}
	if err := checkEntries(snap.Policies); err != nil {
		return nil, err
	}
	slices.SortFunc(snap.Policies, func(a, b *Policy) int { return strings.Compare(a.ID(), b.ID()) })
	for i, p := range snap.Policies {
		p.order = i
		d := snap.domains[p.Domain]
		if d == nil {
			d = &Domain{Name: p.Domain, byKey: map[string][]*Policy{}, minMaxCost: math.MaxInt64}
			snap.domains[p.Domain] = d
		}
		d.Policies = append(d.Policies, p)
		if p.enforcing() {
			d.minMaxCost = min(d.minMaxCost, p.MaxCost)
		}
		if p.Holds() && !slices.Contains(d.leaseEntries, p.LeaseEntry) {
			d.leaseEntries = append(d.leaseEntries, p.LeaseEntry)
		}
		first := p.Descriptors[0].Key
		d.byKey[first] = append(d.byKey[first], p)
	}
	snap.Enforcement = EnforcementEnabled
	snap.Version = snap.hash()
	return snap, nil
}

func compilePolicy(src *v1alpha1.RateLimitPolicy) *Policy {
	s := src.Spec
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
		Descriptors: s.Descriptors,
		Limit: algo.Limit{
			Algorithm: a,
			Limit:     s.Rate.Limit,
			Period:    s.Rate.Period.Duration,
			Burst:     s.EffectiveBurst(),
		},
		MaxCost:     s.EffectiveMaxCost(),
		Shadow:      s.IsShadow(),
		FailureMode: s.EffectiveFailureMode(),
		Spec:        s,
	}
	if !a.UsesBurst() {
		p.Limit.Burst = p.Limit.Limit
	}
	period := p.Limit.Period
	switch {
	case a == algo.Concurrency:
		c := s.Concurrency
		p.Limit = algo.Limit{Algorithm: a, Limit: c.MaxInFlight, Period: c.EffectiveLeaseDuration(), Burst: c.MaxInFlight}
		p.MaxCost = math.MaxInt64
		p.LeaseEntry, p.HoldTTL = c.EffectiveLeaseEntry(), c.EffectiveLeaseDuration()
		period = 0 // a new lease duration keeps the leases in flight
	case s.Reserve != nil:
		p.LeaseEntry, p.HoldTTL = s.Reserve.EffectiveLeaseEntry(), s.Reserve.EffectiveExpireAfter()
	}
	p.Limit.Calendar = compileCalendar(&s.Rate)
	// Shares of the capacity: units, or for Concurrency slots.
	p.Priority = compilePriority(s.Priority, p.Limit.Capacity())
	p.id = p.Namespace + "/" + p.Name
	p.Limit.Penalty, p.Penalty = compilePenalty(s.Penalty, p.id, s.IsHidden())
	if c := p.Limit.Calendar; !c.IsZero() {
		p.counterID = fmt.Sprintf("%s|%s|%s|%s", p.id, a, c.Period, c.Location)
	} else {
		p.counterID = fmt.Sprintf("%s|%s|%d", p.id, a, period.Microseconds())
	}
	return p
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
func (p *Policy) signature() string { return Signature(&p.Spec) }

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

// Entry is one key and value of a request's descriptor, whatever protocol
// carried it (an Envoy RLS descriptor entry, an HTTP check, a forward-auth
// mapping or a status query).
type Entry struct {
	Key, Value string
}

// Matches reports whether entries carry all of the policy's keys, with equal
// values where the policy gives one. The first entry with a key counts.
func (p *Policy) Matches(entries []Entry) bool {
	for i := range p.Descriptors {
		d := &p.Descriptors[i]
		v, ok := lookup(entries, d.Key)
		if !ok || (d.Value != nil && *d.Value != v) {
			return false
		}
	}
	return true
}

// VaryingEntries yields the request's key and value for each of the
// policy's descriptors without a value: what tells one counter of the
// policy from another.
func (p *Policy) VaryingEntries(entries []Entry) iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for i := range p.Descriptors {
			if d := &p.Descriptors[i]; d.Value == nil {
				v, _ := lookup(entries, d.Key)
				if !yield(d.Key, v) {
					return
				}
			}
		}
	}
}

func lookup(entries []Entry, key string) (string, bool) {
	for i := range entries {
		if entries[i].Key == key {
			return entries[i].Value, true
		}
	}
	return "", false
}

// CounterKey derives the counter of this policy for a matching request: the
// policy's identity plus the request's values for the policy's keys. kb is
// scratch space, so a hot path allocates nothing.
func (p *Policy) CounterKey(kb *store.KeyBuilder, entries []Entry) store.Key {
	kb.Reset()
	kb.Add(p.counterID)
	for i := range p.Descriptors {
		v, _ := lookup(entries, p.Descriptors[i].Key)
		kb.Add(v)
	}
	return kb.Key()
}

// AppendMatches appends the domain's policies that entries match, in the
// snapshot's order of policies, to dst.
func (d *Domain) AppendMatches(dst []*Policy, entries []Entry) []*Policy {
	if d == nil {
		return dst
	}
	start := len(dst)
	for i := range entries {
		k := entries[i].Key
		if isRepeat(entries[:i], k) {
			continue
		}
		for _, p := range d.byKey[k] {
			if p.Matches(entries) {
				dst = append(dst, p)
			}
		}
	}
	// Candidates come grouped by key; restore the snapshot's order.
	if len(dst)-start > 1 {
		slices.SortFunc(dst[start:], func(a, b *Policy) int { return a.order - b.order })
	}
	return dst
}

func isRepeat(earlier []Entry, key string) bool {
	for i := range earlier {
		if earlier[i].Key == key {
			return true
		}
	}
	return false
}
