package service

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/store"
)

// Decide answers req: each descriptor is decided by every policy of the
// domain that its entries match, each spending the descriptor's cost
// (denials spend nothing). An unknown domain or an unmatched descriptor is
// allowed. A retry with the same idempotency key within the TTL replays the
// first admitted decision of each policy and consumes nothing.
//
// The only errors are those of a request ValidateShape refuses, which
// match ErrInvalidArgument and select no policy. Whatever else the client
// sent that the service won't count (see Validate, and a cost above a
// policy's maxCost) is a refusal: a denial with a reason (refuse.go).
// Store errors are resolved by each policy's failure mode.
func (s *Service) Decide(ctx context.Context, req *Request) (Response, error) {
	var resp Response
	err := s.DecideInto(ctx, req, &resp)
	return resp, err
}

// DecideInto is Decide, answering into resp and reusing the memory of its
// Decisions: an adapter that keeps its responses decides without
// allocating.
func (s *Service) DecideInto(ctx context.Context, req *Request, resp *Response) error {
	*resp = Response{Decisions: resp.Decisions[:0], Violated: resp.Violated[:0], SoftLimited: resp.SoftLimited[:0], Endings: resp.Endings[:0]}
	if err := ValidateShape(req); err != nil {
		return err
	}
	l := s.loaded.Load()
	dom := l.snap.Domain(req.Domain)
	answered, skip := s.screen(l, dom, req, resp)
	if answered {
		return nil // refused (refuse.go)
	}
	pl := s.newPlan(l, dom, req, skip, resp)
	defer s.releasePlan(pl)
	if p, i, reason := s.checkCosts(pl); reason != "" {
		s.refuse(l, dom, req, i, p, reason, true, resp)
		return nil
	}
	if s.checkMatchBudget(pl, req, resp) {
		return nil
	}
	resp.Decisions = slices.Grow(resp.Decisions, len(req.Descriptors))
	conc := s.concurrent(pl)
	if conc {
		s.decideConcurrently(ctx, pl) // concurrent.go
	}
	for i := range pl.steps {
		st := &pl.steps[i]
		if st.skip {
			// Refused, and no enforcing policy matches it: unmatched.
			resp.Decisions = append(resp.Decisions, Decision{})
			continue
		}
		var ending Decision
		if st.ends {
			// The end of a request: it ends the holdings of the holding
			// policies it matches, and every other policy it matches
			// decides it as it decides any descriptor (a lease entry
			// changes no other policy's decision).
			ending = s.endDescriptor(ctx, pl, i)
		}
		dec := s.stepDecision(ctx, pl, i, conc)
		if stricter(dec.FailureMode, resp.FailureMode) {
			resp.FailureMode = dec.FailureMode
		}
		resp.Replayed = resp.Replayed || dec.Result.Replayed
		resp.OverLimit = resp.OverLimit || dec.OverLimit
		resp.Reported.merge(&dec)
		if st.ends && dec.Policy == nil && !dec.OverLimit {
			// Nothing else matched: the descriptor's decision reports the
			// first holding it ended (told to no client: it is not
			// merged into Reported).
			dec.Policy, dec.Result, dec.Reason = ending.Policy, ending.Result, ending.Reason
		}
		resp.Decisions = append(resp.Decisions, dec)
	}
	if dom.HasQuotas() {
		quotaOver(resp)
	}
	if lt := pl.lt; lt != nil && len(lt.held) > 0 {
		if resp.OverLimit {
			s.giveBack(ctx, lt)
		} else {
			resp.Lease = lt.lease.String()
		}
	}
	return nil
}

// unlimited is the result of an Unlimited policy: allowed, nothing
// counted.
var unlimited = algo.Result{Allowed: true, Remaining: compiled.UnlimitedRemaining}

// merge adds dec, another descriptor's decision, to d, the decision
// reported to the client: the most restrictive visible policy's figures,
// and the longest wait of any denial.
func (d *Decision) merge(dec *Decision) {
	if moreRestrictive(*dec, *d) {
		d.Policy, d.Result = dec.Policy, dec.Result
		if !d.OverLimit && !dec.OverLimit {
			d.Reason = dec.Reason
		}
	}
	if dec.OverLimit && (!d.OverLimit || longerWait(dec.RetryAfter, d.RetryAfter)) {
		d.OverLimit, d.RetryAfter, d.Denied, d.Penalized, d.Reason = true, dec.RetryAfter, dec.Denied, dec.Penalized, dec.Reason
	}
	if stricter(dec.FailureMode, d.FailureMode) {
		d.FailureMode = dec.FailureMode
	}
}

// deny records in d the denial of p, whose result was r: the client must
// wait r's RetryAfter, or for a hidden policy its ResetAfter (until the
// counter is back to its full quota: the time until the next unit frees
// would tell the policy's rate; a penalty's are both its time left). The
// longest wait wins.
func (d *Decision) deny(p *compiled.Policy, r algo.Result, reason string) {
	wait := r.RetryAfter
	if p.Hidden {
		wait = r.ResetAfter
		if r.RetryAfter != algo.Never {
			wait = max(wait, r.RetryAfter)
		}
	}
	if !d.OverLimit || longerWait(wait, d.RetryAfter) {
		d.RetryAfter, d.Denied, d.Penalized, d.Reason = wait, p, r.Penalized, reason
	}
	d.OverLimit = true
}

