package service

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/tracing"
)

// Reasons of decisions made by a failure mode, in X-Sluice-Reason.
const (
	ReasonFailedClosed = "store unavailable (failureMode Closed)"
	ReasonLocal        = "store unavailable (failureMode Local)"
	ReasonFailedOpen   = "store unavailable (failureMode Open)"
)

// failover is one policy's store with the policy's failure mode around it:
// a store.Store whose Take never fails. While the store (or the local tier
// in front of it) can't decide, Open allows, Closed denies for a second,
// and Local decides against this pod's share of the limit (limit / ready
// pods) in the fallback store. Every such decision is counted, and starts
// or extends the policy's degraded episode.
type failover struct {
	next     store.Store
	policy   string
	mode     compiled.FailureMode
	fallback store.Store   // nil: Local allows, as Open does
	pods     *atomic.Int64 // ready pods, the divisor of Local
	stats    *policyStats  // nil with Options.DisablePolicyStats
	errors   storeErrorCounters
	log      *slog.Logger
	// budget is the store budget of the policy's namespace, nil for none:
	// past it, the decision is made without calling the store
	// (pastBudget), from denials, the store's last denials, and this
	// pod's share of the limit; both are set together.
	budget  *storeBudget
	denials *denials
	// clock is the budget's clock (the service's).
	clock func() time.Time

	// The current degraded episode (Unix ns): its first and last fallback
	// decisions and their count.
	degradedSince, lastFallback, fallbacks atomic.Int64
	// overBudget is true when the last fallback decision was the
	// namespace's store budget's, not the store's.
	overBudget atomic.Bool
	// tracing makes each store call a child span (Options.Tracing).
	tracing bool
}

var _ store.Store = (*failover)(nil)

// newFailover wraps next, policy p's way to its counters, in p's failure
// mode.
func (s *Service) newFailover(p *compiled.Policy, next store.Store, stats *policyStats) *failover {
	return &failover{next: next, policy: p.ID(), mode: p.FailureMode, fallback: s.fallback, pods: &s.readyPods,
		stats: stats, errors: s.metrics.storeErrors, log: s.log, tracing: s.opts.Tracing, clock: s.clock}
}

// Take decides req in the store, or by the failure mode when the store
// can't. It never fails.
func (f *failover) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	r, _ := f.decide(ctx, req, budgetAsk)
	return r, nil
}

// Close does nothing: the store is the caller's.
func (f *failover) Close() error { return nil }

// decide is Take, with the reason of a decision the failure mode made
// (empty when the store decided); pass is what the namespace's store
// budget said of it in advance (budgetAsk: ask it now).
func (f *failover) decide(ctx context.Context, req store.Request, pass budgetPass) (algo.Result, string) {
	if !f.tracing {
		return f.decideStore(ctx, req, pass)
	}
	ctx, sp := tracing.StartStore(ctx)
	r, reason := f.decideStore(ctx, req, pass)
	if sp.Recording() {
		sp.Set(attribute.String("sluice.policy", f.policy), attribute.Int64("sluice.cost", req.Cost),
			attribute.Bool("sluice.allowed", r.Allowed), attribute.Int64("sluice.remaining", r.Remaining))
		if reason != "" {
			sp.Set(attribute.String("sluice.failure_mode", string(f.mode)), attribute.String("sluice.reason", reason))
		}
		sp.End()
	}
	return r, reason
}

// decideStore is decide, untraced.
func (f *failover) decideStore(ctx context.Context, req store.Request, pass budgetPass) (algo.Result, string) {
	var (
		h   uint64
		now int64
	)
	if f.budget != nil {
		h, now = f.denials.hash(req.Key), f.clock().UnixNano()
		if pass == budgetAsk {
			pass = f.spend(h, now, req.Cost)
		}
		switch {
		case pass == budgetTaken:
		case req.Cost == 0:
			return f.peekPastBudget(ctx, req, h, now)
		default:
			return f.pastBudget(ctx, req, h, now)
		}
	}
	r, err := f.next.Take(ctx, req)
	if err == nil {
		if f.budget != nil {
			f.denials.note(h, &req, r, now)
		}
		return r, ""
	}
	if f.tracing {
		tracing.FromContext(ctx).Fail(err)
	}
	f.errors.inc(err)
	f.log.Debug("Store error: the policy's failureMode decides", "policy", f.policy, "failureMode", f.mode, "error", err)
	f.noteFallback()
	f.overBudget.Store(false)
	return f.fallBack(ctx, req, ReasonFailedClosed, ReasonLocal, ReasonFailedOpen)
}

