package memory

// Idempotency records, by counter, under the counter's lock.

import (
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// record is a recorded admitted decision (times in Unix µs).
type record struct {
	remaining int64
	resetAt   int64
	expiresAt int64
	replays   int64 // replays answered so far
}

// replay answers req from its live idempotency record, with replays left:
// r.Replayed. live says a record is live, its replays spent or not.
// Caller holds sh.mu.
func replay(sh *shard, req store.Request, n int64) (r algo.Result, live bool) {
	rec, ok := sh.records[req.Key][req.Idempotency]
	if !ok || rec.expiresAt <= n {
		return algo.Result{}, false
	}
	if rec.replays >= req.EffectiveIdempotencyMaxReplays() {
		return algo.Result{}, true
	}
	rec.replays++
	sh.records[req.Key][req.Idempotency] = rec
	return algo.Result{Allowed: true, Remaining: rec.remaining, ResetAfter: time.Duration(max(0, rec.resetAt-n)) * time.Microsecond, Replayed: true}, true
}

// record keeps req's admitted decision r as its idempotency record, within
// the counter's bound of records and the shard's. Caller holds sh.mu.
func (s *Store) record(sh *shard, req store.Request, n int64, r algo.Result) {
	recs := sh.records[req.Key]
	if recs == nil {
		recs = make(map[store.Key]record)
	}
	if _, ok := recs[req.Idempotency]; !ok {
		// One more record: within the counter's bound, as in Redis,
		// then within the shard's.
		for int64(len(recs)) >= req.EffectiveIdempotencyMaxRecords() {
			sh.dropRecord(req.Key, recs, n)
		}
		s.makeRecordRoom(sh, n)
		sh.nrecords++
	}
	recs[req.Idempotency] = record{
		remaining: r.Remaining,
		resetAt:   n + r.ResetAfter.Microseconds(),
		expiresAt: n + req.EffectiveIdempotencyTTL().Microseconds(),
	}
	sh.records[req.Key] = recs // again: dropping may have emptied and removed it
}

// dropRecord removes one of a counter's records: an expired one, else the
// one closest to expiry (as Redis's ZPOPMIN of the index). Caller holds
// sh.mu.
func (sh *shard) dropRecord(counter store.Key, recs map[store.Key]record, now int64) {
	var victim store.Key
	soonest := int64(-1)
	for k, r := range recs {
		if r.expiresAt <= now {
			victim = k
			break
		}
		if soonest < 0 || r.expiresAt < soonest {
			victim, soonest = k, r.expiresAt
		}
	}
	delete(recs, victim)
	sh.nrecords--
	if len(recs) == 0 {
		delete(sh.records, counter)
	}
}

// makeRecordRoom evicts from a shard full of idempotency records: among a
// sample of counters, an expired record, else the one closest to expiry.
// Caller holds sh.mu.
func (s *Store) makeRecordRoom(sh *shard, now int64) {
	if sh.nrecords < s.perRecords {
		return
	}
	victim, _, _ := sampleVictim(sh.records, now, nil, recordsExpiry)
	sh.dropRecord(victim, sh.records[victim], now)
}

// Records is the number of stored idempotency records, expired ones
// included until swept.
func (s *Store) Records() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.nrecords
		sh.mu.Unlock()
	}
	return n
}

// recordsExpiry is the expiry of one of a counter's records: eviction
// samples one record per counter.
func recordsExpiry(recs map[store.Key]record) int64 {
	for _, r := range recs {
		return r.expiresAt
	}
	return 0
}
