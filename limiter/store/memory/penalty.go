package memory

import "github.com/sluice-dev/sluice/limiter/store"

// makePenaltyRoom evicts from a shard full of penalty states before
// tenant writes a new one (penalties share the bound of the counters they
// sit beside): of the writer's tenant when it holds its share of them (an
// even split among the tenants with penalty states there), else of the
// tenant that holds the most, an expired one among a sample of its
// states, else the one closest to expiry. Caller holds sh.mu.
func (s *Store) makePenaltyRoom(sh *shard, now int64, tenant string) {
	if len(sh.penalties) < s.perShard {
		return
	}
	n := len(sh.penaltiesOf)
	if sh.penaltiesOf[tenant] == 0 {
		n++ // the writer's first penalty state here
	}
	victimTenant := tenant
	if sh.penaltiesOf[tenant] < s.perShard/n {
		most := 0
		for t, c := range sh.penaltiesOf {
			if c > most {
				victimTenant, most = t, c
			}
		}
	}
	victim, expired, ok := samplePenalty(sh, now, victimTenant)
	if !ok {
		return
	}
	sh.deletePenalty(victim)
	if !expired {
		s.evicted.Add(1)
	}
}

// samplePenalty is sampleVictim among the penalty states of tenant. The
// tenant holds at least its share of the shard's states, so the walk
// skips a bounded number of others' on average. Caller holds sh.mu.
func samplePenalty(sh *shard, now int64, tenant string) (victim store.Key, expired, ok bool) {
	soonest, sampled := int64(-1), 0
	for k, p := range sh.penalties {
		if p.tenant != tenant {
			continue
		}
		if p.expiresAt <= now {
			return k, true, true
		}
		if soonest < 0 || p.expiresAt < soonest {
			victim, soonest = k, p.expiresAt
		}
		if sampled++; sampled == evictionSample {
			break
		}
	}
	return victim, false, soonest >= 0
}
