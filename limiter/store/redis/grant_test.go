package redis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/internal/testtier"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// exactGrant is a store.Store whose Take is a grant that asks for nothing
// and credits nothing: grant.lua must then decide exactly as the
// algorithm's own script. What can't be granted (SlidingLog, calendar
// windows) takes.
type exactGrant struct{ *redisstore.Store }

func (e exactGrant) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	if !req.Limit.Grantable() {
		return e.Store.Take(ctx, req)
	}
	l, err := e.Grant(ctx, store.GrantRequest{Key: req.Key, Limit: req.Limit, Cost: req.Cost,
		Pod: "p", Bound: -1, PodCap: 1000, TTL: time.Second})
	if err == nil && l.Granted != 0 {
		return algo.Result{}, fmt.Errorf("the grant call granted %d units without being asked", l.Granted)
	}
	return l.Result, err
}

func newExactGrant(opts func(store.Clock) redisstore.Options) storetest.NewStore {
	return func(t *testing.T, clock store.Clock) store.Store {
		s, err := redisstore.New(opts(clock))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return exactGrant{s}
	}
}

func standaloneOpts(t *testing.T) func(store.Clock) redisstore.Options {
	testtier.Integration(t, "redis-server") // here, on t's goroutine: the options are made in subtests
	return func(c store.Clock) redisstore.Options {
		return redisstore.Options{Addrs: []string{standaloneAddr(t)}, PinnedClock: c, Timeout: 2 * time.Second, KeyPrefix: "grant"}
	}
}

func clusterOpts(t *testing.T) func(store.Clock) redisstore.Options {
	testtier.Integration(t, "redis-server") // here, on t's goroutine: the options are made in subtests
	return func(c store.Clock) redisstore.Options {
		return redisstore.Options{Addrs: clusterAddrs(t), Cluster: true, PinnedClock: c, Timeout: 2 * time.Second, KeyPrefix: "grant"}
	}
}

// A grant of nothing is the exact decision: the hand-derived conformance
// table, and a random differential against the algorithms' own scripts.
func TestGrantOfNothingIsExact(t *testing.T) {
	t.Run("table", func(t *testing.T) { storetest.Run(t, newExactGrant(standaloneOpts(t))) })
	t.Run("differential", func(t *testing.T) {
		storetest.RunDifferential(t, newStandalone, newExactGrant(standaloneOpts(t)), 300)
	})
	t.Run("cluster", func(t *testing.T) { storetest.Run(t, newExactGrant(clusterOpts(t))) })
}

// grantStep is one grant call at Base+At by pod Pod.
type grantStep struct {
	At                 time.Duration
	Pod                string
	Cost, Want, Credit int64
	CreditWindow       int64
	Horizon            time.Duration
	// what it must return
	Allowed   bool
	Remaining int64
	Granted   int64
	Lifetime  time.Duration
	Pods      int64
}