// longerWait reports whether a client told to wait a must wait longer than
// one told b: algo.Never is longest.
func longerWait(a, b time.Duration) bool {
	return a != b && (a == algo.Never || (b != algo.Never && a > b))
}

// checkCosts finds a descriptor (not in skip) that would spend more than
// the maxCost of an enforcing policy it matches, and says why it is
// refused, naming the first such descriptor i, its cost, the policy p and
// its cap; reason is empty when none does. It runs before any decision, so
// that a refused request spends nothing. Costs within every policy's cap
// of the domain, such as the usual 1, need no matching. Shadow policies,
// and all while enforcement is off, refuse nothing: they never change an
// answer.
func (s *Service) checkCosts(pl *plan) (p *compiled.Policy, i int, reason string) {
	d := pl.dom
	if d == nil || !s.enforcing(pl.l) {
		return nil, 0, ""
	}
	for i := range pl.steps {
		st := &pl.steps[i]
		// Every cap is at least the domain's least: most requests need no
		// look at their matches.
		if st.cost <= d.MinMaxCost() || st.skip {
			continue
		}
		if p, reason := checkCost(i, st); reason != "" {
			return p, i, reason
		}
	}
	return nil, 0, ""
}

// checkCost is checkCosts for descriptors[i], st.
func checkCost(i int, st *step) (*compiled.Policy, string) {
	cost := st.cost
	for _, p := range st.matches {
		if _, ends := lookupEntry(st.entries, p.LeaseEntry); p.Holds() && ends {
			continue // a settle, charged at most p.MaxCost (endDescriptor)
		}
		if !p.Shadow && !p.Soft && cost > p.MaxCost {
			if p.Hidden {
				// Neither the cap (by default the capacity) nor the name.
				return p, fmt.Sprintf("descriptors[%d] costs %d, above the maximum cost of a hidden policy", i, cost)
			}
			return p, fmt.Sprintf("descriptors[%d] costs %d, above the maximum cost of %d of policy %s (%s)", i, cost, p.MaxCost, p.ID(), maxCostSource(p))
		}
	}
	return nil, ""
}

// maxCostSource says where p's MaxCost comes from, by its v1beta1 path:
// spec.limit.rate.cost.max, or the capacity by default, which no cost
// above could ever be allowed by.
func maxCostSource(p *compiled.Policy) string {
	switch {
	case p.MaxCostSet:
		return "spec.limit.rate.cost.max"
	case p.Limit.Algorithm.UsesBurst():
		return "spec.limit.rate.cost.max, by default the capacity, its burst"
	default:
		return "spec.limit.rate.cost.max, by default the capacity, its limit"
	}
}

// descriptorCost is the descriptor's own hits_addend when set (0 peeks),
// else the request's; a request hits_addend of 0 means 1, as in Envoy.
func descriptorCost(req *Request, d *Descriptor) int64 {
	if d.HasHitsAddend {
		return int64(d.HitsAddend)
	}
	if req.HitsAddend == 0 {
		return 1
	}
	return int64(req.HitsAddend)
}

// Check decides one descriptor: every policy of the domain that entries
// match spends cost (denials spend nothing). It never fails: store errors
// are resolved by each policy's failure mode. Policies that hold (see
// lifetime.go) are peeked at: Check answers no lease to end them with.
func (s *Service) Check(ctx context.Context, domain string, entries []compiled.Entry, cost int64) Decision {
	l := s.loaded.Load()
	if l.snap.Domain(domain) == nil {
		return Decision{}
	}
	pl := s.planOne(l, domain, entries, cost)
	defer s.releasePlan(pl)
	return s.check(ctx, pl, &pl.steps[0])
}

// check decides step st of plan pl: every policy it matches spends its
// cost, with its idempotency key (the descriptor's idempotency entry, or
// the request's). The enforcing visible policies that deny are added to
// pl.resp.Violated, and the soft ones over their threshold to
// pl.resp.SoftLimited, unless pl.resp is nil. Policies that hold take their
// holdings under pl.lt, made when first needed; with pl.noEnd, they are
// peeked at; for a step that ends holdings (endDescriptor ended them),
// they are left out.
func (s *Service) check(ctx context.Context, pl *plan, st *step) Decision {
	return s.checkWith(ctx, pl, st, &pl.sc, pl.resp)
}

