package service

// Descriptors decided concurrently (issue 42): a request's descriptors
// are decided each on its own goroutine, under one store.Gather, so that a
// store that gathers (Redis: store.Gatherer) sends their calls in one
// round trip rather than one after another. Invariants:
//   - Only a store that gathers, and only a request whose order can't
//     change an answer: at least two descriptors that match policies, no
//     holding policy matched, no lease ended, no policy reaching the store
//     another way than directly (the local tier, the regions: their calls
//     may wait on other requests'), and no counter taken by two
//     descriptors (their order would decide which is denied). Anything
//     else, and one descriptor, is decided serially as before.
//   - Each step has its own scratch, decision and violated and
//     soft-limited policies; DecideInto merges them in descriptor order,
//     as the serial path makes them. Stats are counted once per policy
//     decision, by check.
//   - The namespaces' store budgets (budget.go) are asked for every
//     decision of the gathered steps before any goroutine starts, in
//     descriptor order, then policy order (spendAhead), and each decision
//     uses its answer: when a budget has calls for only some of them, the
//     first take them, as on the serial path (on a stopped clock, the
//     same ones), never whichever goroutine comes first.

import (
	"context"
	"slices"

	"github.com/sluice-dev/sluice/limiter/store"
)

// parStep is a step decided concurrently: its scratch, its decision, and
// in col the policies it violated and soft-limited.
type parStep struct {
	sc  scratch
	dec Decision
	col Response
	run bool
}

// budgetPass is what a namespace's store budget said of a decision.
type budgetPass int8

const (
	// budgetAsk: not asked yet; the decision asks when it is made.
	budgetAsk budgetPass = iota
	// budgetTaken: asked in advance; the decision may call the store.
	budgetTaken
	// budgetRefused: asked in advance; the decision is made past the
	// budget.
	budgetRefused
)

// passOf is what the budget said in advance of match j's decision.
func (sc *scratch) passOf(j int) budgetPass {
	if j < len(sc.pre) {
		return sc.pre[j]
	}
	return budgetAsk
}

// spendAhead asks the store budgets, into ps.sc.pre, for the decisions
// step st will make on its goroutine: those check would send to a store
// (a request's own limit that allows nothing, and an Unlimited policy,
// make none; a holding policy is never gathered).
func (s *Service) spendAhead(pl *plan, st *step, ps *parStep) {
	ps.sc.pre = ps.sc.pre[:0]
	for _, p := range st.matches {
		f := pl.l.policies[p].store
		pass := budgetAsk
		if p, denied := requestLimit(st, p); f.budget != nil && denied == "" && !p.Unlimited && !p.Holds() {
			pass = f.spendAhead(p.CounterKey(&ps.sc.kb, st.entries), st.cost)
		}
		ps.sc.pre = append(ps.sc.pre, pass)
	}
}

// maxGathered bounds the counters compared by concurrent: a request of
// more is decided serially.
const maxGathered = 32

// gathered reports whether st is decided on its own goroutine.
func gathered(st *step) bool {
	return !st.skip && len(st.matches) > 0
}

// concurrent reports whether pl's steps are decided concurrently (see
// the invariants above).
func (s *Service) concurrent(pl *plan) bool {
	if !s.gathers || len(pl.steps) < 2 {
		return false
	}
	var buf [maxGathered]store.Key
	keys := buf[:0]
	n := 0
	for i := range pl.steps {
		st := &pl.steps[i]
		if !gathered(st) {
			continue
		}
		if st.ends {
			return false
		}
		n++
		for _, p := range st.matches {
			if p.Holds() || pl.l.policies[p].store.next != s.store {
				// A hold, or a way to the store (the local tier, the
				// regions) whose calls may wait on another request's:
				// a gathered call waits on every party of its gather.
				return false
			}
			p, denied := requestLimit(st, p)
			if denied != "" || p.Unlimited {
				continue // no counter taken
			}
			if len(keys) == maxGathered {
				return false
			}
			k := p.CounterKey(&pl.sc.kb, st.entries)
			if slices.Contains(keys, k) {
				return false
			}
			keys = append(keys, k)
		}
	}
	return n >= 2
}

// decideConcurrently decides pl's gathered steps concurrently into
// pl.par, the first on this goroutine, and merges their violated and
// soft-limited policies into pl.resp in descriptor order.
func (s *Service) decideConcurrently(ctx context.Context, pl *plan) {
	n := len(pl.steps)
	pl.par = slices.Grow(pl.par[:0], n)[:n]
	parties := 0
	for i := range pl.steps {
		pl.par[i].run = gathered(&pl.steps[i])
		if pl.par[i].run {
			parties++
			s.spendAhead(pl, &pl.steps[i], &pl.par[i]) // in descriptor order
		}
	}
	pl.gather.Reset(parties)
	gctx := store.WithGather(ctx, &pl.gather)
	wg := &pl.wg
	first := -1
	for i := range pl.par {
		switch {
		case !pl.par[i].run:
		case first < 0:
			first = i
		default:
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.runStep(gctx, pl, i)
			}()
		}
	}
	s.runStep(gctx, pl, first)
	wg.Wait()
	if resp := pl.resp; resp != nil {
		for i := range pl.par {
			col := &pl.par[i].col
			for _, p := range col.Violated {
				if !slices.Contains(resp.Violated, p) {
					resp.Violated = append(resp.Violated, p)
				}
			}
			for _, p := range col.SoftLimited {
				if !slices.Contains(resp.SoftLimited, p) {
					resp.SoftLimited = append(resp.SoftLimited, p)
				}
			}
		}
	}
}

// runStep decides step i, a party of pl.gather, into pl.par[i].
func (s *Service) runStep(ctx context.Context, pl *plan, i int) {
	defer pl.gather.Done()
	ps := &pl.par[i]
	ps.col.Violated, ps.col.SoftLimited = ps.col.Violated[:0], ps.col.SoftLimited[:0]
	var col *Response
	if pl.resp != nil {
		col = &ps.col
	}
	ps.dec = s.checkWith(ctx, pl, &pl.steps[i], &ps.sc, col)
}

// stepDecision is step i's decision: decided already when it was
// gathered (conc), else now.
func (s *Service) stepDecision(ctx context.Context, pl *plan, i int, conc bool) Decision {
	if conc && pl.par[i].run {
		return pl.par[i].dec
	}
	return s.check(ctx, pl, &pl.steps[i])
}

// releasePar clears pl.par's references.
func releasePar(pl *plan) {
	for i := range pl.par {
		ps := &pl.par[i]
		clear(ps.col.Violated)
		clear(ps.col.SoftLimited)
		ps.dec, ps.run = Decision{}, false
		ps.sc.pre = ps.sc.pre[:0]
		ps.col = Response{Violated: ps.col.Violated[:0], SoftLimited: ps.col.SoftLimited[:0]}
		ps.sc.key = store.Key{}
	}
	pl.par = pl.par[:0]
}
