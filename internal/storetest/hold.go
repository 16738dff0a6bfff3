package storetest

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// Operations of the holdings table.
const (
	// OpTake is a Take holding under Hold: a Concurrency acquire (Cost 1),
	// or a reservation of Cost units.
	OpTake = "take"
	// OpSettle settles Hold at Cost (store.AtEstimate: at the estimate);
	// for Concurrency it releases Hold.
	OpSettle = "settle"
	// OpPeek is a Take of cost 0 without a holding.
	OpPeek = "peek"
)

// HoldStep is one call of the holdings table at Base+At, and what it must
// return: the decision's fields, and for a settle Found and Held.
type HoldStep struct {
	At   time.Duration
	Op   string
	Hold string
	Cost int64
	// Headroom is the call's priority reserve (algo.Limit.Headroom).
	Headroom  int64
	Allowed   bool
	Remaining int64
	Reset     time.Duration
	Retry     time.Duration
	Found     bool
	Held      int64
}

// HoldCase is a sequence of holding steps on one fresh key. TTL is a
// reservation's life.
type HoldCase struct {
	Name  string
	Limit algo.Limit
	TTL   time.Duration
	Steps []HoldStep
}

// HoldCases is the holdings conformance table: Concurrency leases, and
// reservations settled on each algorithm that reserves, with priorities
// and in calendar windows too. Each expected value is derived by hand in
// the comment beside it.
var HoldCases = []HoldCase{
	{
		// Shares of 4 slots: 100% (reserve 0), 50% (2), 0% (4). A
		// settlement leaves no reserve.
		Name:  "Concurrency 4 in flight, leases of 10s, priorities",
		Limit: algo.Limit{Algorithm: algo.Concurrency, Limit: 4, Period: 10 * s},
		Steps: []HoldStep{
			{At: 0, Op: OpTake, Hold: "A", Cost: 1, Headroom: 2, Allowed: true, Remaining: 1, Reset: 10 * s},           // 1 of 2
			{At: 0, Op: OpTake, Hold: "B", Cost: 1, Headroom: 2, Allowed: true, Remaining: 0, Reset: 10 * s},           // 2 of 2
			{At: s, Op: OpTake, Hold: "C", Cost: 1, Headroom: 2, Allowed: false, Remaining: 0, Reset: 9 * s, Retry: s}, // a 3rd would leave 1
			{At: s, Op: OpTake, Hold: "C", Cost: 1, Headroom: 0, Allowed: true, Remaining: 1, Reset: 10 * s},           // the top priority; C until 11s
			{At: s, Op: OpTake, Hold: "D", Cost: 1, Headroom: 4, Allowed: false, Remaining: 0, Reset: 10 * s, Retry: algo.Never},
			{At: s, Op: OpTake, Hold: "A", Cost: 1, Headroom: 2, Allowed: true, Remaining: 0, Reset: 10 * s}, // a renewal, over its share: A until 11s
			{At: 2 * s, Op: OpSettle, Hold: "B", Allowed: true, Remaining: 2, Reset: 9 * s, Found: true, Held: 1},
			{At: 2 * s, Op: OpTake, Hold: "E", Cost: 1, Headroom: 2, Allowed: false, Remaining: 0, Reset: 9 * s, Retry: s}, // 2 in flight
			{At: 2 * s, Op: OpPeek, Headroom: 1, Allowed: true, Remaining: 1, Reset: 9 * s},
			{At: 30 * s, Op: OpTake, Hold: "F", Cost: 1, Headroom: 4, Allowed: false, Remaining: 0, Reset: 0, Retry: algo.Never}, // none in flight: still never
		},
	},
	{
		// Days in UTC from Base, Thursday January 1 2026. A reservation
		// records its day: a refund after midnight is dropped.
		Name:  "FixedWindow 10 per calendar day, reserved and settled, priorities",
		Limit: algo.Limit{Algorithm: algo.FixedWindow, Limit: 10, Burst: 10, Calendar: algo.Calendar{Period: algo.Day, Location: time.UTC}},
		TTL:   48 * time.Hour,
		Steps: []HoldStep{
			{At: 12 * h, Op: OpTake, Hold: "A", Cost: 6, Allowed: true, Remaining: 4, Reset: 12 * h},
			{At: 13 * h, Op: OpTake, Hold: "B", Cost: 4, Allowed: true, Remaining: 0, Reset: 11 * h},
			{At: 14 * h, Op: OpSettle, Hold: "A", Cost: 2, Allowed: true, Remaining: 4, Reset: 10 * h, Found: true, Held: 6}, // 4 back: 6 counted
			{At: 15 * h, Op: OpSettle, Hold: "B", Cost: 7, Allowed: true, Remaining: 1, Reset: 9 * h, Found: true, Held: 4},  // 3 more: 9
			{At: 15 * h, Op: OpTake, Hold: "C", Cost: 1, Allowed: true, Remaining: 0, Reset: 9 * h},
			// January 2, 01:00: C's day has passed, its refund is dropped.
			{At: 25 * h, Op: OpSettle, Hold: "C", Cost: 0, Allowed: true, Remaining: 10, Reset: 23 * h, Found: true, Held: 1},
			{At: 25 * h, Op: OpTake, Hold: "D", Cost: 5, Headroom: 5, Allowed: true, Remaining: 0, Reset: 23 * h},                 // 5 of a 50% share
			{At: 25 * h, Op: OpTake, Hold: "E", Cost: 1, Headroom: 5, Allowed: false, Remaining: 0, Reset: 23 * h, Retry: 23 * h}, // until the next day
			{At: 25 * h, Op: OpTake, Hold: "E", Cost: 11, Headroom: 0, Allowed: false, Remaining: 5, Reset: 23 * h, Retry: algo.Never},
			{At: 26 * h, Op: OpSettle, Hold: "D", Cost: 1, Allowed: true, Remaining: 9, Reset: 22 * h, Found: true, Held: 5}, // 4 back
		},
	},
	{
		Name:  "Concurrency 2 in flight, leases of 10s",
		Limit: algo.Limit{Algorithm: algo.Concurrency, Limit: 2, Period: 10 * s},
		Steps: []HoldStep{
			{At: 0, Op: OpTake, Hold: "A", Cost: 1, Allowed: true, Remaining: 1, Reset: 10 * s},               // A until 10s
			{At: s, Op: OpTake, Hold: "B", Cost: 1, Allowed: true, Remaining: 0, Reset: 10 * s},               // B until 11s
			{At: 2 * s, Op: OpTake, Hold: "C", Cost: 1, Allowed: false, Remaining: 0, Reset: 9 * s, Retry: s}, // full; A expires in 8s: retry 1s
			{At: 2 * s, Op: OpTake, Hold: "A", Cost: 1, Allowed: true, Remaining: 0, Reset: 10 * s},           // A renewed, until 12s
			{At: 3 * s, Op: OpSettle, Hold: "B", Allowed: true, Remaining: 1, Reset: 9 * s, Found: true, Held: 1},
			{At: 3 * s, Op: OpSettle, Hold: "B", Allowed: true, Remaining: 1, Reset: 9 * s},         // twice: harmless
			{At: 3 * s, Op: OpSettle, Hold: "Z", Allowed: true, Remaining: 1, Reset: 9 * s},         // never taken
			{At: 3 * s, Op: OpTake, Hold: "C", Cost: 5, Allowed: true, Remaining: 0, Reset: 10 * s}, // one slot whatever the cost; C until 13s
			{At: 3 * s, Op: OpPeek, Allowed: true, Remaining: 0, Reset: 10 * s},
			{At: 12*s + 500*ms, Op: OpTake, Hold: "D", Cost: 1, Allowed: true, Remaining: 0, Reset: 10 * s},                   // A expired at 12s; D until 22.5s
			{At: 12*s + 500*ms, Op: OpTake, Hold: "E", Cost: 1, Allowed: false, Remaining: 0, Reset: 10 * s, Retry: 500 * ms}, // C expires in 0.5s
			{At: 12*s + 500*ms, Op: OpSettle, Hold: "A", Allowed: true, Remaining: 0, Reset: 10 * s},                          // expired: harmless
			{At: 30 * s, Op: OpPeek, Allowed: true, Remaining: 2, Reset: 0},
			{At: 20 * s, Op: OpTake, Hold: "F", Cost: 1, Allowed: true, Remaining: 1, Reset: 10 * s}, // the clock went back
		},
	},
	{
		Name:  "TokenBucket 100/min reserved and settled",
		Limit: algo.Limit{Algorithm: algo.TokenBucket, Limit: 100, Period: time.Minute, Burst: 100}, // a token per 600ms
		TTL:   time.Minute,
		Steps: []HoldStep{
			{At: 0, Op: OpTake, Hold: "R1", Cost: 60, Allowed: true, Remaining: 40, Reset: 36 * s},
			{At: 0, Op: OpTake, Hold: "R2", Cost: 30, Allowed: true, Remaining: 10, Reset: 54 * s},
			{At: 0, Op: OpTake, Hold: "R3", Cost: 20, Allowed: false, Remaining: 10, Reset: 54 * s, Retry: 6 * s},           // 10 tokens short
			{At: 0, Op: OpSettle, Hold: "R1", Cost: 20, Allowed: true, Remaining: 50, Reset: 30 * s, Found: true, Held: 60}, // 40 back
			{At: 0, Op: OpSettle, Hold: "R1", Cost: 20, Allowed: true, Remaining: 50, Reset: 30 * s},                        // twice: nothing
			{At: 0, Op: OpSettle, Hold: "R3", Cost: 20, Allowed: true, Remaining: 50, Reset: 30 * s},                        // denied: never held
			// 70 spent beyond the reservation: 50 - 70 = 20 tokens of debt,
			// 120 tokens (72s) from full.
			{At: 0, Op: OpSettle, Hold: "R2", Cost: 100, Allowed: true, Remaining: 0, Reset: 72 * s, Found: true, Held: 30},
			{At: 6 * s, Op: OpPeek, Allowed: true, Remaining: 0, Reset: 66 * s},                                         // 10 tokens of debt left
			{At: 6 * s, Op: OpTake, Hold: "R4", Cost: 1, Allowed: false, Remaining: 0, Reset: 66 * s, Retry: 6600 * ms}, // 11 tokens away
			{At: 12*s + 600*ms, Op: OpTake, Hold: "R4", Cost: 1, Allowed: true, Remaining: 0, Reset: 60 * s},            // 21 tokens refilled
			// R4's reservation expired at 72.6s: settled at its estimate.
			{At: 80 * s, Op: OpSettle, Hold: "R4", Cost: 50, Allowed: true, Remaining: 100, Reset: 0},
			{At: 80 * s, Op: OpTake, Hold: "R5", Cost: 10, Allowed: true, Remaining: 90, Reset: 6 * s},
			{At: 80 * s, Op: OpSettle, Hold: "R5", Cost: store.AtEstimate, Allowed: true, Remaining: 90, Reset: 6 * s, Found: true, Held: 10},
			// Two reservations under one hold add up.
			{At: 80 * s, Op: OpTake, Hold: "R6", Cost: 10, Allowed: true, Remaining: 80, Reset: 12 * s},
			{At: 80 * s, Op: OpTake, Hold: "R6", Cost: 5, Allowed: true, Remaining: 75, Reset: 15 * s},
			{At: 80 * s, Op: OpSettle, Hold: "R6", Cost: 0, Allowed: true, Remaining: 90, Reset: 6 * s, Found: true, Held: 15},
		},
	},
	{
		Name:  "FixedWindow 10/min reserved and settled",
		Limit: algo.Limit{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Minute},
		TTL:   5 * time.Minute,
		Steps: []HoldStep{
			{At: 0, Op: OpTake, Hold: "A", Cost: 6, Allowed: true, Remaining: 4, Reset: 60 * s},
			{At: 10 * s, Op: OpTake, Hold: "B", Cost: 4, Allowed: true, Remaining: 0, Reset: 50 * s},
			{At: 20 * s, Op: OpSettle, Hold: "A", Cost: 2, Allowed: true, Remaining: 4, Reset: 40 * s, Found: true, Held: 6},
			{At: 30 * s, Op: OpSettle, Hold: "B", Cost: 9, Allowed: true, Remaining: 0, Reset: 30 * s, Found: true, Held: 4}, // count 11
			{At: 30 * s, Op: OpTake, Hold: "C", Cost: 1, Allowed: false, Remaining: 0, Reset: 30 * s, Retry: 30 * s},
			{At: 60 * s, Op: OpTake, Hold: "D", Cost: 5, Allowed: true, Remaining: 5, Reset: 60 * s},
			{At: 65 * s, Op: OpSettle, Hold: "D", Cost: 0, Allowed: true, Remaining: 10, Reset: 55 * s, Found: true, Held: 5},
			{At: 65 * s, Op: OpTake, Hold: "E", Cost: 3, Allowed: true, Remaining: 7, Reset: 55 * s},
			// E's window has passed: its refund is dropped.
			{At: 125 * s, Op: OpSettle, Hold: "E", Cost: 0, Allowed: true, Remaining: 10, Reset: 55 * s, Found: true, Held: 3},
		},
	},
	{
		Name:  "GCRA 10/s burst 5 reserved and settled",
		Limit: algo.Limit{Algorithm: algo.GCRA, Limit: 10, Period: s, Burst: 5}, // interval 100ms, tolerance 500ms
		TTL:   time.Minute,
		Steps: []HoldStep{
			{At: 0, Op: OpTake, Hold: "A", Cost: 5, Allowed: true, Remaining: 0, Reset: 500 * ms},
			{At: 0, Op: OpSettle, Hold: "A", Cost: 2, Allowed: true, Remaining: 3, Reset: 200 * ms, Found: true, Held: 5},
			{At: 0, Op: OpTake, Hold: "B", Cost: 3, Allowed: true, Remaining: 0, Reset: 500 * ms},
			{At: 0, Op: OpSettle, Hold: "B", Cost: 8, Allowed: true, Remaining: 0, Reset: s, Found: true, Held: 3}, // TAT 1s ahead
			{At: 100 * ms, Op: OpTake, Hold: "C", Cost: 1, Allowed: false, Remaining: 0, Reset: 900 * ms, Retry: 500 * ms},
		},
	},
	{
		Name:  "SlidingWindow 10/s reserved and settled",
		Limit: algo.Limit{Algorithm: algo.SlidingWindow, Limit: 10, Period: s},
		TTL:   time.Minute,
		Steps: []HoldStep{
			{At: 0, Op: OpTake, Hold: "A", Cost: 8, Allowed: true, Remaining: 2, Reset: 2 * s},
			{At: 500 * ms, Op: OpSettle, Hold: "A", Cost: 3, Allowed: true, Remaining: 7, Reset: 1500 * ms, Found: true, Held: 8},
			{At: 1500 * ms, Op: OpTake, Hold: "B", Cost: 4, Allowed: true, Remaining: 4, Reset: 1500 * ms}, // 3×0.5 + 4 = 5.5
			{At: 1500 * ms, Op: OpSettle, Hold: "B", Cost: 12, Allowed: true, Remaining: 0, Reset: 1500 * ms, Found: true, Held: 4},
			// 13.5 counted: 9 may remain for 1 to fit; the current 12 decay
			// to 9 a quarter into the next window.
			{At: 1500 * ms, Op: OpTake, Hold: "C", Cost: 1, Allowed: false, Remaining: 0, Reset: 1500 * ms, Retry: 750 * ms},
		},
	},
}

