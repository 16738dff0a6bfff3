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
