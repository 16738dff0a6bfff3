package service

import (
	"time"

	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/store"
)

// SetClock sets the clock of the hottest-descriptors sketches, and of the
// store budgets of the snapshots swapped in after.
func SetClock(s *Service, now func() time.Time) { s.clock, s.topClock = now, now }

// BudgetShares are the two shares of its namespace's store budget that
// the counter of the first policy of domain that entries match is metered
// by (fairBucket).
func BudgetShares(s *Service, domain string, entries []compiled.Entry) (int, int) {
	var kb store.KeyBuilder
	p := s.loaded.Load().snap.Domain(domain).AppendMatches(nil, entries)[0]
	return shareIndexes(s.denials.hash(p.CounterKey(&kb, entries)))
}

// DecidesConcurrently reports whether s decides req's descriptors
// concurrently (concurrent.go).
func DecidesConcurrently(s *Service, req *Request) bool {
	l := s.loaded.Load()
	dom := l.snap.Domain(req.Domain)
	var resp Response
	if answered, skip := s.screen(l, dom, req, &resp); !answered {
		pl := s.newPlan(l, dom, req, skip, &resp)
		defer s.releasePlan(pl)
		return s.concurrent(pl)
	}
	return false
}

// SameBudgetHash makes s hash counters into its store budgets' shares,
// and its denials' sets, as other does; both must have installed a
// snapshot with budgets, and neither decided anything yet.
func SameBudgetHash(s, other *Service) { s.denials.seed = other.denials.seed }
