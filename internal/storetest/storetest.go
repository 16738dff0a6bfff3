// Package storetest holds the conformance table every store.Store must
// pass, with a synthetic clock, so that the Go algorithms (memory store) and
// the Lua scripts (Redis, standalone and cluster) cannot drift apart.
package storetest

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// Base is the synthetic clock's epoch. It is aligned to every window the
// table uses.
var Base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Skip marks an expected duration that a step does not check.
const Skip = time.Duration(-1 << 63)

// Step is one decision at Base+At and what it must return.
type Step struct {
	At   time.Duration
	Cost int64
	// Headroom is the request's algo.Limit.Headroom (priority shedding).
	Headroom  int64
	Allowed   bool
	Remaining int64
	Reset     time.Duration
	Retry     time.Duration
	// Penalized is the key being penalized (algo.Result.Penalized).
	Penalized bool
}

// Case is a sequence of steps on one fresh key.
type Case struct {
	Name  string
	Limit algo.Limit
	Steps []Step
}

const ms, s = time.Millisecond, time.Second

func limit(a algo.Algorithm, n int64, per time.Duration, burst int64) algo.Limit {
	return algo.Limit{Algorithm: a, Limit: n, Period: per, Burst: burst}
}

// Cases is the conformance table. Each expected value is derived by hand in
// the comment beside it, not by running the code under test.
var Cases = []Case{
	{
		Name:  "TokenBucket 10/s burst 5",
		Limit: limit(algo.TokenBucket, 10, s, 5), // one token per 100ms
		Steps: []Step{
			{At: 0, Cost: 1, Allowed: true, Remaining: 4, Reset: 100 * ms},
			{At: 0, Cost: 4, Allowed: true, Remaining: 0, Reset: 500 * ms},
			{At: 0, Cost: 1, Allowed: false, Remaining: 0, Reset: 500 * ms, Retry: 100 * ms},
			{At: 50 * ms, Cost: 1, Allowed: false, Remaining: 0, Reset: 450 * ms, Retry: 50 * ms}, // 0.5 tokens
			{At: 100 * ms, Cost: 1, Allowed: true, Remaining: 0, Reset: 500 * ms},                 // the denial consumed nothing
			{At: 100 * ms, Cost: 6, Allowed: false, Remaining: 0, Reset: 500 * ms, Retry: algo.Never},
			{At: 10 * s, Cost: 0, Allowed: true, Remaining: 5, Reset: 0}, // full again; a peek
			{At: 10 * s, Cost: 2, Allowed: true, Remaining: 3, Reset: 200 * ms},
			// The clock went back behind the bucket's empty time (9.7s).
			{At: 9 * s, Cost: 1, Allowed: false, Remaining: 0, Reset: 1200 * ms, Retry: 800 * ms},
			{At: 10*s + 100*ms, Cost: 0, Allowed: true, Remaining: 4, Reset: 100 * ms},
			{At: 10*s + 100*ms, Cost: 5, Allowed: false, Remaining: 4, Reset: 100 * ms, Retry: 100 * ms},
		},
	},
	{
		Name:  "TokenBucket 3/s fractional refill",
		Limit: limit(algo.TokenBucket, 3, s, 3),
		Steps: []Step{
			{At: 0, Cost: 3, Allowed: true, Remaining: 0, Reset: s},
			{At: 333333 * time.Microsecond, Cost: 1, Allowed: false, Remaining: 0, Reset: Skip, Retry: time.Microsecond}, // 0.999999 tokens
			{At: 333334 * time.Microsecond, Cost: 1, Allowed: true, Remaining: 0, Reset: Skip},
			{At: s, Cost: 0, Allowed: true, Remaining: 2, Reset: Skip},
		},
	},
	{
		Name:  "GCRA 10/s burst 5",
		Limit: limit(algo.GCRA, 10, s, 5), // emission interval 100ms, tolerance 500ms
		Steps: []Step{
			{At: 0, Cost: 1, Allowed: true, Remaining: 4, Reset: 100 * ms},
			{At: 0, Cost: 4, Allowed: true, Remaining: 0, Reset: 500 * ms},
			{At: 0, Cost: 1, Allowed: false, Remaining: 0, Reset: 500 * ms, Retry: 100 * ms},
			{At: 50 * ms, Cost: 1, Allowed: false, Remaining: 0, Reset: 450 * ms, Retry: 50 * ms},
			{At: 100 * ms, Cost: 1, Allowed: true, Remaining: 0, Reset: 500 * ms},
			{At: 100 * ms, Cost: 6, Allowed: false, Remaining: 0, Reset: 500 * ms, Retry: algo.Never},
			{At: 10 * s, Cost: 0, Allowed: true, Remaining: 5, Reset: 0},
			{At: 10 * s, Cost: 2, Allowed: true, Remaining: 3, Reset: 200 * ms},                   // TAT 10.2s
			{At: 9 * s, Cost: 1, Allowed: false, Remaining: 0, Reset: 1200 * ms, Retry: 800 * ms}, // clock went back: TAT is ahead
			{At: 10*s + 200*ms, Cost: 5, Allowed: true, Remaining: 0, Reset: 500 * ms},
		},
	},
	{
		Name:  "FixedWindow 3/min",
		Limit: limit(algo.FixedWindow, 3, time.Minute, 0),
		Steps: []Step{
			{At: 0, Cost: 1, Allowed: true, Remaining: 2, Reset: 60 * s},
			{At: 10 * s, Cost: 2, Allowed: true, Remaining: 0, Reset: 50 * s},
			{At: 20 * s, Cost: 1, Allowed: false, Remaining: 0, Reset: 40 * s, Retry: 40 * s},
			{At: 20 * s, Cost: 4, Allowed: false, Remaining: 0, Reset: 40 * s, Retry: algo.Never},
			{At: 60*s - time.Microsecond, Cost: 0, Allowed: true, Remaining: 0, Reset: time.Microsecond},
			{At: 60 * s, Cost: 1, Allowed: true, Remaining: 2, Reset: 60 * s}, // a new window
			{At: 61 * s, Cost: 3, Allowed: false, Remaining: 2, Reset: 59 * s, Retry: 59 * s},
			{At: 61 * s, Cost: 2, Allowed: true, Remaining: 0, Reset: 59 * s},
			{At: 181 * s, Cost: 0, Allowed: true, Remaining: 3, Reset: 59 * s},
		},
	},
	{
		Name:  "SlidingWindow 10/s",
		Limit: limit(algo.SlidingWindow, 10, s, 0),
		Steps: []Step{
			{At: 0, Cost: 4, Allowed: true, Remaining: 6, Reset: 2 * s},
			{At: 500 * ms, Cost: 6, Allowed: true, Remaining: 0, Reset: 1500 * ms},
			// Next window at 1.1s: 10 × 0.9 = 9 used, room for 1.
			{At: 500 * ms, Cost: 1, Allowed: false, Remaining: 0, Reset: 1500 * ms, Retry: 600 * ms},
			{At: 1100 * ms, Cost: 1, Allowed: true, Remaining: 0, Reset: 1900 * ms},
			{At: 1500 * ms, Cost: 2, Allowed: true, Remaining: 2, Reset: 1500 * ms}, // 10×0.5 + 1 + 2 = 8
			// 5 more fit once 10×w + 3 ≤ 5, at w = 0.2, 300ms later.
			{At: 1500 * ms, Cost: 5, Allowed: false, Remaining: 2, Reset: 1500 * ms, Retry: 300 * ms},
			{At: 1800 * ms, Cost: 5, Allowed: true, Remaining: 0, Reset: 1200 * ms},
			{At: 3200 * ms, Cost: 0, Allowed: true, Remaining: 10, Reset: 0}, // both windows gone
			{At: 3200 * ms, Cost: 11, Allowed: false, Remaining: 10, Reset: 0, Retry: algo.Never},
		},
	},
	{
		Name:  "SlidingLog 3/s",
		Limit: limit(algo.SlidingLog, 3, s, 0),
		Steps: []Step{
			{At: 0, Cost: 1, Allowed: true, Remaining: 2, Reset: s},
			{At: 200 * ms, Cost: 1, Allowed: true, Remaining: 1, Reset: s},
			{At: 400 * ms, Cost: 1, Allowed: true, Remaining: 0, Reset: s},
			{At: 600 * ms, Cost: 1, Allowed: false, Remaining: 0, Reset: 800 * ms, Retry: 400 * ms}, // entry @0 leaves at 1s
			{At: 600 * ms, Cost: 2, Allowed: false, Remaining: 0, Reset: 800 * ms, Retry: 600 * ms}, // entry @200ms leaves at 1.2s
			{At: s, Cost: 1, Allowed: true, Remaining: 0, Reset: s},
			{At: s, Cost: 4, Allowed: false, Remaining: 0, Reset: s, Retry: algo.Never},
			{At: 5 * s, Cost: 0, Allowed: true, Remaining: 3, Reset: 0},
			{At: 5 * s, Cost: 3, Allowed: true, Remaining: 0, Reset: s},
		},
	},
	{
		// A weighted log: one entry per request carrying its cost decides
		// as one entry per unit would, a request's units leaving together.
		Name:  "SlidingLog 10/s, costs",
		Limit: limit(algo.SlidingLog, 10, s, 0),
		Steps: []Step{
			{At: 0, Cost: 4, Allowed: true, Remaining: 6, Reset: s},
			{At: 100 * ms, Cost: 3, Allowed: true, Remaining: 3, Reset: s},
			{At: 200 * ms, Cost: 3, Allowed: true, Remaining: 0, Reset: s},
			{At: 300 * ms, Cost: 5, Allowed: false, Remaining: 0, Reset: 900 * ms, Retry: 800 * ms}, // 4 @0 are not enough: 3 @100ms
			{At: 300 * ms, Cost: 4, Allowed: false, Remaining: 0, Reset: 900 * ms, Retry: 700 * ms}, // 4 @0 are
			{At: s, Cost: 4, Allowed: true, Remaining: 0, Reset: s},
			{At: s, Cost: 1, Allowed: false, Remaining: 0, Reset: s, Retry: 100 * ms},
			{At: 1200 * ms, Cost: 0, Allowed: true, Remaining: 6, Reset: 800 * ms},
			// The clock went back: logged before the newer entry.
			{At: 900 * ms, Cost: 2, Allowed: true, Remaining: 4, Reset: 1100 * ms},
			{At: 900 * ms, Cost: 5, Allowed: false, Remaining: 4, Reset: 1100 * ms, Retry: s}, // the 2 @900ms
			{At: 1950 * ms, Cost: 5, Allowed: true, Remaining: 1, Reset: s},
			{At: 1950 * ms, Cost: 3, Allowed: false, Remaining: 1, Reset: s, Retry: 50 * ms}, // the 4 @1s
			{At: 1950 * ms, Cost: 11, Allowed: false, Remaining: 1, Reset: s, Retry: algo.Never},
		},
	},
}

