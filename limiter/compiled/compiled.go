// Package compiled holds what the request path needs of the limiter's
// configuration: policies compiled from their RateLimitPolicy specs
// (limiter/config compiles them), indexed by domain for matching. It
// imports no API type and nothing of Kubernetes, so that the request path
// (limiter/service, limiter/server, limiter/store) links none of it: every
// field a decision reads is compiled here, once per snapshot, and no
// request reads a spec.
package compiled

import (
	"fmt"
	"iter"
	"math"
	"slices"
	"strings"
	"time"

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
	// ForwardAuth are the forward-auth mappings, compiled and sorted by
	// domain (see ForwardAuthFor).
	ForwardAuth []ForwardAuth
	// Budgets are the per-namespace budgets of the limiter, nil for none.
	Budgets *Budgets
	// Source is what limiter/config compiled the fleet's settings from
	// (its defaulted forward-auth mappings), kept for the snapshot's
	// document: the request path never reads it.
	Source  any
	domains map[string]*Domain
}

// Enforcement is a fleet's kill switch.
type Enforcement string

const (
	// EnforcementEnabled enforces policies: the default.
	EnforcementEnabled Enforcement = "Enabled"
	// EnforcementDisabled allows every request; decisions are still made
	// and would-be denials counted as shadow.
	EnforcementDisabled Enforcement = "Disabled"
)

// FailureMode is what a policy does while its store can't answer
// (spec.failureMode).
type FailureMode string

const (
	// FailOpen allows the request.
	FailOpen FailureMode = "Open"
	// FailClosed denies the request with a reason.
	FailClosed FailureMode = "Closed"
	// FailLocal enforces an approximate per-pod share (limit / ready pods)
	// in memory.
	FailLocal FailureMode = "Local"
)

// Policy is one compiled RateLimitPolicy: what a decision reads of it.
type Policy struct {
	Namespace, Name string
	// UID and Generation identify the object version, when known (from the
	// API server); a file gives neither.
	UID        string
	Generation int64
	Domain     string
	// Descriptors are the entries a request must carry, in the policy's order.
	Descriptors []Descriptor
	Limit       algo.Limit
	// MaxCost is the most units one request may spend
	// (spec.limit.rate.cost.max, or the capacity); math.MaxInt64 for
	// Concurrency, which counts requests.
	MaxCost int64
	// LeaseEntry is the descriptor entry key whose value is a lease or
	// reservation ID, on the call that ends a request (spec.concurrency's
	// or spec.reserve's leaseEntry); empty for a policy that holds nothing.
	LeaseEntry string
	// HoldTTL is how long a holding lives unless ended: the lease duration,
	// or a reservation's expireAfter.
	HoldTTL time.Duration
	// Shadow, Soft and Hidden are spec.shadow, spec.soft, and
	// spec.visibility Hidden.
	Shadow, Soft, Hidden bool
	// MaxCostSet is true when spec.maxCost sets MaxCost, false when it is
	// the capacity by default.
	MaxCostSet bool
	// Global is v1beta1 spec.limit.rate.scope Global: the limit is counted
	// once across the fleet's regions (limiter/regions); false counts it in
	// this region's store.
	Global bool
	// FailureMode is spec.failureMode.
	FailureMode FailureMode
	// ProblemType and ProblemDetail are spec.problem's, defaulted: what an
	// HTTP client that accepts problem details is told of a denial.
	ProblemType, ProblemDetail string
	// LocalTier is spec.localTier compiled, nil unless enabled.
	LocalTier *LocalTier
	// RequestOverrideMax is v1beta1 spec.limit.rate.requestOverride's
	// maximum, in units per Limit.Period: a request's own limit (an RLS
	// descriptor's limit field) replaces Limit.Limit for that request, at
	// most this (limiter/service override.go). 0: the policy did not opt
	// in, and a request's own limit is ignored.
	RequestOverrideMax int64
	// Priority is spec.priority compiled, nil without it.
	Priority *Priority
	// Penalty is how spec.penalty answers a penalized request, nil
	// without it; Limit.Penalty counts.
	Penalty *PenaltyAnswer
	// Source is what limiter/config compiled the policy from (its
	// defaulted spec), kept for the snapshot's document and for status:
	// the request path never reads it.
	Source any
	// Behaviours (properties.go) a policy compiled from an edge's
	// configuration (envoyproxy/ratelimit's: limiter/config erl.go) may
	// carry; a RateLimitPolicy sets none.
	Behaviours
	// ERL is what the RLS edge tells of a policy compiled from
	// envoyproxy/ratelimit configuration (erl.go), nil for a
	// RateLimitPolicy. The request path decides by the policy's other
	// fields alone: only the edge (limiter/server) reads it.
	ERL *ERL
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

// Descriptor is one entry a policy matches: its key, and its value when
// the policy gives one (else every value has its own counter).
type Descriptor struct {
	Key   string
	Value *string
}

// LocalTier is a policy's compiled two-tier mode (spec.localTier).
type LocalTier struct {
	// TTL is how long a grant lives.
	TTL time.Duration
	// Bound is the most units all pods may hold at once (maxOvershoot),
	// or -1 when it is not set.
	Bound int64
}

// PenaltyAnswer is how a policy answers a penalized request
// (spec.penalty): what counts, and for how long, is the policy's
// Limit.Penalty.
type PenaltyAnswer struct {
	// Status is the HTTP status of the HTTP check and forward-auth.
	Status int
	// Reason is X-Sluice-Reason, and the RLS dynamic metadata's reason.
	Reason string
}

// ID is "namespace/name".
func (p *Policy) ID() string {
	if p.id == "" {
		return p.Namespace + "/" + p.Name
	}
	return p.id
}

// Holds reports whether the policy holds what it takes until the request
// ends: a Concurrency lease, or a reservation.
func (p *Policy) Holds() bool { return p.LeaseEntry != "" }

// Enforcing reports whether the policy's denials deny: neither shadow nor
// soft.
func (p *Policy) Enforcing() bool { return !p.Shadow && !p.Soft }

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
	// erl, when set, matches the domain as envoyproxy/ratelimit does
	// (erl.go), instead of byKey.
	erl *ERLTree
	// hasQuotas and hasReplaces: some policy is a Quota, or Replaces
	// others (properties.go).
	hasQuotas, hasReplaces bool
	// ownLimits, when set, are the domain's policies of a request's own
	// limit by RLS unit (properties.go).
	ownLimits *[8]*Policy
}