// checkWith is check with scratch sc, collecting into resp (nil: none).
func (s *Service) checkWith(ctx context.Context, pl *plan, st *step, sc *scratch, resp *Response) Decision {
	l, domain, entries, cost, idem := pl.l, pl.domain, st.entries, st.cost, st.idem
	var out, visible Decision
	var mode compiled.FailureMode
	// The kill switch (this pod's or the fleet's) turns every policy into
	// a shadow policy.
	allShadow := !s.enforcing(l)
	for j, p := range st.matches {
		ps := l.policies[p]
		p, denied := requestLimit(st, p)
		var dec Decision
		switch {
		case denied != "":
			// The request's own limit allows nothing: nothing counted.
			dec = ownLimitDenial(p, denied)
		case p.Unlimited:
			// Allowed, nothing counted.
			dec = Decision{Policy: p, Result: unlimited}
		case !p.Holds():
			dec = s.decide(ctx, sc, p, ps, domain, entries, cost, idem, sc.passOf(j))
		case st.ends:
			continue
		case pl.noEnd:
			dec = s.decide(ctx, sc, p, ps, domain, entries, 0, "", budgetAsk)
		default:
			if pl.lt == nil {
				pl.lt = &lifetime{lease: newLease()}
			}
			dec = s.takeHolding(ctx, sc, p, ps, entries, cost, pl.lt)
		}
		shadow := p.Shadow || allShadow
		s.countDecision(sc, p, ps, entries, cost, &dec, shadow)
		if shadow {
			if !dec.Result.Allowed {
				s.logShadow(ps, p, domain)
			}
			if (p.ReportShadow || p.Quota) && !allShadow && moreRestrictive(dec, visible) {
				// Its figures are told, as an allowance's (a quota's
				// decide the request: quotaOver).
				visible = dec
			}
			continue
		}
		if p.Soft {
			// Over a soft limit: allowed, and marked.
			if !dec.Result.Allowed {
				out.SoftLimited = true
				if resp != nil && !slices.Contains(resp.SoftLimited, p) {
					resp.SoftLimited = append(resp.SoftLimited, p)
				}
			}
			continue
		}
		if !p.Hidden && stricter(p.FailureMode, mode) {
			// A hidden policy's failure mode is not told either.
			mode = p.FailureMode
		}
		if !dec.Result.Allowed {
			out.deny(p, dec.Result, dec.Reason)
			if resp != nil && !p.Hidden && !slices.Contains(resp.Violated, p) {
				resp.Violated = append(resp.Violated, p)
			}
		}
		if !p.Hidden && moreRestrictive(dec, visible) {
			visible = dec
		}
	}
	out.FailureMode = mode
	// Shadow policies are invisible to clients: their decisions are only
	// counted and logged, so that headers never make a client back off.
	// Hidden policies only deny, and say when to come back.
	out.Policy, out.Result = visible.Policy, visible.Result
	if !out.OverLimit {
		out.Reason = visible.Reason
	}
	return out
}

// countDecision counts dec, p's decision of entries at cost: in p's
// stats, its priority level's, the hottest values' and, for a policy with
// HitStats, its hit statistics (hitstats.go).
func (s *Service) countDecision(sc *scratch, p *compiled.Policy, ps *policyState, entries []compiled.Entry, cost int64, dec *Decision, shadow bool) {
	if p.HitStats {
		s.hitStats.count(p, entries, cost, dec)
	}
	ps.stats.count(dec, p.Limit, shadow, p.Soft)
	countLevel(ps.levels, sc.level, dec, shadow, p.Soft)
	if s.opts.Top.K > 0 {
		ps.stats.countTop(s.topClock(), sc.key, p, entries, dec)
	}
}

// decide runs one policy against its store, whose failure mode answers
// when the store can't; pass is what the namespace's store budget said
// of it in advance (budgetAsk: ask it now).
func (s *Service) decide(ctx context.Context, sc *scratch, p *compiled.Policy, ps *policyState, domain string, entries []compiled.Entry, cost int64, idem string, pass budgetPass) Decision {
	req := store.Request{Key: p.CounterKey(&sc.kb, entries), Limit: p.Limit, Cost: cost, Tenant: p.Namespace}
	sc.key = req.Key
	req.Limit.Headroom, sc.level = priorityHeadroom(p, entries)
	if idem != "" {
		req.Idempotency = idempotencyRecord(&sc.kb, domain, p, req.Key, entries, cost, idem)
		req.IdempotencyTTL, req.IdempotencyMaxReplays, req.IdempotencyMaxRecords = s.opts.IdempotencyTTL, s.opts.IdempotencyMaxReplays, s.opts.IdempotencyMaxRecords
	}
	r, reason := ps.store.decide(ctx, req, pass)
	return Decision{Policy: p, Result: r, Reason: reason}
}

// release clears sc's references and returns it to the pool.
func (s *Service) release(sc *scratch) {
	clear(sc.matches)
	clear(sc.entries)
	sc.entries = sc.entries[:0]
	s.scratch.Put(sc)
}

// moreRestrictive orders the reported policies' decisions: a denial beats
// an allowance, a longer retry beats a shorter one, and fewer remaining
// units beat more.
func moreRestrictive(a, b Decision) bool {
	switch {
	case b.Policy == nil:
		return a.Policy != nil
	case a.Policy == nil:
		return false
	case a.Result.Allowed != b.Result.Allowed:
		return !a.Result.Allowed
	case !a.Result.Allowed && a.Result.RetryAfter != b.Result.RetryAfter:
		return longerWait(a.Result.RetryAfter, b.Result.RetryAfter)
	default:
		return a.Result.Remaining < b.Result.Remaining
	}
}