// NewHolder returns a store that keeps holdings, whose time is clock.
type NewHolder func(t *testing.T, clock store.Clock) store.Holder

// HoldKey derives the holding name of a table's hold: the same name gives
// the same Key.
func HoldKey(t testing.TB, name string) store.Key { return IdemKey(t, "hold "+name) }

// holdCall runs one step: a Take or a Settle, whose answers it returns as
// a Settlement.
func holdCall(ctx context.Context, st store.Holder, key, hold store.Key, lim algo.Limit, ttl time.Duration, op string, cost int64) (store.Settlement, error) {
	switch op {
	case OpSettle:
		return st.Settle(ctx, store.SettleRequest{Key: key, Limit: lim, Hold: hold, Actual: cost})
	case OpPeek:
		r, err := st.Take(ctx, store.Request{Key: key, Limit: lim})
		return store.Settlement{Result: r}, err
	}
	r, err := st.Take(ctx, store.Request{Key: key, Limit: lim, Cost: cost, Hold: hold, HoldTTL: ttl})
	return store.Settlement{Result: r}, err
}

// RunHolds runs the holdings table against a store.
func RunHolds(t *testing.T, newStore NewHolder) {
	for _, tc := range HoldCases {
		t.Run(tc.Name, func(t *testing.T) {
			clock := NewClock()
			st := newStore(t, clock.Now)
			key := KeyFor(t, tc.Name)
			for i, step := range tc.Steps {
				clock.Set(Base.Add(step.At))
				lim := tc.Limit
				lim.Headroom = step.Headroom
				got, err := holdCall(context.Background(), st, key, HoldKey(t, step.Hold), lim, tc.TTL, step.Op, step.Cost)
				if err != nil {
					t.Fatalf("step %d (%s %s at %v, cost %d): %v", i, step.Op, step.Hold, step.At, step.Cost, err)
				}
				want := store.Settlement{Found: step.Found, Held: step.Held,
					Result: algo.Result{Allowed: step.Allowed, Remaining: step.Remaining, ResetAfter: step.Reset, RetryAfter: step.Retry}}
				if got != want {
					t.Errorf("step %d (%s %s at %v, cost %d):\n got %+v\nwant %+v", i, step.Op, step.Hold, step.At, step.Cost, got, want)
				}
			}
		})
	}
	t.Run("a penalty can't hold", func(t *testing.T) {
		st := newStore(t, NewClock().Now)
		lim := algo.Limit{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Minute, Burst: 10,
			Penalty: algo.Penalty{Duration: time.Minute, After: 1, Within: time.Minute}}
		key, hold := KeyFor(t, "penalty"), HoldKey(t, "P")
		for _, l := range []algo.Limit{lim, {Algorithm: algo.Concurrency, Limit: 2, Period: s, Penalty: lim.Penalty}} {
			for _, op := range []string{OpTake, OpSettle} {
				if _, err := holdCall(context.Background(), st, key, hold, l, time.Minute, op, 1); !errors.Is(err, store.ErrHoldPenalty) {
					t.Errorf("%s on %v with a penalty: %v, want store.ErrHoldPenalty", op, l.Algorithm, err)
				}
			}
		}
	})
}