// New indexes policies into a Snapshot, sorted by ID, with enforcement
// on; the caller sets its version and fleet settings. Each policy's ID and
// counter identity are fixed here.
func New(policies []*Policy) *Snapshot {
	snap := &Snapshot{Policies: policies, Enforcement: EnforcementEnabled, domains: map[string]*Domain{}}
	for _, p := range policies {
		p.id = p.Namespace + "/" + p.Name
		p.counterID = counterID(p)
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
		if p.Enforcing() {
			d.minMaxCost = min(d.minMaxCost, p.MaxCost)
		}
		d.hasQuotas = d.hasQuotas || p.Quota
		d.hasReplaces = d.hasReplaces || (p.Replacement != nil && len(p.Replacement.Replaces) > 0)
		if p.Holds() && !slices.Contains(d.leaseEntries, p.LeaseEntry) {
			d.leaseEntries = append(d.leaseEntries, p.LeaseEntry)
		}
		first := p.Descriptors[0].Key
		d.byKey[first] = append(d.byKey[first], p)
	}
	return snap
}

// counterID is p's identity and whatever makes its stored state
// incompatible: its algorithm and period (none for Concurrency, whose new
// lease duration keeps the leases in flight), or its calendar period and
// time zone.
func counterID(p *Policy) string {
	a := p.Limit.Algorithm
	if c := p.Limit.Calendar; !c.IsZero() {
		return fmt.Sprintf("%s|%s|%s|%s", p.id, a, c.Period, c.Location)
	}
	period := p.Limit.Period
	if a == algo.Concurrency {
		period = 0
	}
	return fmt.Sprintf("%s|%s|%d", p.id, a, period.Microseconds())
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
		v, ok := Lookup(entries, d.Key)
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
				v, _ := Lookup(entries, d.Key)
				if !yield(d.Key, v) {
					return
				}
			}
		}
	}
}

// Lookup is the value of the first entry with key.
func Lookup(entries []Entry, key string) (string, bool) {
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
	if p.ERL != nil {
		p.erlCounterKey(kb, entries)
		return kb.Key()
	}
	for i := range p.Descriptors {
		v, _ := Lookup(entries, p.Descriptors[i].Key)
		kb.Add(v)
	}
	return kb.Key()
}

// AppendMatches appends the domain's policies that entries match, in the
// snapshot's order of policies, to dst. An ERL domain (erl.go) matches at
// most one: the most specific, as envoyproxy/ratelimit does.
func (d *Domain) AppendMatches(dst []*Policy, entries []Entry) []*Policy {
	if d == nil {
		return dst
	}
	if d.erl != nil {
		if p := d.erl.match(entries); p != nil {
			dst = append(dst, p)
		}
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
