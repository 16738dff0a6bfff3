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
//   - Each namespace has a token bucket of storeCallsPerSecond store calls
//     (one per matched policy of a decision) on this pod, with one
//     second's worth of burst. Past it, the namespace's decisions are
//     answered by each policy's failure mode without calling the store
//     (failover.decide), as when the store can't answer.
//
// Both are counted in sluice_budget_exceeded_total{namespace,budget}.

// Reasons of decisions a budget made, in X-Sluice-Reason.
const (
	ReasonBudgetFailedClosed = "namespace store budget exceeded (failureMode Closed)"
	ReasonBudgetLocal        = "namespace store budget exceeded (failureMode Local)"
	ReasonBudgetFailedOpen   = "namespace store budget exceeded (failureMode Open)"
)

// Values of the budget label of sluice_budget_exceeded_total.
const (
	BudgetStoreCalls         = "storeCallsPerSecond"
	BudgetPoliciesPerRequest = "maxPoliciesPerRequest"
)

// storeBudget is one namespace's store calls per second on this pod: a
// lock-free GCRA, the theoretical arrival time of the next call in Unix
// ns. It admits rate calls per second with a burst of rate.
type storeBudget struct {
	namespace string
	rate      int32
	interval  int64 // ns per call
	window    int64 // ns of burst: one second
	tat       atomic.Int64
	exceeded  prometheus.Counter
	// last is when a call was last refused (Unix ns), 0 for never.
	last atomic.Int64
	// refused counts the calls refused since the budget was installed.
	refused atomic.Int64
}

func newStoreBudget(ns string, rate int32, exceeded prometheus.Counter) *storeBudget {
	return &storeBudget{namespace: ns, rate: rate, interval: int64(time.Second) / int64(rate), window: int64(time.Second), exceeded: exceeded}
}

// take spends one call at now, or reports that the namespace is over its
// budget.
func (b *storeBudget) take(now int64) bool {
	for {
		tat := b.tat.Load()
		next := max(tat, now) + b.interval
		if next-now > b.window {
			b.exceeded.Inc()
			b.refused.Add(1)
			b.last.Store(now)
			return false
		}
		if b.tat.CompareAndSwap(tat, next) {
			return true
		}
	}
}

// budgetMetrics are the budgets' counters.
type budgetMetrics struct {
	exceeded *prometheus.CounterVec
}

func newBudgetMetrics(reg prometheus.Registerer) *budgetMetrics {
	m := &budgetMetrics{exceeded: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_budget_exceeded_total",
		Help: "Decisions past a namespace's budget (the fleet's spec.tenantBudget), by namespace and budget: storeCallsPerSecond (a policy decision answered by its failure mode without calling the store) or maxPoliciesPerRequest (a request denied for matching too many of the namespace's policies).",
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
		if _, ok := out[p.Namespace]; ok || p.ERL != nil {
			// ERL files come from the platform team, whole: no tenant to
			// budget (and ERL's limits never fail open for want of one).
			continue
		}
		rate := budgets.For(p.Namespace).StoreCallsPerSecond
		if old, ok := prev[p.Namespace]; ok && old.rate == rate {
			out[p.Namespace] = old
			continue
		}
		out[p.Namespace] = newStoreBudget(p.Namespace, rate, s.budgetMetrics.exceeded.WithLabelValues(p.Namespace, BudgetStoreCalls))
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
		if p.ERL != nil {
			continue // at most one per descriptor: bounded by MaxDescriptors
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