// spend takes a call at now for a decision of cost on the key of hash h
// from the namespace's store budget. A peek (cost 0) admits nothing: it
// takes from the peeks' budget, never the decisions'.
func (f *failover) spend(h uint64, now, cost int64) budgetPass {
	ok := false
	if cost == 0 {
		ok = f.budget.takePeek(now, h)
	} else {
		ok = f.budget.take(now, h)
	}
	if ok {
		return budgetTaken
	}
	return budgetRefused
}

// spendAhead is spend for a decision to be made later on key at cost
// (concurrent.go): budgetAsk without a budget.
func (f *failover) spendAhead(key store.Key, cost int64) budgetPass {
	if f.budget == nil {
		return budgetAsk
	}
	return f.spend(f.denials.hash(key), f.clock().UnixNano(), cost)
}

// pastBudget decides req, of the key of hash h, at now, without calling
// the store: the namespace is over its store budget on this pod. Whatever
// the failure mode, running out of budget opens no limit: a key the store
// lately said is over its limit stays denied until the store said it
// would admit again (denials), and the rest is decided against this pod's
// share of the limit in the fallback store, as failureMode Local does.
// Closed denies, as it does whenever the store can't decide, and so does
// a service without a fallback store, which has no share to decide
// against.
func (f *failover) pastBudget(ctx context.Context, req store.Request, h uint64, now int64) (algo.Result, string) {
	f.noteFallback()
	f.overBudget.Store(true)
	if f.mode == compiled.FailClosed || f.fallback == nil {
		if f.stats != nil {
			f.stats.failedClosed.Add(1)
		}
		if f.mode == compiled.FailClosed {
			return algo.Result{RetryAfter: time.Second}, ReasonBudgetFailedClosed
		}
		return algo.Result{RetryAfter: time.Second}, ReasonBudgetNoShare
	}
	if f.stats != nil {
		f.stats.localFallback.Add(1)
	}
	if r, ok := f.denials.lookup(h, &req, now); ok {
		return r, ReasonBudgetDenied
	}
	req.Limit = localShare(req.Limit, f.pods.Load())
	r, _ := f.fallback.Take(ctx, req) // a memory store never fails
	return r, ReasonBudgetLocal
}

// peekPastBudget answers a peek past the namespace's peek budget without
// reading the store: the store's last denial of the key when one is in
// force, else this pod's share of the limit, as a decision past the budget
// would be decided. It is no fallback decision: it admits nothing.
func (f *failover) peekPastBudget(ctx context.Context, req store.Request, h uint64, now int64) (algo.Result, string) {
	if r, ok := f.denials.lookup(h, &req, now); ok {
		return r, ReasonPeekBudget
	}
	if f.fallback == nil {
		return algo.Result{Allowed: true, Remaining: req.Limit.Capacity()}, ReasonPeekBudget
	}
	req.Limit = localShare(req.Limit, f.pods.Load())
	r, _ := f.fallback.Take(ctx, req)
	return r, ReasonPeekBudget
}

// fallBack answers req by the failure mode, with the reason of each mode.
func (f *failover) fallBack(ctx context.Context, req store.Request, closed, local, open string) (algo.Result, string) {
	switch {
	case f.mode == compiled.FailClosed:
		if f.stats != nil {
			f.stats.failedClosed.Add(1)
		}
		return algo.Result{RetryAfter: time.Second}, closed
	case f.mode == compiled.FailLocal && f.fallback != nil:
		if f.stats != nil {
			f.stats.localFallback.Add(1)
		}
		req.Limit = localShare(req.Limit, f.pods.Load())
		r, _ := f.fallback.Take(ctx, req) // a memory store never fails
		return r, local
	default:
		if f.stats != nil {
			f.stats.failedOpen.Add(1)
		}
		return algo.Result{Allowed: true, Remaining: req.Limit.Capacity()}, open
	}
}