// Clock is a synthetic clock that tests set step by step.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at Base.
func NewClock() *Clock { return &Clock{now: Base} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// Set moves the clock, forwards or backwards.
func (c *Clock) Set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

// NewStore returns a store whose time is clock.
type NewStore func(t *testing.T, clock store.Clock) store.Store

// KeyFor derives a key unique to a test run and name.
func KeyFor(t testing.TB, name string) store.Key {
	var b store.KeyBuilder
	b.Add(t.Name())
	b.Add(name)
	b.Add(time.Now().String())
	return b.Key()
}

// Run runs the conformance table against a store: Cases, then the
// policy features' tables (features.go).
func Run(t *testing.T, newStore NewStore) {
	for _, tc := range allCases() {
		t.Run(tc.Name, func(t *testing.T) {
			clock := NewClock()
			st := newStore(t, clock.Now)
			key := KeyFor(t, tc.Name)
			for i, step := range tc.Steps {
				clock.Set(Base.Add(step.At))
				lim := tc.Limit
				lim.Headroom = step.Headroom
				got, err := st.Take(context.Background(), store.Request{Key: key, Limit: lim, Cost: step.Cost})
				if err != nil {
					t.Fatalf("step %d (at %v, cost %d): %v", i, step.At, step.Cost, err)
				}
				want := algo.Result{Allowed: step.Allowed, Remaining: step.Remaining, ResetAfter: step.Reset, RetryAfter: step.Retry, Penalized: step.Penalized}
				if step.Reset == Skip {
					want.ResetAfter = got.ResetAfter
				}
				if step.Retry == Skip {
					want.RetryAfter = got.RetryAfter
				}
				if got != want {
					t.Errorf("step %d (at %v, cost %d, reserve %d):\n got %+v\nwant %+v", i, step.At, step.Cost, step.Headroom, got, want)
				}
			}
		})
	}
}

// RunDifferential drives two stores with the same random sequence of
// decisions (times forwards and backwards, costs including 0 and more than
// capacity, several keys) and requires identical results. It catches drift
// that a hand-written table misses.
func RunDifferential(t *testing.T, a, b NewStore, steps int) {
	limits := []algo.Limit{
		limit(algo.TokenBucket, 7, 3*s, 4),
		limit(algo.TokenBucket, 1000, time.Minute, 50),
		limit(algo.GCRA, 7, 3*s, 4),
		limit(algo.GCRA, 3, s, 1),
		limit(algo.FixedWindow, 7, 3*s, 0),
		limit(algo.SlidingWindow, 7, 3*s, 0),
		limit(algo.SlidingWindow, 100, s, 0),
		limit(algo.SlidingLog, 7, 3*s, 0),
		// Penalties (features.go), short enough to start and end often.
		withPenalty(limit(algo.FixedWindow, 5, 2*s, 0), 1500*ms, 2, s),
		withPenalty(limit(algo.GCRA, 7, 3*s, 4), 2*s, 3, 4*s),
	}
	for _, lim := range limits {
		t.Run(lim.Algorithm.String()+"/"+time.Duration(lim.Period).String(), func(t *testing.T) {
			clock := NewClock()
			sa, sb := a(t, clock.Now), b(t, clock.Now)
			rng := rand.New(rand.NewPCG(uint64(lim.Limit), uint64(lim.Period)))
			reserves := rand.New(rand.NewPCG(uint64(lim.Burst), 19))
			keys := []store.Key{KeyFor(t, "k1"), KeyFor(t, "k2"), KeyFor(t, "k3")}
			now := Base
			for i := range steps {
				switch r := rng.IntN(20); {
				case r == 0:
					now = now.Add(-time.Duration(rng.IntN(2000)) * ms) // backwards
				case r < 4:
					now = now.Add(time.Duration(rng.IntN(5000)) * ms)
				default:
					now = now.Add(time.Duration(rng.IntN(300000)) * time.Microsecond)
				}
				clock.Set(now)
				req := store.Request{Key: keys[rng.IntN(len(keys))], Limit: lim, Cost: int64(rng.IntN(int(lim.Capacity()) + 2))}
				// A third of the requests leave a reserve (priority
				// shedding), drawn apart so the rest of the sequence stays.
				if reserves.IntN(3) == 0 {
					req.Limit.Headroom = int64(reserves.IntN(int(lim.Capacity()) + 1))
				}
				ra, errA := sa.Take(context.Background(), req)
				rb, errB := sb.Take(context.Background(), req)
				if errA != nil || errB != nil {
					t.Fatalf("step %d: errors %v / %v", i, errA, errB)
				}
				if testing.Verbose() {
					t.Logf("step %d at %v key %x cost %d reserve %d: %+v / %+v", i, now.Sub(Base), req.Key[:2], req.Cost, req.Limit.Headroom, ra, rb)
				}
				if ra != rb {
					t.Fatalf("step %d (at %v, cost %d, reserve %d): stores disagree\n a %+v\n b %+v", i, now.Sub(Base), req.Cost, req.Limit.Headroom, ra, rb)
				}
			}
		})
	}
}

// IdemStep is one decision of the idempotency table: on counter Counter
// (0 or 1), with idempotency key Idem ("" for none).
type IdemStep struct {
	At       time.Duration
	Counter  int
	Idem     string
	Cost     int64
	Allowed  bool
	Remain   int64
	Reset    time.Duration
	Retry    time.Duration
	Replayed bool
}

// IdempotencyTTL is the record TTL of the idempotency table.
const IdempotencyTTL = 30 * s

// IdempotencyLimit is the idempotency table's limit: FixedWindow 3/min.
var IdempotencyLimit = limit(algo.FixedWindow, 3, time.Minute, 0)

// IdempotencyMaxReplays is the most replays of a record in the
// idempotency table.
const IdempotencyMaxReplays = 3

// IdempotencySteps is the idempotency table. A record replays the first
// admitted decision, with its reset counting down, until IdempotencyTTL,
// at most IdempotencyMaxReplays times; then its retries are decided afresh
// and recorded nowhere until the record expires; denials and peeks are not
// recorded; records are per counter.
var IdempotencySteps = []IdemStep{
	{At: 0, Idem: "A", Cost: 1, Allowed: true, Remain: 2, Reset: 60 * s},
	{At: 10 * s, Idem: "A", Cost: 1, Allowed: true, Remain: 2, Reset: 50 * s, Replayed: true},
	{At: 10 * s, Cost: 0, Allowed: true, Remain: 2, Reset: 50 * s}, // the replay consumed nothing
	{At: 10 * s, Idem: "B", Cost: 1, Allowed: true, Remain: 1, Reset: 50 * s},
	{At: 10 * s, Idem: "C", Cost: 2, Allowed: false, Remain: 1, Reset: 50 * s, Retry: 50 * s},
	{At: 10 * s, Counter: 1, Idem: "A", Cost: 1, Allowed: true, Remain: 2, Reset: 50 * s}, // another counter: not a replay
	{At: 29 * s, Idem: "A", Cost: 1, Allowed: true, Remain: 2, Reset: 31 * s, Replayed: true},
	{At: 30 * s, Idem: "A", Cost: 1, Allowed: true, Remain: 0, Reset: 30 * s}, // expired: decided afresh
	{At: 31 * s, Idem: "A", Cost: 1, Allowed: true, Remain: 0, Reset: 29 * s, Replayed: true},
	{At: 32 * s, Idem: "A", Cost: 1, Allowed: true, Remain: 0, Reset: 28 * s, Replayed: true},
	{At: 33 * s, Idem: "A", Cost: 1, Allowed: true, Remain: 0, Reset: 27 * s, Replayed: true}, // the last replay
	{At: 34 * s, Idem: "A", Cost: 1, Allowed: false, Remain: 0, Reset: 26 * s, Retry: 26 * s}, // replays spent: decided afresh
	{At: 35 * s, Idem: "A", Cost: 1, Allowed: false, Remain: 0, Reset: 25 * s, Retry: 25 * s},
	{At: 35 * s, Counter: 1, Idem: "B", Cost: 1, Allowed: true, Remain: 1, Reset: 25 * s},
	{At: 36 * s, Counter: 1, Idem: "B", Cost: 1, Allowed: true, Remain: 1, Reset: 24 * s, Replayed: true},
	{At: 37 * s, Counter: 1, Idem: "B", Cost: 1, Allowed: true, Remain: 1, Reset: 23 * s, Replayed: true},
	{At: 38 * s, Counter: 1, Idem: "B", Cost: 1, Allowed: true, Remain: 1, Reset: 22 * s, Replayed: true},
	{At: 39 * s, Counter: 1, Idem: "B", Cost: 1, Allowed: true, Remain: 0, Reset: 21 * s}, // spent: admitted afresh, not recorded
	{At: 39 * s, Counter: 1, Idem: "B", Cost: 1, Allowed: false, Remain: 0, Reset: 21 * s, Retry: 21 * s},
	{At: 60 * s, Idem: "C", Cost: 2, Allowed: true, Remain: 1, Reset: 60 * s}, // its denial was not recorded
	{At: 61 * s, Idem: "C", Cost: 2, Allowed: true, Remain: 1, Reset: 59 * s, Replayed: true},
	{At: 61 * s, Idem: "D", Cost: 0, Allowed: true, Remain: 1, Reset: 59 * s}, // a peek is not recorded
	{At: 61 * s, Idem: "D", Cost: 1, Allowed: true, Remain: 0, Reset: 59 * s},
	{At: 200 * s, Idem: "C", Cost: 1, Allowed: true, Remain: 2, Reset: 40 * s}, // C expired long ago
}

// IdemKey derives the idempotency record name of a client's key: the same
// name gives the same Key (records are per counter, and counters are unique
// per run).
func IdemKey(t testing.TB, name string) store.Key {
	var b store.KeyBuilder
	b.Add(t.Name())
	b.Add(name)
	return b.Key()
}

// RunIdempotency runs the idempotency table against a store, on every
// algorithm for the replay itself, then on the full table.
func RunIdempotency(t *testing.T, newStore NewStore) {
	t.Run("table", func(t *testing.T) {
		clock := NewClock()
		st := newStore(t, clock.Now)
		counters := []store.Key{KeyFor(t, "counter 0"), KeyFor(t, "counter 1")}
		for i, step := range IdempotencySteps {
			clock.Set(Base.Add(step.At))
			req := store.Request{Key: counters[step.Counter], Limit: IdempotencyLimit, Cost: step.Cost,
				IdempotencyTTL: IdempotencyTTL, IdempotencyMaxReplays: IdempotencyMaxReplays}
			if step.Idem != "" {
				req.Idempotency = IdemKey(t, step.Idem)
			}
			got, err := st.Take(context.Background(), req)
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			want := algo.Result{Allowed: step.Allowed, Remaining: step.Remain, ResetAfter: step.Reset, RetryAfter: step.Retry, Replayed: step.Replayed}
			if got != want {
				t.Errorf("step %d (at %v, idempotency %q, cost %d):\n got %+v\nwant %+v", i, step.At, step.Idem, step.Cost, got, want)
			}
		}
	})
	t.Run("records per counter are bounded", func(t *testing.T) {
		clock := NewClock()
		st := newStore(t, clock.Now)
		key, other := KeyFor(t, "counter"), KeyFor(t, "another counter")
		lim := limit(algo.FixedWindow, 100, time.Minute, 0)
		take := func(counter store.Key, at time.Duration, idem string) algo.Result {
			t.Helper()
			clock.Set(Base.Add(at))
			r, err := st.Take(context.Background(), store.Request{Key: counter, Limit: lim, Cost: 1, Idempotency: IdemKey(t, idem),
				IdempotencyTTL: IdempotencyTTL, IdempotencyMaxReplays: IdempotencyMaxReplays, IdempotencyMaxRecords: 3})
			if err != nil || !r.Allowed {
				t.Fatalf("%s at %v: %+v %v", idem, at, r, err)
			}
			return r
		}
		for i, idem := range []string{"A", "B", "C", "D"} {
			take(key, time.Duration(i)*s, idem) // D is the fourth: A, closest to expiry, goes
		}
		take(other, 4*s, "A") // another counter's records are its own
		for _, idem := range []string{"D", "C", "B"} {
			if r := take(key, 5*s, idem); !r.Replayed {
				t.Errorf("a retry of %s, among the 3 newest records: %+v, want a replay", idem, r)
			}
		}
		if r := take(key, 5*s, "A"); r.Replayed || r.Remaining != 95 {
			t.Errorf("a retry of A, the record dropped for D: %+v, want decided afresh with 95 remaining", r)
		}
		if r := take(other, 5*s, "A"); !r.Replayed {
			t.Errorf("a retry of A on the other counter: %+v, want a replay", r)
		}
		// Expired records make room before live ones are dropped.
		take(key, 40*s, "E")
		take(key, 41*s, "F")
		take(key, 42*s, "G")
		for _, idem := range []string{"E", "F", "G"} {
			if r := take(key, 43*s, idem); !r.Replayed {
				t.Errorf("a retry of %s after the others expired: %+v, want a replay", idem, r)
			}
		}
	})
	for _, a := range algo.All {
		t.Run(a.String(), func(t *testing.T) {
			clock := NewClock()
			st := newStore(t, clock.Now)
			lim := limit(a, 5, time.Minute, 5)
			key, idem := KeyFor(t, "counter"), IdemKey(t, "retried")
			first, err := st.Take(context.Background(), store.Request{Key: key, Limit: lim, Cost: 2, Idempotency: idem})
			if err != nil || !first.Allowed || first.Replayed {
				t.Fatalf("first: %+v %v", first, err)
			}
			for i := range store.DefaultIdempotencyMaxReplays {
				r, err := st.Take(context.Background(), store.Request{Key: key, Limit: lim, Cost: 2, Idempotency: idem})
				want := first
				want.Replayed = true
				if err != nil || r != want {
					t.Fatalf("retry %d: %+v %v, want %+v", i, r, err, want)
				}
			}
			peek, err := st.Take(context.Background(), store.Request{Key: key, Limit: lim})
			if err != nil || peek.Remaining != 3 {
				t.Fatalf("after %d retries: %+v %v, want 3 remaining (one cost of 2 spent)", store.DefaultIdempotencyMaxReplays, peek, err)
			}
			// One retry more is decided afresh and spends its cost.
			again, err := st.Take(context.Background(), store.Request{Key: key, Limit: lim, Cost: 2, Idempotency: idem})
			if err != nil || !again.Allowed || again.Replayed || again.Remaining != 1 {
				t.Fatalf("a retry past the replays: %+v %v, want admitted afresh with 1 remaining", again, err)
			}
		})
	}
}
