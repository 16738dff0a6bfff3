package service

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/compiled"
)

// The limiter limits itself: each namespace's policies have a budget,
// set by the platform team on the fleet (spec.tenantBudget) and carried in
// the snapshot (compiled.Budgets), so that one tenant's policies and
// requests can't take the work of the others'.
//
//   - A request may match at most maxPoliciesPerRequest policies of each
//     namespace. One that matches more is denied with a reason before any
//     store call (checkMatchBudget): no policy is skipped silently.
//   - Each namespace has a token bucket of storeCallsPerSecond decisions
//     against the store (one per matched policy of a decision that spends
//     units) on this pod, with one second's worth of burst. Past it, a
//     decision is made without calling the store, and running out of
//     budget opens no limit (failover.pastBudget): a key the store lately
//     said is over its limit stays denied until the store said it would
//     admit again (denials.go), and the rest is decided against this pod's
//     share of the limit in memory, as failureMode Local does, whatever
//     the policy's failureMode (Closed denies). That share starts afresh:
//     a key that spent part of its limit at the store may get up to the
//     share more in a period, as under Local while the store is down.
//   - Peeks (cost 0: the status peek, explain, a descriptor's hits_addend
//     of 0), which admit nothing, are metered apart, at a tenth of the
//     rate: they never take from the decisions. Past their own budget they
//     answer this pod's figures, saying the store was not read.
//   - Within a namespace, one key's flood can't spend its neighbours'
//     calls (fairBucket): each key is metered by two of budgetShares
//     shares, chosen by a keyed hash; a call whose two shares are spent
//     may take from the bucket only while it holds more than half its
//     burst, which is kept for the calls within their shares.
//
// What each refuses is counted in
// sluice_budget_exceeded_total{namespace,budget}.

// Reasons of decisions a budget made, in X-Sluice-Reason.
const (
	// ReasonBudgetLocal is a decision against this pod's share of the
	// limit, in memory.
	ReasonBudgetLocal = "namespace store budget exceeded (decided against this pod's share of the limit)"
	// ReasonBudgetDenied is a denial because the store's last answer for
	// the key, still in force, was that it is over its limit.
	ReasonBudgetDenied = "namespace store budget exceeded (over limit at the store's last answer)"
	// ReasonBudgetFailedClosed is a denial of a policy of failureMode
	// Closed, which never decides from anything but the store.
	ReasonBudgetFailedClosed = "namespace store budget exceeded (failureMode Closed)"
	// ReasonBudgetNoShare is a denial by a service without the memory
	// store of the pod's share (Options.Fallback).
	ReasonBudgetNoShare = "namespace store budget exceeded (no share of the limit to decide against)"
	// ReasonPeekBudget is a peek past the namespace's peek budget: the
	// store was not read, and the figures are this pod's (its share of
	// the limit, or the store's last denial).
	ReasonPeekBudget = "namespace peek budget exceeded (the store was not read: this pod's figures)"
)

// Values of the budget label of sluice_budget_exceeded_total.
const (
	BudgetStoreCalls         = "storeCallsPerSecond"
	BudgetStorePeeks         = "storePeeksPerSecond"
	BudgetPoliciesPerRequest = "maxPoliciesPerRequest"
)

// budgetShares is how many shares a namespace's budget is metered in, and
// peeksPerCall how many decisions' budget one peek gets: a namespace may
// peek at rate/peeksPerCall (at least 1) a second.
const (
	budgetShares = 16
	peeksPerCall = 10
)

// gcra is a lock-free token bucket in its virtual-scheduling form: tat is
// the theoretical arrival time of the next call (Unix ns), each call
// moves it by interval, and a call is refused when that would put it more
// than a given part of window (the burst) ahead of now.
type gcra struct {
	interval, window int64
	tat              atomic.Int64
}

// take spends one call at now unless that would leave more than limit ns
// of the window in use.
func (g *gcra) take(now, limit int64) bool {
	for {
		tat := g.tat.Load()
		next := max(tat, now) + g.interval
		if next-now > limit {
			return false
		}
		if g.tat.CompareAndSwap(tat, next) {
			return true
		}
	}
}

