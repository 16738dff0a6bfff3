package service

import (
	"slices"
	"sync"

	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/store"
)

// A plan is a request compiled once, after it is screened (refuse.go):
// each descriptor's step holds its entries with the idempotency entry
// taken out, its idempotency key, its cost, whether it ends a request's
// holdings, and the policies it matches. The caps (checkCosts), the
// budget (checkMatchBudget), the holdings' ends and the decisions (check)
// read the plan: none of them splits or matches entries again.
type plan struct {
	l      *loaded
	dom    *compiled.Domain
	domain string
	steps  []step
	// resp, when set, collects the violated and soft-limited policies.
	resp *Response
	// noEnd: holding policies are peeked at (Request.NoEnd, Check); else
	// they take their holdings under lt, made when first needed.
	noEnd bool
	lt    *lifetime
	// matches and entries hold every step's, each a window of them.
	matches []*compiled.Policy
	entries []compiled.Entry
	// drop marks the matches another match replaces (replace.go).
	drop []bool
	sc   scratch
	// par and gather decide the steps concurrently (concurrent.go).
	par    []parStep
	gather store.Gather
	wg     sync.WaitGroup
}

// step is one descriptor of a plan.
type step struct {
	entries []compiled.Entry
	idem    string
	cost    int64
	matches []*compiled.Policy
	// ends: the descriptor carries a lease entry of the domain, and ends
	// the holdings of the holding policies it matches.
	ends bool
	// skip: refused, and no enforcing policy matches it: unmatched.
	skip bool
	// from and to are matches' window in plan.matches.
	from, to int
	// override is the descriptor's own limit in a domain that decides
	// own limits (its one match is the domain's policy of the limit's
	// unit: override.go), -1 for none.
	override int64
	// own is the descriptor's own limit in other domains, when hasOwn:
	// the policies that opted in take it (override.go).
	own    compiled.UnitRate
	hasOwn bool
}

// newPlan compiles req, screened, whose refused descriptors skip marks;
// release it when done. A descriptor with more than MaxEntries entries is
// not matched: it is refused, and matching it would cost what its client
// chooses.
func (s *Service) newPlan(l *loaded, dom *compiled.Domain, req *Request, skip uint32, resp *Response) *plan {
	pl := s.plans.Get().(*plan)
	pl.l, pl.dom, pl.domain, pl.resp, pl.noEnd, pl.lt = l, dom, req.Domain, resp, req.NoEnd, nil
	n := len(req.Descriptors)
	pl.steps = slices.Grow(pl.steps[:0], n)[:n]
	total := 0
	for i := range req.Descriptors {
		total += min(len(req.Descriptors[i].Entries), MaxEntries)
	}
	pl.entries = slices.Grow(pl.entries[:0], total) // no step's window moves
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		st := &pl.steps[i]
		*st = step{cost: descriptorCost(req, d), idem: req.IdempotencyKey, skip: skip&(1<<i) != 0, override: -1}
		if len(d.Entries) > MaxEntries {
			st.skip = true
			st.from, st.to = len(pl.matches), len(pl.matches)
			continue
		}
		pl.plan(st, d.Entries, s.opts.IdempotencyEntry)
		if d.LimitOverride && !st.skip {
			if dom.DecidesOwnLimits() {
				pl.overrideLimit(st, d)
			} else {
				st.own, st.hasOwn = d.Override, true
			}
		}
	}
	pl.window()
	if dom.HasReplaces() {
		pl.replace()
	}
	return pl
}

// plan fills st for entries: the idempotency entry (named idemKey) taken
// out, the lease entry found, the policies matched.
func (pl *plan) plan(st *step, entries []compiled.Entry, idemKey string) {
	st.entries = entries
	for j := range entries {
		if entries[j].Key == idemKey {
			start := len(pl.entries)
			pl.entries = append(append(pl.entries, entries[:j]...), entries[j+1:]...)
			st.entries, st.idem = pl.entries[start:len(pl.entries):len(pl.entries)], entries[j].Value
			break
		}
	}
	st.from = len(pl.matches)
	if pl.dom != nil {
		if holds(pl.dom) {
			_, _, st.ends = leaseEntry(pl.dom, entries)
		}
		pl.matches = pl.dom.AppendMatches(pl.matches, st.entries)
	}
	st.to = len(pl.matches)
}

// window gives each step its window of pl.matches, once all are in.
func (pl *plan) window() {
	for i := range pl.steps {
		st := &pl.steps[i]
		st.matches = pl.matches[st.from:st.to:st.to]
	}
}

// planOne is a plan of one descriptor, entries at cost, for Check: holding
// policies are peeked at, whatever entries carry.
func (s *Service) planOne(l *loaded, domain string, entries []compiled.Entry, cost int64) *plan {
	pl := s.plans.Get().(*plan)
	pl.l, pl.dom, pl.domain, pl.resp, pl.noEnd, pl.lt = l, l.snap.Domain(domain), domain, nil, true, nil
	pl.steps = append(pl.steps[:0], step{cost: cost, override: -1})
	pl.entries = slices.Grow(pl.entries[:0], len(entries))
	pl.plan(&pl.steps[0], entries, s.opts.IdempotencyEntry)
	pl.steps[0].ends = false
	pl.window()
	return pl
}

// releasePlan clears pl's references and returns it to the pool.
func (s *Service) releasePlan(pl *plan) {
	clear(pl.matches)
	clear(pl.entries)
	clear(pl.steps)
	releasePar(pl)
	pl.matches, pl.entries, pl.steps, pl.drop = pl.matches[:0], pl.entries[:0], pl.steps[:0], pl.drop[:0]
	pl.l, pl.dom, pl.resp, pl.lt = nil, nil, nil, nil
	s.plans.Put(pl)
}