// noteFallback records a decision made by the failure mode. An episode
// starts when the last fallback is older than DegradedWindow.
func (f *failover) noteFallback() {
	now := time.Now().UnixNano()
	if last := f.lastFallback.Swap(now); now-last > int64(DegradedWindow) {
		f.degradedSince.Store(now)
		f.fallbacks.Store(0)
	}
	f.fallbacks.Add(1)
}

// localShare is this pod's share of a limit among pods: limit and burst
// divided by pods, rounded to the nearest unit, at least 1; a headroom
// (priority shedding) divided the same way, at most the capacity.
func localShare(l algo.Limit, pods int64) algo.Limit {
	if pods <= 1 {
		return l
	}
	share := func(n int64) int64 { return max(1, (n+pods/2)/pods) }
	l.Limit, l.Burst = share(l.Limit), share(l.Burst)
	if l.Headroom > 0 {
		l.Headroom = min(l.Capacity(), (l.Headroom+pods/2)/pods)
	}
	return l
}

// DegradedPolicy is a policy whose decisions are made without the store:
// by its failure mode because the store can't answer, or past its
// namespace's store budget (pastBudget).
type DegradedPolicy struct {
	Policy      string
	FailureMode compiled.FailureMode
	// Since is the first fallback decision of this episode; Fallbacks
	// counts them since.
	Since     time.Time
	Fallbacks int64
	// Hidden is true for a hidden policy: DegradedDetail, which /readyz
	// on the data plane shows, leaves it out.
	Hidden bool
	// Cause is why: CauseStoreUnavailable, or CauseBudgetExceeded when
	// the last fallback decision was the namespace's store budget's.
	Cause string
}

// Causes of a degraded policy.
const (
	CauseStoreUnavailable = "store unavailable"
	CauseBudgetExceeded   = "namespace store budget exceeded"
)

// Degraded lists the policies with a fallback decision in the last
// DegradedWindow, by policy.
func (s *Service) Degraded() []DegradedPolicy {
	l := s.loaded.Load()
	if l.snap == nil {
		return nil
	}
	now := time.Now().UnixNano()
	var out []DegradedPolicy
	for _, p := range l.snap.Policies {
		f := l.policies[p].store
		if last := f.lastFallback.Load(); last == 0 || now-last > int64(DegradedWindow) {
			continue
		}
		cause := CauseStoreUnavailable
		if f.overBudget.Load() {
			cause = CauseBudgetExceeded
		}
		out = append(out, DegradedPolicy{Policy: p.ID(), FailureMode: p.FailureMode, Hidden: p.Hidden,
			Since: time.Unix(0, f.degradedSince.Load()), Fallbacks: f.fallbacks.Load(), Cause: cause})
	}
	return out
}

// DegradedDetail describes Degraded for /readyz, which the data plane
// serves: hidden policies are left out (the admin plane lists them).
func (s *Service) DegradedDetail() string {
	var parts []string
	for _, d := range s.Degraded() {
		if d.Hidden {
			continue
		}
		how := "failureMode " + string(d.FailureMode)
		if d.Cause == CauseBudgetExceeded && d.FailureMode != compiled.FailClosed {
			// Past the budget, only Closed answers by its failure mode.
			how = "decided against the store's last denials and this pod's share"
		}
		parts = append(parts, fmt.Sprintf("%s runs degraded (%s, %s, %d fallback decisions since %s)",
			d.Policy, d.Cause, how, d.Fallbacks, d.Since.UTC().Format(time.RFC3339)))
	}
	if len(parts) == 0 {
		return "no policy degraded: the store decides"
	}
	return strings.Join(parts, "; ")
}