// fairBucket is a token bucket of rate calls a second with a second's
// worth of burst, shared fairly among keys in bounded memory: each key is
// metered by two of budgetShares shares of rate/budgetShares a second
// (each with a second's worth of burst, at least one call), picked by its
// hash. A call
// within one of its shares may empty the bucket; a call whose shares are
// spent (a key, or a few, taking more than their part) may take only
// while the bucket is more than half full (unfair). So a flood of one key
// takes what the others leave, and the others keep at least their
// shares: a key whose two shares are both a flooder's (1 in
// budgetShares·(budgetShares-1)/2, 120, for a random key) is the only one
// that competes with it.
type fairBucket struct {
	bucket gcra
	unfair int64
	shares [budgetShares]gcra
}

func (b *fairBucket) init(rate int64) {
	b.bucket.interval, b.bucket.window = int64(time.Second)/rate, int64(time.Second)
	// A budget of one call a second has no half to keep.
	b.unfair = max(b.bucket.window/2, b.bucket.interval)
	// Each share's burst is its second's worth, rounded up: together they
	// cover the bucket's.
	share := int64(time.Second) * budgetShares / rate
	burst := (rate + budgetShares - 1) / budgetShares
	for i := range b.shares {
		b.shares[i].interval, b.shares[i].window = share, share*burst
	}
}

// take spends one call at now for the key of hash h, or reports that it
// may not.
func (b *fairBucket) take(now int64, h uint64) bool {
	first, second := shareIndexes(h)
	limit := b.unfair
	if s := &b.shares[first]; s.take(now, s.window) {
		limit = b.bucket.window
	} else if s := &b.shares[second]; s.take(now, s.window) {
		limit = b.bucket.window
	}
	return b.bucket.take(now, limit)
}

// shareIndexes are the two distinct shares of the key of hash h.
func shareIndexes(h uint64) (int, int) {
	first := int(h % budgetShares)
	second := (first + 1 + int((h/budgetShares)%(budgetShares-1))) % budgetShares
	return first, second
}

// storeBudget is one namespace's store calls per second on this pod:
// decisions (calls) and peeks, each a fairBucket.
type storeBudget struct {
	namespace string
	rate      int32
	calls     fairBucket
	peeks     fairBucket
	exceeded  prometheus.Counter // decisions past calls
	peeksOver prometheus.Counter // peeks past peeks
	// last is when a decision was last refused a call (Unix ns), 0 for
	// never.
	last atomic.Int64
	// refused counts the decisions refused a call since the budget was
	// installed.
	refused atomic.Int64
}

func newStoreBudget(ns string, rate int32, exceeded, peeksOver prometheus.Counter) *storeBudget {
	b := &storeBudget{namespace: ns, rate: rate, exceeded: exceeded, peeksOver: peeksOver}
	b.calls.init(int64(rate))
	b.peeks.init(max(1, int64(rate)/peeksPerCall))
	return b
}

// take spends one call at now for a decision on the key of hash h, or
// reports that the namespace is over its budget.
func (b *storeBudget) take(now int64, h uint64) bool {
	if b.calls.take(now, h) {
		return true
	}
	b.exceeded.Inc()
	b.refused.Add(1)
	b.last.Store(now)
	return false
}

// takePeek is take for a peek, from the peeks' budget.
func (b *storeBudget) takePeek(now int64, h uint64) bool {
	if b.peeks.take(now, h) {
		return true
	}
	b.peeksOver.Inc()
	return false
}

// budgetMetrics are the budgets' counters.
type budgetMetrics struct {
	exceeded *prometheus.CounterVec
}

func newBudgetMetrics(reg prometheus.Registerer) *budgetMetrics {
	m := &budgetMetrics{exceeded: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_budget_exceeded_total",
		Help: "Calls past a namespace's budget (the fleet's spec.tenantBudget), by namespace and budget: storeCallsPerSecond (a policy decision made without the store: the store's last denial, or this pod's share of the limit; failureMode Closed denies), storePeeksPerSecond (a peek answered without reading the store) or maxPoliciesPerRequest (a request denied for matching too many of the namespace's policies).",
	}, []string{"namespace", "budget"})}
	if reg != nil {
		reg.MustRegister(m.exceeded)
	}
	return m
}

