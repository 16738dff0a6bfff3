package memory

// Holdings: Concurrency leases, in their counters, and reservations.

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// holdKey names a reservation: per counter.
type holdKey struct{ counter, hold store.Key }

// hold is a live reservation (times in Unix µs).
type hold struct {
	units, window int64
	expiresAt     int64
}

// holdState is state for a holding. An expired Concurrency entry is
// dropped, as the script drops every expired lease of a key it touches, so
// that a clock that goes back later does not bring it back. (A rate
// algorithm's stale state stays, as in Redis, where it decides as a fresh
// key would.) Caller holds sh.mu.
func holdState(sh *shard, k store.Key, lim algo.Limit, n int64) (algo.State, *entry, bool) {
	st, e, present := state(sh, k, n)
	if e != nil && !present && lim.Algorithm == algo.Concurrency {
		sh.deleteEntry(k, e)
		e = nil
	}
	return st, e, present
}

// takeHold is Take for a request that takes a holding (or peeks at
// Concurrency). Caller holds sh.mu.
func (s *Store) takeHold(sh *shard, now time.Time, req store.Request) (algo.Result, error) {
	if !req.Limit.Penalty.IsZero() {
		return algo.Result{}, fmt.Errorf("memory store: %w", store.ErrHoldPenalty)
	}
	n := now.UnixMicro()
	st, e, present := holdState(sh, req.Key, req.Limit, n)
	var (
		r     algo.Result
		write bool
		ttl   time.Duration
	)
	switch {
	case req.Limit.Algorithm != algo.Concurrency:
		if !req.Limit.Algorithm.Reserves() {
			return algo.Result{}, fmt.Errorf("memory store: %v can't hold a reservation", req.Limit.Algorithm)
		}
		r, write, ttl = req.Limit.Take(&st, present, now, req.Cost)
		if r.Allowed && req.Cost > 0 {
			s.reserve(sh, req, n, req.Limit.Window(now))
		}
	case req.Cost <= 0:
		r, write, ttl = req.Limit.Take(&st, present, now, 0)
	case !req.HasHold():
		return algo.Result{}, fmt.Errorf("memory store: %w", store.ErrNoHold)
	default:
		r, write, ttl = req.Limit.Acquire(&st, present, now, req.Hold.LeaseID())
	}
	if write {
		s.put(sh, req.Key, req.Tenant, e, st, n, max(0, ttl), req.Limit)
	}
	return r, nil
}

// reserve records units reserved under req.Hold, in window w, adding to a
// live reservation of the same hold. Caller holds sh.mu.
func (s *Store) reserve(sh *shard, req store.Request, n, w int64) {
	hk := holdKey{req.Key, req.Hold}
	h, ok := sh.holds[hk]
	if !ok {
		s.makeHoldRoom(sh, n)
	}
	units := req.Cost
	if ok && h.expiresAt > n {
		units += h.units
	}
	sh.holds[hk] = hold{units: units, window: w, expiresAt: n + max(1, req.HoldTTL.Microseconds())}
}

// Settle implements store.Holder.
func (s *Store) Settle(_ context.Context, req store.SettleRequest) (store.Settlement, error) {
	if !req.Limit.Penalty.IsZero() {
		return store.Settlement{}, fmt.Errorf("memory store: %w", store.ErrHoldPenalty)
	}
	now := s.clock()
	n := now.UnixMicro()
	sh := &s.shards[req.Key[0]%shardCount]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st, e, present := holdState(sh, req.Key, req.Limit, n)
	var (
		out   store.Settlement
		write bool
		ttl   time.Duration
	)
	switch a := req.Limit.Algorithm; {
	case a == algo.Concurrency:
		out.Result, out.Found, write, ttl = req.Limit.Release(&st, present, now, req.Hold.LeaseID())
		if out.Found {
			out.Held = 1
		}
	case a.Reserves():
		hk := holdKey{req.Key, req.Hold}
		h, ok := sh.holds[hk]
		if ok {
			delete(sh.holds, hk)
		}
		if !ok || h.expiresAt <= n {
			out.Result, write, ttl = req.Limit.Take(&st, present, now, 0)
			break
		}
		out.Found, out.Held = true, h.units
		actual := req.Actual
		if actual < 0 {
			actual = h.units
		}
		out.Result, write, ttl = req.Limit.Settle(&st, present, now, h.units, h.window, actual)
	default:
		return out, fmt.Errorf("memory store: %v holds nothing to settle", a)
	}
	if write {
		s.put(sh, req.Key, req.Tenant, e, st, n, max(0, ttl), req.Limit)
	}
	return out, nil
}

// makeHoldRoom evicts from a shard full of reservations, like makeRoom.
// Caller holds sh.mu.
func (s *Store) makeHoldRoom(sh *shard, now int64) {
	if len(sh.holds) < s.perHolds {
		return
	}
	victim, _, _ := sampleVictim(sh.holds, now, nil, holdExpiry)
	delete(sh.holds, victim)
}
