package service

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// keysOf are n hashes of distinct keys, as the denials' hash gives them.
func keysOf(n int) []uint64 {
	d := newDenials()
	out := make([]uint64, n)
	for i := range out {
		var k store.Key
		k[0], k[1] = byte(i), byte(i>>8)
		out[i] = d.hash(k)
	}
	return out
}

// apart is a key whose two shares are neither of h's.
func apart(t *testing.T, h uint64, keys []uint64) uint64 {
	t.Helper()
	a, b := shareIndexes(h)
	for _, k := range keys {
		if c, d := shareIndexes(k); c != a && c != b && d != a && d != b {
			return k
		}
	}
	t.Fatal("no key apart")
	return 0
}

// A store budget, taken by many keys, admits a second's worth at once,
// then its rate, and refuses the rest, counting each refusal; a second
// idle refills the burst, no more.
func TestStoreBudget(t *testing.T) {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
	b := newStoreBudget("ns", 100, c, prometheus.NewCounter(prometheus.CounterOpts{Name: "y"}))
	// Keys spread evenly over the shares, as many keys' hashes are.
	now, k := t0, uint64(0)
	takeAll := func(n int) (taken int) {
		for range n {
			if b.take(now, k*0x9e3779b97f4a7c15) {
				taken++
			}
			k++
		}
		return taken
	}
	if taken := takeAll(150); taken != 100 || b.refused.Load() != 50 {
		t.Fatalf("at once: %d taken, %d refused; want 100, 50", taken, b.refused.Load())
	}
	// A second later, about a second's worth again (the shares refill at
	// the rate, rounded: those that gave their burst have a little less
	// than a second's worth), never more.
	now += int64(time.Second)
	if taken := takeAll(150); taken > 100 || taken < 90 {
		t.Fatalf("a second later: %d taken, want 90 to 100", taken)
	}
	// Over 10 seconds, at most the burst and the rate.
	total := 0
	for range 100 {
		now += int64(100 * time.Millisecond)
		total += takeAll(50)
	}
	if total > 100*10 || total < 100*9 {
		t.Fatalf("10 s of 500 calls a second: %d taken, want about 1000 and at most 1000", total)
	}
	if got := testutil.ToFloat64(c); got != float64(b.refused.Load()) {
		t.Fatalf("counted %v refusals, refused %d", got, b.refused.Load())
	}
}

// One key alone takes the whole rate when it spreads its calls, and half
// the burst at once.
func TestFairBucketOneKey(t *testing.T) {
	var b fairBucket
	b.init(160)
	h := keysOf(1)[0]
	now, taken := t0, 0
	for range 1000 {
		if b.take(now, h) {
			taken++
		}
	}
	if taken != 80 {
		t.Fatalf("one key at once: %d taken, want 80 (half the burst)", taken)
	}
	now += int64(time.Second)
	taken = 0
	for range 320 {
		if b.take(now, h) {
			taken++
		}
		now += int64(time.Second) / 160
	}
	if taken != 320 {
		t.Fatalf("one key at the rate for 2 s: %d of 320 taken", taken)
	}
}

// One key's flood takes what its neighbours leave: a neighbour keeps its
// shares, however hard the flood, and the two never pass the rate.
func TestFairBucketFlood(t *testing.T) {
	var b fairBucket
	b.init(160)
	keys := keysOf(1000)
	flood := keys[0]
	neighbour := apart(t, flood, keys[1:])
	now := t0
	var flooded, neighbours int
	for step := range 50 {
		for range 1000 {
			if b.take(now, flood) {
				flooded++
			}
		}
		got := 0
		for range 10 {
			if b.take(now, neighbour) {
				got++
			}
		}
		// Its two shares refill a call each every 100 ms (160/16 a
		// second each).
		if want := 2; step > 0 && got < want {
			t.Fatalf("step %d: the neighbour took %d calls of 10 beside the flood, want at least %d", step, got, want)
		}
		neighbours += got
		now += int64(100 * time.Millisecond)
	}
	// 5 s and the first burst.
	if total := flooded + neighbours; total > 160*6 {
		t.Fatalf("flood %d and neighbour %d: %d calls in 5 s, above the rate", flooded, neighbours, total)
	}
	t.Logf("5 s: the flood took %d calls, its neighbour %d", flooded, neighbours)
}

// A budget of one call a second has no half to keep: its call goes to
// the first key that asks.
func TestFairBucketOneCall(t *testing.T) {
	var b fairBucket
	b.init(1)
	keys := keysOf(2)
	if !b.take(t0, keys[0]) || b.take(t0, keys[1]) || b.take(t0, keys[0]) {
		t.Fatal("want one call a second")
	}
	if !b.take(t0+int64(time.Second), keys[1]) {
		t.Fatal("a second later: want one call")
	}
}