// storeBudgets builds, for the namespaces of snap's policies, their store
// budgets under budgets, keeping the state of prev's where the rate is unchanged (a
// new snapshot does not refill a bucket). nil without budgets.
func (s *Service) storeBudgets(snap *compiled.Snapshot, budgets *compiled.Budgets, prev map[string]*storeBudget) map[string]*storeBudget {
	if budgets == nil {
		return nil
	}
	out := map[string]*storeBudget{}
	for _, p := range snap.Policies {
		if _, ok := out[p.Namespace]; ok || p.Untenanted {
			// No tenant to budget (an ERL file comes from the platform
			// team, whole; its limits never fail open for want of one).
			continue
		}
		rate := budgets.For(p.Namespace).StoreCallsPerSecond
		if old, ok := prev[p.Namespace]; ok && old.rate == rate {
			out[p.Namespace] = old
			continue
		}
		out[p.Namespace] = newStoreBudget(p.Namespace, rate, s.budgetMetrics.exceeded.WithLabelValues(p.Namespace, BudgetStoreCalls),
			s.budgetMetrics.exceeded.WithLabelValues(p.Namespace, BudgetStorePeeks))
	}
	// The series of a namespace with no policy left go with it.
	for ns := range prev {
		if _, ok := out[ns]; !ok {
			s.budgetMetrics.exceeded.DeletePartialMatch(prometheus.Labels{"namespace": ns})
		}
	}
	return out
}

// checkMatchBudget denies req, answering into resp, when one of its
// namespaces' policies are matched by its descriptors more times than
// that namespace's maxPoliciesPerRequest, and reports whether it did. It
// runs before any decision: a denied request spends nothing. A domain
// with few policies needs no matching to know it is within budget.
func (s *Service) checkMatchBudget(pl *plan, req *Request, resp *Response) bool {
	l, d := pl.l, pl.dom
	b := l.budgetCfg
	if b == nil || d == nil || !s.enforcing(l) {
		return false
	}
	if int64(len(req.Descriptors))*int64(len(d.Policies)) <= int64(l.minMatchBudget) {
		return false
	}
	// Count per namespace; a request matches few namespaces.
	type tally struct {
		ns   string
		n    int32
		over *compiled.Policy // the first policy past the budget
	}
	var tallies []tally
	// Shadow policies count too: they cost the same work.
	for _, p := range pl.matches {
		if p.Untenanted {
			continue // no tenant (an ERL domain's: at most one per descriptor)
		}
		k := -1
		for j := range tallies {
			if tallies[j].ns == p.Namespace {
				k = j
				break
			}
		}
		if k < 0 {
			tallies = append(tallies, tally{ns: p.Namespace})
			k = len(tallies) - 1
		}
		tallies[k].n++
		if tallies[k].over == nil && tallies[k].n > b.For(p.Namespace).MaxPoliciesPerRequest {
			tallies[k].over = p
		}
	}
	for _, t := range tallies {
		if t.over == nil {
			continue
		}
		most := b.For(t.ns).MaxPoliciesPerRequest
		s.budgetMetrics.exceeded.WithLabelValues(t.ns, BudgetPoliciesPerRequest).Inc()
		reason := fmt.Sprintf("request matches %d policies of namespace %s, above its budget of %d per request (spec.tenantBudget.maxPoliciesPerRequest)", t.n, t.ns, most)
		resp.OverLimit = true
		for range req.Descriptors {
			dec := Decision{OverLimit: true, RetryAfter: time.Second, Denied: t.over, Reason: reason, FailureMode: t.over.FailureMode,
				Result: algo.Result{RetryAfter: time.Second}}
			resp.Decisions = append(resp.Decisions, dec)
		}
		resp.Reported = resp.Decisions[0]
		return true
	}
	return false
}

// BudgetExceeded is a namespace whose store budget refused calls on this
// pod in the last DegradedWindow.
type BudgetExceeded struct {
	Namespace string
	// StoreCallsPerSecond is the budget; Refused counts the calls it
	// refused since it was installed.
	StoreCallsPerSecond int32
	Refused             int64
	Last                time.Time
}

// BudgetsExceeded lists the namespaces over their store budget in the
// last DegradedWindow, by namespace.
func (s *Service) BudgetsExceeded() []BudgetExceeded {
	l := s.loaded.Load()
	if l.snap == nil {
		return nil
	}
	now := time.Now().UnixNano()
	var out []BudgetExceeded
	seen := map[string]bool{}
	for _, p := range l.snap.Policies {
		b := l.budgets[p.Namespace]
		if b == nil || seen[p.Namespace] {
			continue
		}
		seen[p.Namespace] = true
		if last := b.last.Load(); last != 0 && now-last <= int64(DegradedWindow) {
			out = append(out, BudgetExceeded{Namespace: p.Namespace, StoreCallsPerSecond: b.rate, Refused: b.refused.Load(), Last: time.Unix(0, last)})
		}
	}
	return out
}