func runGrantSteps(t *testing.T, opts func(store.Clock) redisstore.Options, lim algo.Limit, bound, podCap int64, ttl time.Duration, steps []grantStep) {
	t.Helper()
	clock := storetest.NewClock()
	s, err := redisstore.New(opts(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	key := storetest.KeyFor(t, "grant")
	for i, st := range steps {
		clock.Set(storetest.Base.Add(st.At))
		got, err := s.Grant(context.Background(), store.GrantRequest{Key: key, Limit: lim, Cost: st.Cost, Want: st.Want,
			Credit: st.Credit, CreditWindow: st.CreditWindow, Horizon: st.Horizon, Pod: st.Pod, Bound: bound, PodCap: podCap, TTL: ttl})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got.Result.Allowed != st.Allowed || got.Result.Remaining != st.Remaining || got.Granted != st.Granted ||
			got.Lifetime != st.Lifetime || got.Pods != st.Pods {
			t.Errorf("step %d (at %v, pod %s, cost %d, want %d, credit %d):\n got allowed=%v remaining=%d granted=%d lifetime=%v pods=%d\nwant allowed=%v remaining=%d granted=%d lifetime=%v pods=%d",
				i, st.At, st.Pod, st.Cost, st.Want, st.Credit,
				got.Result.Allowed, got.Result.Remaining, got.Granted, got.Lifetime, got.Pods,
				st.Allowed, st.Remaining, st.Granted, st.Lifetime, st.Pods)
		}
	}
}

// Grants take from the counter, credits give back, and the pods' reserves
// together never pass the bound: each pod gets at most bound/pods, and
// never more than the bound leaves beside the others' live reserves.
func TestGrantBoundAcrossPods(t *testing.T) {
	const s, ms = time.Second, time.Millisecond
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 100, Period: s, Burst: 100} // 1 token per 10ms
	for name, opts := range map[string]func(store.Clock) redisstore.Options{"standalone": standaloneOpts(t), "cluster": clusterOpts(t)} {
		t.Run(name, func(t *testing.T) {
			runGrantSteps(t, opts, lim, 10, 100, 2*s, []grantStep{
				// Alone, pod a may hold the whole bound.
				{At: 0, Pod: "a", Cost: 1, Want: 50, Allowed: true, Remaining: 89, Granted: 10, Lifetime: 2 * s, Pods: 1},
				// b is second: half the bound each, and a holds 10, so b gets 0.
				{At: 0, Pod: "b", Cost: 1, Want: 50, Allowed: true, Remaining: 88, Granted: 0, Lifetime: 2 * s, Pods: 2},
				// a credits 4 unspent and asks again: min(want, 10/2, 10-0) = 5.
				{At: 0, Pod: "a", Cost: 1, Want: 50, Credit: 4, Allowed: true, Remaining: 86, Granted: 5, Lifetime: 2 * s, Pods: 2},
				// b: its fair share 5, and 10-5 left beside a's reserve.
				{At: 0, Pod: "b", Cost: 1, Want: 3, Allowed: true, Remaining: 82, Granted: 3, Lifetime: 2 * s, Pods: 2},
				// After the ttl, a and b's registrations are gone: c is alone.
				{At: 2*s + ms, Pod: "c", Cost: 1, Want: 50, Allowed: true, Remaining: 89, Granted: 10, Lifetime: 2 * s, Pods: 1},
				// A credit-only call deregisters c and refills the bucket.
				{At: 2*s + ms, Pod: "c", Credit: 10, Allowed: true, Remaining: 99, Granted: 0, Lifetime: 2 * s, Pods: 1},
				{At: 2*s + ms, Pod: "d", Cost: 1, Want: 50, Allowed: true, Remaining: 88, Granted: 10, Lifetime: 2 * s, Pods: 1},
				// Cost beyond what is left is denied and takes nothing.
				{At: 2*s + ms, Pod: "d", Cost: 90, Want: 50, Allowed: false, Remaining: 88, Granted: 0, Lifetime: 2 * s, Pods: 1},
				// Credit first, then decide: 88+10 tokens, 80 spent, the bound's 10 granted.
				{At: 2*s + ms, Pod: "d", Cost: 80, Want: 50, Credit: 10, Allowed: true, Remaining: 8, Granted: 10, Lifetime: 2 * s, Pods: 1},
			})
		})
	}
}

// Window algorithms: a grant ends with its window, its reserve shrinks with
// the time left, and a credit to a window that has passed is dropped
// (FixedWindow) or comes off the previous window's weight (SlidingWindow).
func TestGrantWindows(t *testing.T) {
	const s, ms = time.Second, time.Millisecond
	t.Run("FixedWindow", func(t *testing.T) {
		lim := algo.Limit{Algorithm: algo.FixedWindow, Limit: 100, Period: 10 * s, Burst: 100}
		w0 := storetest.Base.UnixMicro() / (10 * s).Microseconds()
		runGrantSteps(t, standaloneOpts(t), lim, -1, 1000, 2*s, []grantStep{
			{At: 0, Pod: "a", Cost: 1, Want: 20, Allowed: true, Remaining: 79, Granted: 20, Lifetime: 2 * s, Pods: 1},
			// 9.5s in: half a second left of a 2s ttl, a quarter of the want.
			{At: 9500 * ms, Pod: "a", Cost: 1, Want: 20, Credit: 20, CreditWindow: w0, Allowed: true, Remaining: 93, Granted: 5, Lifetime: 500 * ms, Pods: 1},
			// The next window: a credit to the last one is dropped.
			{At: 10 * s, Pod: "a", Cost: 1, Want: 0, Credit: 5, CreditWindow: w0, Allowed: true, Remaining: 99, Granted: 0, Lifetime: 2 * s, Pods: 1},
			// 100ms left of a want that covers 250ms: 20·100/250 = 8.
			{At: 19900 * ms, Pod: "a", Cost: 1, Want: 20, Horizon: 250 * ms, Allowed: true, Remaining: 90, Granted: 8, Lifetime: 100 * ms, Pods: 1},
		})
	})
	t.Run("SlidingWindow", func(t *testing.T) {
		lim := algo.Limit{Algorithm: algo.SlidingWindow, Limit: 100, Period: 10 * s, Burst: 100}
		w0 := storetest.Base.UnixMicro() / (10 * s).Microseconds()
		runGrantSteps(t, standaloneOpts(t), lim, -1, 1000, 2*s, []grantStep{
			{At: 0, Pod: "a", Cost: 1, Want: 49, Allowed: true, Remaining: 50, Granted: 49, Lifetime: 2 * s, Pods: 1},
			// 5s into the next window the last one weighs half: 50 → 25.
			// Crediting 40 of it leaves 10 → 5, plus 1 now.
			{At: 15 * s, Pod: "a", Cost: 1, Credit: 40, CreditWindow: w0, Allowed: true, Remaining: 94, Granted: 0, Lifetime: 2 * s, Pods: 1},
		})
	})
}

// The pods' registrations live in the counter's slot, with a TTL, so the
// script touches one slot and a crashed pod's registration goes away.
func TestGrantKeysShareTheSlotAndExpire(t *testing.T) {
	s := realStore(t, redisstore.Options{Addrs: []string{standaloneAddr(t)}, KeyPrefix: "grantttl"})
	t.Cleanup(func() { deleteKeys(t, "grantttl:*") }) // a second run lists only its own
	key := storetest.KeyFor(t, "k")
	if redisstore.Slot(s.RedisKey(key)) != redisstore.Slot(s.PodsKey(key)) {
		t.Fatalf("%s and %s are in different slots", s.RedisKey(key), s.PodsKey(key))
	}
	// An hour's limit and a 30 s grant: nothing may expire before the keys
	// are listed, however slow the machine (a 1 s grant's registration
	// could, and a minute's window could end).
	for _, a := range []algo.Algorithm{algo.TokenBucket, algo.GCRA, algo.SlidingWindow, algo.FixedWindow} {
		lim := algo.Limit{Algorithm: a, Limit: 50, Period: time.Hour, Burst: 50}
		k := storetest.KeyFor(t, a.String())
		l, err := s.Grant(context.Background(), store.GrantRequest{Key: k, Limit: lim, Cost: 1, Want: 5, Pod: "p", Bound: -1, PodCap: 5, TTL: 30 * time.Second})
		// A window's grant shrinks near its end: only the bucket's grant is sure.
		if err != nil || !l.Result.Allowed || l.Granted > 5 || (a.UsesBurst() && l.Granted != 5) {
			t.Fatalf("%v: %+v %v", a, l, err)
		}
	}
	c := goredis.NewClient(&goredis.Options{Addr: standaloneAddr(t)})
	defer c.Close()
	keys, err := c.Keys(context.Background(), "grantttl:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 8 {
		t.Fatalf("want a counter and a pods hash per algorithm, got %v", keys)
	}
	for _, k := range keys {
		ttl := c.PTTL(context.Background(), k).Val()
		if ttl <= 0 || (strings.HasSuffix(k, ":p") && ttl > 31*time.Second) {
			t.Errorf("%s: TTL %v", k, ttl)
		}
	}
}

// SlidingLog stays exact: the store refuses to grant it.
func TestGrantRefusesSlidingLog(t *testing.T) {
	s := realStore(t, redisstore.Options{Addrs: []string{standaloneAddr(t)}})
	_, err := s.Grant(context.Background(), store.GrantRequest{Key: storetest.KeyFor(t, "k"),
		Limit: algo.Limit{Algorithm: algo.SlidingLog, Limit: 5, Period: time.Second}, Cost: 1, TTL: time.Second})
	if err == nil || !strings.Contains(err.Error(), "SlidingLog can't be granted") {
		t.Fatalf("got %v, want an error naming SlidingLog", err)
	}
}