// RunHoldsDifferential drives two stores with the same random sequence of
// holdings (takes, settles above, below and at the estimate, releases,
// peeks; times forwards and backwards; several keys and holds; takes and
// peeks with a random priority reserve; a calendar window) and requires
// identical answers. It holds the hold script and the Lua cores' credits,
// forced costs, reserves and calendar windows to limiter/algo.
func RunHoldsDifferential(t *testing.T, a, b NewHolder, steps int) {
	limits := []algo.Limit{
		{Algorithm: algo.Concurrency, Limit: 3, Period: 2 * s},
		{Algorithm: algo.Concurrency, Limit: 1, Period: 700 * ms},
		{Algorithm: algo.TokenBucket, Limit: 7, Period: 3 * s, Burst: 4},
		{Algorithm: algo.TokenBucket, Limit: 1000, Period: time.Minute, Burst: 50},
		{Algorithm: algo.GCRA, Limit: 7, Period: 3 * s, Burst: 4},
		{Algorithm: algo.FixedWindow, Limit: 7, Period: 3 * s},
		{Algorithm: algo.SlidingWindow, Limit: 7, Period: 3 * s},
		{Algorithm: algo.SlidingWindow, Limit: 100, Period: s},
		// Calendar days in Lord Howe, whose clocks go back half an hour on
		// April 5 2026: that day lasts 24.5 hours.
		{Algorithm: algo.FixedWindow, Limit: 7, Burst: 7, Calendar: algo.Calendar{Period: algo.Day, Location: zone("Australia/Lord_Howe")}},
	}
	for _, lim := range limits {
		name := lim.Algorithm.String() + "/" + lim.Period.String()
		if !lim.Calendar.IsZero() {
			name = lim.Algorithm.String() + "/calendar"
		}
		t.Run(name, func(t *testing.T) {
			clock := NewClock()
			sa, sb := a(t, clock.Now), b(t, clock.Now)
			rng := rand.New(rand.NewPCG(uint64(lim.Limit)+7, uint64(lim.Period)))
			keys := []store.Key{KeyFor(t, "k1"), KeyFor(t, "k2")}
			holds := []store.Key{HoldKey(t, "h1"), HoldKey(t, "h2"), HoldKey(t, "h3"), HoldKey(t, "h4")}
			ttl := 2 * s
			now := Base
			if !lim.Calendar.IsZero() {
				// Just before midnight in Lord Howe (UTC+10:30 until April
				// 5 2026, 02:00, then UTC+10): reservations cross it.
				now = time.Date(2026, 4, 4, 13, 29, 50, 0, time.UTC)
			}
			for i := range steps {
				switch r := rng.IntN(20); {
				case r == 0:
					now = now.Add(-time.Duration(rng.IntN(2000)) * ms) // backwards
				case r < 4:
					now = now.Add(time.Duration(rng.IntN(3000)) * ms)
				default:
					now = now.Add(time.Duration(rng.IntN(300000)) * time.Microsecond)
				}
				clock.Set(now)
				op := OpTake
				switch r := rng.IntN(10); {
				case r < 4:
					op = OpSettle
				case r == 4:
					op = OpPeek
				}
				capacity := lim.Capacity()
				cost := int64(rng.IntN(int(capacity) + 2))
				if op == OpSettle {
					cost = int64(rng.IntN(int(2*capacity)+2)) - 1 // -1 settles at the estimate
				}
				key, hold := keys[rng.IntN(len(keys))], holds[rng.IntN(len(holds))]
				l := lim
				if op != OpSettle && rng.IntN(3) == 0 {
					l.Headroom = int64(rng.IntN(int(capacity) + 1)) // a priority's, up to a share of 0
				}
				ra, errA := holdCall(context.Background(), sa, key, hold, l, ttl, op, cost)
				rb, errB := holdCall(context.Background(), sb, key, hold, l, ttl, op, cost)
				if errA != nil || errB != nil {
					t.Fatalf("step %d: errors %v / %v", i, errA, errB)
				}
				if testing.Verbose() {
					t.Logf("step %d at %v %s key %x hold %x cost %d: %+v / %+v", i, now.Sub(Base), op, key[:2], hold[:2], cost, ra, rb)
				}
				if ra != rb {
					t.Fatalf("step %d (%s at %v, cost %d, reserve %d): stores disagree\n a %+v\n b %+v", i, op, now.Sub(Base), cost, l.Headroom, ra, rb)
				}
			}
		})
	}
}