// The store's denials are answered while in force, for the costs and
// priorities they apply to; an answer that leaves no unit is remembered
// until one is back; a full set keeps the denials that lift last.
func TestDenials(t *testing.T) {
	d := newDenials()
	h := keysOf(1)[0]
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 3, Period: time.Hour, Burst: 3}
	req := func(cost, headroom int64) *store.Request {
		l := lim
		l.Headroom = headroom
		return &store.Request{Limit: l, Cost: cost}
	}
	// An admission with units left is nothing to remember.
	d.note(h, req(1, 0), algo.Result{Allowed: true, Remaining: 1, ResetAfter: 40 * time.Minute}, t0)
	if _, ok := d.lookup(h, req(1, 0), t0); ok {
		t.Fatal("a key with units left is remembered")
	}
	// The last unit: none until one is back (20 minutes).
	d.note(h, req(1, 0), algo.Result{Allowed: true, Remaining: 0, ResetAfter: time.Hour}, t0)
	if r, ok := d.lookup(h, req(1, 0), t0+int64(19*time.Minute)); !ok || r.Allowed || r.RetryAfter != time.Minute {
		t.Fatalf("19 minutes after the last unit: %+v %v, want denied for another minute", r, ok)
	}
	if r, ok := d.lookup(h, req(0, 0), t0); !ok || !r.Allowed || r.Remaining != 0 || r.ResetAfter != time.Hour {
		t.Fatalf("a peek after the last unit: %+v %v, want none remaining", r, ok)
	}
	if _, ok := d.lookup(h, req(1, 0), t0+int64(20*time.Minute)); ok {
		t.Fatal("a unit is back, and the key still denied")
	}
	// A denial of cost 2 with a headroom of 1: not cost 1, nor a higher
	// priority (less headroom).
	d.note(h, req(2, 1), algo.Result{RetryAfter: 10 * time.Minute, Remaining: 1, ResetAfter: 30 * time.Minute}, t0)
	for _, c := range []struct {
		cost, headroom int64
		denied         bool
	}{{2, 1, true}, {3, 2, true}, {1, 1, false}, {2, 0, false}} {
		if _, ok := d.lookup(h, req(c.cost, c.headroom), t0); ok != c.denied {
			t.Errorf("cost %d, headroom %d: denied %v, want %v", c.cost, c.headroom, ok, c.denied)
		}
	}
	// A penalty denies everything.
	d.note(h, req(5, 2), algo.Result{RetryAfter: 15 * time.Minute, ResetAfter: 15 * time.Minute, Penalized: true}, t0)
	if r, ok := d.lookup(h, req(0, 0), t0); !ok || r.Allowed || !r.Penalized {
		t.Fatalf("a peek of a penalized key: %+v %v", r, ok)
	}
	// A replay, or a Concurrency slot, is nothing to remember.
	h2 := keysOf(2)[1]
	d.note(h2, req(1, 0), algo.Result{Replayed: true, Allowed: true}, t0)
	d.note(h2, &store.Request{Limit: algo.Limit{Algorithm: algo.Concurrency, Limit: 1, Period: time.Minute}, Cost: 1}, algo.Result{RetryAfter: time.Minute}, t0)
	if _, ok := d.lookup(h2, req(1, 0), t0); ok {
		t.Fatal("a replay or a slot remembered")
	}

	// A full set: a fifth key replaces the denial that lifts soonest.
	var same []uint64
	for _, k := range keysOf(1 << 16) {
		if d.set(k) == d.set(h) && k != h {
			same = append(same, k)
		}
	}
	if len(same) < denialWays+1 {
		t.Fatalf("%d keys share a set", len(same))
	}
	d = newDenials()
	for i, k := range same[:denialWays] {
		d.note(k, req(1, 0), algo.Result{RetryAfter: time.Duration(i+1) * time.Minute}, t0)
	}
	d.note(same[0], req(1, 0), algo.Result{RetryAfter: 10 * time.Minute}, t0) // its own way, renewed
	d.note(same[denialWays], req(1, 0), algo.Result{RetryAfter: 5 * time.Minute}, t0)
	for i, k := range same[:denialWays+1] {
		if _, ok := d.lookup(k, req(1, 0), t0); ok != (i != 1) {
			t.Errorf("key %d of the full set: remembered %v, want %v", i, ok, i != 1)
		}
	}
	// A lifted denial makes room first.
	d.note(same[1], req(1, 0), algo.Result{RetryAfter: time.Minute}, t0+int64(3*time.Minute))
	if _, ok := d.lookup(same[2], req(1, 0), t0+int64(3*time.Minute)); ok {
		t.Error("a lifted denial still answered")
	}
	if _, ok := d.lookup(same[1], req(1, 0), t0+int64(3*time.Minute)); !ok {
		t.Error("the new denial went nowhere")
	}
	if _, ok := d.lookup(same[3], req(1, 0), t0+int64(3*time.Minute)); !ok {
		t.Error("a live denial made room before a lifted one")
	}
}
