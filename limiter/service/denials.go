package service

import (
	"hash/maphash"
	"math"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// denials remembers, for the budgeted namespaces' counters, the store's
// latest answers that a key is over its limit, so that a decision made
// past a namespace's store budget never admits a key the store would
// deny: the pod's share of the limit, which decides the rest, starts
// afresh in memory. A client who spent her limit and floods other keys to
// spend the budget stays denied until the store said she could pass again.
//
// It is bounded whatever keys clients send: denialSets sets of denialWays
// entries, found by a keyed hash of the counter's key (the same hash
// chooses the key's shares of the budget, fairBucket). A set full of live
// denials replaces the one that lifts soonest. A denial pushed out (it
// takes denialWays newer ones in its set, each a store call within the
// budget) leaves its key to the pod's share of the limit: at most that
// share a period, as failureMode Local while the store is down.
//
// Only the store's answers are written, so its cost on the request path
// is one hash and, for an answer that leaves the key over its limit, one
// short lock; allowed answers write nothing. An entry is dropped when its
// denial lifts, never by an answer that admits: one the store admits
// earlier than it said (a reservation refunded, a limit raised) stays
// denied past the budget until then.
type denials struct {
	seed maphash.Seed
	sets [denialSets]denialSet
}

const (
	denialSets = 4096
	denialWays = 4
)

type denialSet struct {
	mu   sync.Mutex
	ways [denialWays]denial
}

// denial is one key over its limit: requests of cost at least cost and a
// priority headroom at least headroom are denied until until; its counter
// is full again at resetAt (Unix ns). tag is the key's hash, 0 for none.
type denial struct {
	tag            uint64
	until, resetAt int64
	cost, headroom int32
	penalized      bool
}

func newDenials() *denials { return &denials{seed: maphash.MakeSeed()} }

// hash is the keyed hash of a counter's key: its key is a plain SHA-256,
// which a client can compute; this one it can't, so it can't choose keys
// that share a neighbour's set or shares. Never 0.
func (d *denials) hash(k store.Key) uint64 {
	return maphash.Bytes(d.seed, k[:]) | 1
}

func (d *denials) set(h uint64) *denialSet { return &d.sets[(h>>32)%denialSets] }

// note records the store's answer r to req, at now, when it says the key
// is over its limit: a denial, until its RetryAfter; or an answer that
// left no unit, until one unit is back (unitBack).
func (d *denials) note(h uint64, req *store.Request, r algo.Result, now int64) {
	if r.Replayed || req.Limit.Algorithm == algo.Concurrency {
		// A replay tells the past; a slot frees when its holder ends it.
		return
	}
	e := denial{tag: h, resetAt: now + int64(r.ResetAfter), cost: 1, headroom: clamp32(req.Limit.Headroom)}
	switch {
	case r.Penalized:
		// Every request of the key, whatever its cost and priority.
		e.until, e.headroom, e.penalized = now+int64(r.RetryAfter), 0, true
	case !r.Allowed && req.Cost > 0 && r.RetryAfter != algo.Never:
		e.until, e.cost = now+int64(r.RetryAfter), clamp32(req.Cost)
	case r.Remaining < 1:
		e.until = now + int64(unitBack(req.Limit, r))
	default:
		return
	}
	if e.until <= now {
		return
	}
	s := d.set(h)
	s.mu.Lock()
	s.ways[s.victim(h, now)] = e
	s.mu.Unlock()
}

// victim is the way to write the key of hash h into at now: its own, else
// an empty or lifted one, else the one that lifts soonest. Caller holds
// s.mu.
func (s *denialSet) victim(h uint64, now int64) int {
	for i := range s.ways {
		if s.ways[i].tag == h {
			return i
		}
	}
	victim := 0
	for i := range s.ways {
		if s.ways[i].until <= now {
			return i
		}
		if s.ways[i].until < s.ways[victim].until {
			victim = i
		}
	}
	return victim
}

// lookup answers req at now from the store's denial of its key, when one
// is in force for its cost (a peek, of cost 0, for a key with no unit
// left) and priority.
func (d *denials) lookup(h uint64, req *store.Request, now int64) (algo.Result, bool) {
	s := d.set(h)
	s.mu.Lock()
	var e denial
	for i := range s.ways {
		if s.ways[i].tag == h {
			e = s.ways[i]
			break
		}
	}
	s.mu.Unlock()
	if e.tag == 0 || e.until <= now || max(1, req.Cost) < int64(e.cost) || req.Limit.Headroom < int64(e.headroom) {
		return algo.Result{}, false
	}
	r := algo.Result{ResetAfter: time.Duration(max(0, e.resetAt-now)), Penalized: e.penalized}
	if req.Cost == 0 && !e.penalized {
		// A peek admits nothing, and is allowed as at the store.
		r.Allowed = true
	} else {
		r.RetryAfter = time.Duration(e.until - now)
	}
	return r, true
}

// unitBack is how long after an answer r that left its key no unit the
// store admits one again: a window's end for FixedWindow; one unit's
// refill for the buckets; and for the sliding algorithms, whose next unit
// frees when old ones slide out, one unit's share of the period, an
// estimate. Never past the counter's reset.
func unitBack(l algo.Limit, r algo.Result) time.Duration {
	if l.Algorithm == algo.FixedWindow || l.Limit <= 0 {
		return r.ResetAfter
	}
	return min(r.ResetAfter, l.Period/time.Duration(l.Limit))
}

// clamp32 is n, at most MaxInt32: a denial recorded for less applies to
// more requests, never fewer.
func clamp32(n int64) int32 { return int32(min(n, math.MaxInt32)) }
