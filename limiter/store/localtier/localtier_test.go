package localtier_test

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/internal/testtier"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/localtier"
	"github.com/sluice-dev/sluice/limiter/store/memory"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// Real redis-server processes, shared by the package: one standalone
// server and one 3-primary cluster.
var (
	standaloneOnce sync.Once
	standalone     *redistest.Server
	clusterOnce    sync.Once
	cluster        *redistest.Cluster
)

func TestMain(m *testing.M) {
	code := m.Run()
	servers := []*redistest.Server{standalone}
	if cluster != nil {
		servers = append(servers, cluster.Nodes...)
	}
	for _, s := range servers {
		if s != nil {
			s.Stop()
			_ = os.RemoveAll(s.Dir)
		}
	}
	os.Exit(code)
}

func redisOpts(t testing.TB, clustered bool) redisstore.Options {
	testtier.Integration(t, "redis-server")
	if clustered {
		clusterOnce.Do(func() { cluster = redistest.StartCluster(redistest.Shared(t), 3) })
		if cluster == nil {
			t.Fatal("redis cluster did not start")
		}
		return redisstore.Options{Addrs: cluster.Addrs(), Cluster: true, Timeout: 2 * time.Second}
	}
	standaloneOnce.Do(func() { standalone = redistest.Start(redistest.Shared(t)) })
	if standalone == nil {
		t.Fatal("standalone redis did not start")
	}
	return redisstore.Options{Addrs: []string{standalone.Addr}, Timeout: 2 * time.Second}
}

func newRedis(t testing.TB, clustered bool) *redisstore.Store {
	s, err := redisstore.New(redisOpts(t, clustered))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// pod is one limiter pod: its own tier (and pod id) on its own client.
func newPod(t testing.TB, st store.Store, opts localtier.Options) *localtier.Tier {
	tier := localtier.New(st, opts)
	t.Cleanup(func() { _ = tier.Close() })
	return tier
}

func policy(tier *localtier.Tier, lim algo.Limit, lt v1alpha1.LocalTier) *localtier.Policy {
	lt.Enabled = ptr.To(true)
	return tier.Swap([]localtier.PolicyConfig{tierConfig(lim, &lt)})["ns/p"]
}

// tierConfig is what limiter/config compiles of lt for policy ns/p.
func tierConfig(lim algo.Limit, lt *v1alpha1.LocalTier) localtier.PolicyConfig {
	cfg := localtier.PolicyConfig{ID: "ns/p", Limit: lim, TTL: lt.EffectiveTTL(), Bound: -1}
	if b, ok := lt.OvershootBound(lim.Limit); ok {
		cfg.Bound = b
	}
	return cfg
}

func overshoot(v intstr.IntOrString) v1alpha1.LocalTier { return v1alpha1.LocalTier{MaxOvershoot: &v} }

// Over the memory store the tier passes every decision through: the same
// random sequence gives what the bare store gives, step for step.
func TestMemoryPassThroughIsExact(t *testing.T) {
	for _, a := range []algo.Algorithm{algo.TokenBucket, algo.GCRA, algo.SlidingWindow, algo.FixedWindow} {
		t.Run(a.String(), func(t *testing.T) {
			lim := algo.Limit{Algorithm: a, Limit: 7, Period: 3 * time.Second, Burst: 7}
			clock := storetest.NewClock()
			bare := memory.New(memory.Options{Clock: clock.Now, SweepInterval: -1})
			fronted := memory.New(memory.Options{Clock: clock.Now, SweepInterval: -1})
			tier := newPod(t, fronted, localtier.Options{})
			if tier.Granting() {
				t.Fatal("a tier over the memory store grants")
			}
			p := policy(tier, lim, overshoot(intstr.FromString("100%")))
			key := storetest.KeyFor(t, "k")
			now := storetest.Base
			for i := range 400 {
				now = now.Add(time.Duration(i%7) * 97 * time.Millisecond)
				clock.Set(now)
				req := store.Request{Key: key, Limit: lim, Cost: int64(i % 3)}
				want, _ := bare.Take(context.Background(), req)
				got, err := tier.Take(context.Background(), p, req)
				if err != nil || got != want {
					t.Fatalf("step %d: got %+v %v, want %+v", i, got, err, want)
				}
			}
			if st := p.Stats(); st.Exact != 400 || st.Grants != 0 || st.Local != 0 {
				t.Fatalf("stats %+v: want 400 exact decisions", st)
			}
		})
	}
}

// drive sends n unit requests on key through pods, spread round robin over
// workers goroutines, and returns how many were admitted.
func drive(t *testing.T, pods []*localtier.Tier, ps []*localtier.Policy, key store.Key, lim algo.Limit, workers, n int) int64 {
	return driveUntil(t, pods, ps, key, lim, workers, n, time.Time{})
}

// driveUntil is drive that also stops at until, when set.
func driveUntil(t *testing.T, pods []*localtier.Tier, ps []*localtier.Policy, key store.Key, lim algo.Limit, workers, n int, until time.Time) int64 {
	t.Helper()
	var admitted, sent atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := w % len(pods)
			for sent.Add(1) <= int64(n) && (until.IsZero() || time.Now().Before(until)) {
				r, err := pods[i].Take(context.Background(), ps[i], store.Request{Key: key, Limit: lim, Cost: 1})
				if err != nil {
					t.Errorf("take: %v", err)
					return
				}
				if r.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return admitted.Load()
}

// FixedWindow across pods: a window admits at most its limit however the
// pods take grants, and once they stop gracefully every unspent unit is back:
// the counter shows exactly what was admitted. Standalone and cluster.
func TestFixedWindowAdmitsTheLimitAndCreditsBack(t *testing.T) {
	for name, clustered := range map[string]bool{"standalone": false, "cluster": true} {
		t.Run(name, func(t *testing.T) {
			lim := algo.Limit{Algorithm: algo.FixedWindow, Limit: 600, Period: time.Hour, Burst: 600}
			key := storetest.KeyFor(t, "fw")
			var pods []*localtier.Tier
			var ps []*localtier.Policy
			for range 4 {
				tier := localtier.New(newRedis(t, clustered), localtier.Options{})
				pods = append(pods, tier)
				ps = append(ps, policy(tier, lim, overshoot(intstr.FromInt32(60))))
			}
			start := time.Now()
			// 400 requests, under the limit: none may be denied.
			if got := drive(t, pods, ps, key, lim, 16, 400); got != 400 {
				t.Fatalf("admitted %d of 400 under a limit of 600", got)
			}
			got := 400 + drive(t, pods, ps, key, lim, 16, 800)
			windows := int64(time.Now().Truncate(time.Hour).Sub(start.Truncate(time.Hour))/time.Hour) + 1
			if got > lim.Limit*windows {
				t.Fatalf("admitted %d with a limit of %d per window over %d windows", got, lim.Limit, windows)
			}
			var grants, local int64
			for i, tier := range pods {
				st := ps[i].Stats()
				grants, local = grants+st.Grants, local+st.Local
				_ = tier.Close()
			}
			t.Logf("%d admitted; %d grants, %d local decisions", got, grants, local)
			if local == 0 || grants >= 1200 {
				t.Errorf("grants %d, local decisions %d: want most decisions local", grants, local)
			}
			if windows == 1 {
				peek, err := newRedis(t, clustered).Take(context.Background(), store.Request{Key: key, Limit: lim})
				if err != nil {
					t.Fatal(err)
				}
				if peek.Remaining != lim.Limit-got {
					t.Fatalf("after every pod stopped the counter has %d left; %d were admitted of %d: units lost or doubled",
						peek.Remaining, got, lim.Limit)
				}
			}
		})
	}
}

// TokenBucket across pods, driven as fast as they answer for a second: the
// fleet admits at most burst + rate·elapsed + maxOvershoot (the package
// comment's bound).
func TestTokenBucketWithinBound(t *testing.T) {
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 2000, Period: time.Second, Burst: 200}
	const bound = 40
	key := storetest.KeyFor(t, "tb")
	var pods []*localtier.Tier
	var ps []*localtier.Policy
	for range 4 {
		tier := newPod(t, newRedis(t, false), localtier.Options{})
		pods = append(pods, tier)
		ps = append(ps, policy(tier, lim, overshoot(intstr.FromInt32(bound))))
	}
	start := time.Now()
	got := driveUntil(t, pods, ps, key, lim, 16, 1<<40, start.Add(time.Second))
	elapsed := time.Since(start)
	exact := lim.Burst + int64(elapsed.Seconds()*float64(lim.Limit))
	t.Logf("admitted %d in %v; exact at most %d; bound %d", got, elapsed, exact, bound)
	if got > exact+bound {
		t.Fatalf("admitted %d in %v: more than burst + rate·elapsed (%d) + bound %d", got, elapsed, exact, bound)
	}
	// The full bucket's burst is there to take, less what pods hold at the
	// end: a lower bound that does not depend on how fast this machine is.
	if got < lim.Burst-bound {
		t.Fatalf("admitted %d in %v: not even the burst %d less the bound", got, elapsed, lim.Burst)
	}
	for _, p := range ps {
		if st := p.Stats(); st.OvershootBound != bound || st.Pods < 1 || st.Pods > 4 {
			t.Errorf("stats %+v: want bound %d and 1 to 4 pods", st, bound)
		}
	}
}

// A pod that dies loses at most the reserve it held, and its successor (a
// new pod id) counts nothing twice.
func TestCrashedPodLosesOnlyItsGrant(t *testing.T) {
	lim := algo.Limit{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour, Burst: 1000}
	key := storetest.KeyFor(t, "crash")
	st := newRedis(t, false)
	const bound = 30
	crashed := localtier.New(st, localtier.Options{SweepInterval: -1}) // never closed: it crashes
	p := policy(crashed, lim, overshoot(intstr.FromInt32(bound)))
	start := time.Now()
	got := drive(t, []*localtier.Tier{crashed}, []*localtier.Policy{p}, key, lim, 8, 300)
	successor := newPod(t, st, localtier.Options{})
	p2 := policy(successor, lim, overshoot(intstr.FromInt32(bound)))
	got += drive(t, []*localtier.Tier{successor}, []*localtier.Policy{p2}, key, lim, 8, 300)
	_ = successor.Close()
	if got != 600 {
		t.Fatalf("admitted %d of 600 under a limit of 1000", got)
	}
	if time.Now().Truncate(time.Hour) != start.Truncate(time.Hour) {
		t.Skip("the run crossed an hour boundary: the window reset") // once an hour at most
	}
	peek, err := st.Take(context.Background(), store.Request{Key: key, Limit: lim})
	if err != nil {
		t.Fatal(err)
	}
	lost := lim.Limit - got - peek.Remaining
	if lost < 0 || lost > bound {
		t.Fatalf("%d units lost (remaining %d after %d admitted): want 0 to the crashed pod's reserve, at most %d", lost, peek.Remaining, got, bound)
	}
}

// A flood against an exhausted key is answered from the over-limit cache:
// one store call confirms the denial, the rest cost nothing.
func TestOverLimitCache(t *testing.T) {
	lim := algo.Limit{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Hour, Burst: 5}
	tier := newPod(t, newRedis(t, false), localtier.Options{})
	p := policy(tier, lim, v1alpha1.LocalTier{})
	key := storetest.KeyFor(t, "flood")
	start := time.Now()
	got := drive(t, []*localtier.Tier{tier}, []*localtier.Policy{p}, key, lim, 8, 1000)
	if time.Now().Truncate(time.Hour) != start.Truncate(time.Hour) {
		t.Skip("the flood crossed an hour boundary: the window reset") // once an hour at most
	}
	st := p.Stats()
	if got > 5 || st.CachedDenials < 990 || st.Grants > 10 {
		t.Fatalf("admitted %d; stats %+v: want at most 5 admitted and the flood answered from the cache", got, st)
	}
	r, err := tier.Take(context.Background(), p, store.Request{Key: key, Limit: lim, Cost: 1})
	if err != nil || r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > time.Hour {
		t.Fatalf("cached denial %+v %v: want denied with a retry until the window ends", r, err)
	}
}

// A cold key is exact: its first call asks for nothing beyond the cost,
// and so does a key used once a second with a 100ms ttl; such a call runs
// the exact script, not the grant script (a grant pays only where a key is
// hot).
func TestColdKeyIsExact(t *testing.T) {
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 1000, Period: time.Second, Burst: 1000}
	tier := newPod(t, newRedis(t, false), localtier.Options{})
	p := policy(tier, lim, v1alpha1.LocalTier{MaxOvershoot: ptr.To(intstr.FromInt32(100))})
	for i := range 50 {
		key := storetest.KeyFor(t, string(rune('a'+i%26))+string(rune('a'+i/26)))
		if r, err := tier.Take(context.Background(), p, store.Request{Key: key, Limit: lim, Cost: 1}); err != nil || !r.Allowed {
			t.Fatalf("take: %+v %v", r, err)
		}
	}
	if st := p.Stats(); st.Granted != 0 || st.Grants != 0 || st.Exact != 50 {
		t.Fatalf("stats %+v: want 50 exact calls and no grant", st)
	}
}

// A key takes a grant of one unit when it is expected to spend two within the ttl,
// though it spends less than one in the 250ms a grant asks for: used every
// 400ms (2.5 a second), it does with a 2s ttl (every other call is then
// spent from the grant), and used every 170ms it does not with a 200ms ttl
// (each call is exact). Sleeps only stretch on a loaded machine, lowering
// the rate: at the 2s ttl the key still takes grants unless sleeps take a second.
func TestWarmKeyIsGrantedWhatItSpends(t *testing.T) {
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 1000, Period: time.Second, Burst: 1000}
	tier := newPod(t, newRedis(t, false), localtier.Options{})
	for _, c := range []struct {
		ttl, every time.Duration
		grant      bool
	}{{200 * time.Millisecond, 170 * time.Millisecond, false}, {2 * time.Second, 400 * time.Millisecond, true}} {
		p := policy(tier, lim, v1alpha1.LocalTier{TTL: &metav1.Duration{Duration: c.ttl}, MaxOvershoot: ptr.To(intstr.FromInt32(100))})
		key := storetest.KeyFor(t, "warm-"+c.ttl.String())
		for i := range 6 {
			if i > 0 {
				time.Sleep(c.every)
			}
			if r, err := tier.Take(context.Background(), p, store.Request{Key: key, Limit: lim, Cost: 1}); err != nil || !r.Allowed {
				t.Fatalf("ttl %v, take %d: %+v %v", c.ttl, i, r, err)
			}
		}
		st := p.Stats()
		if !c.grant && (st.Grants != 0 || st.Exact != 6) {
			t.Errorf("ttl %v: stats %+v, want 6 exact calls and no grant", c.ttl, st)
		}
		if c.grant && (st.Grants == 0 || st.Local == 0 || st.Granted > st.Grants) {
			t.Errorf("ttl %v: stats %+v, want grants of one unit, spent locally", c.ttl, st)
		}
	}
}

// With maxOvershoot 0 a pod may hold nothing: even a hot key's calls are
// exact, never a grant call that could grant nothing.
func TestZeroOvershootIsExact(t *testing.T) {
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 1000, Period: time.Second, Burst: 1000}
	tier := newPod(t, newRedis(t, false), localtier.Options{})
	p := policy(tier, lim, v1alpha1.LocalTier{MaxOvershoot: ptr.To(intstr.FromInt32(0))})
	key := storetest.KeyFor(t, "hot")
	for i := range 50 {
		if r, err := tier.Take(context.Background(), p, store.Request{Key: key, Limit: lim, Cost: 1}); err != nil || !r.Allowed {
			t.Fatalf("take %d: %+v %v", i, r, err)
		}
	}
	if st := p.Stats(); st.Grants != 0 || st.Local != 0 || st.Exact != 50 {
		t.Fatalf("stats %+v: want 50 exact calls and no grant", st)
	}
}

// The bound is what the policy declares, 0 for windows, and pods ×
// DefaultPodShare of the capacity without maxOvershoot.
func TestOvershootBound(t *testing.T) {
	tb := algo.Limit{Algorithm: algo.TokenBucket, Limit: 2000, Period: time.Second, Burst: 3000}
	fw := algo.Limit{Algorithm: algo.FixedWindow, Limit: 2000, Period: time.Second, Burst: 2000}
	for _, c := range []struct {
		name string
		lim  algo.Limit
		lt   v1alpha1.LocalTier
		pods int64
		want int64
	}{
		{"count", tb, overshoot(intstr.FromInt32(70)), 10, 70},
		{"percent of rate.limit", tb, overshoot(intstr.FromString("5%")), 10, 100},
		{"zero is exact", tb, overshoot(intstr.FromInt32(0)), 10, 0},
		{"unset: pods × 1% of burst", tb, v1alpha1.LocalTier{}, 4, 120},
		{"window algorithms", fw, overshoot(intstr.FromString("5%")), 10, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := localtier.NewPolicy(tierConfig(c.lim, &c.lt))
			if got := p.OvershootBound(c.pods); got != c.want {
				t.Fatalf("bound %d, want %d", got, c.want)
			}
		})
	}
}

// The tier tracks at most MaxKeys keys; the rest are decided exactly by the
// store, and still correctly.
func TestBoundedKeys(t *testing.T) {
	// 720h: an hour's window could end between a key's two requests.
	lim := algo.Limit{Algorithm: algo.FixedWindow, Limit: 1, Period: 720 * time.Hour, Burst: 1}
	tier := newPod(t, newRedis(t, false), localtier.Options{MaxKeys: 64})
	p := policy(tier, lim, v1alpha1.LocalTier{})
	for i := range 500 {
		key := storetest.KeyFor(t, "k"+string(rune(i)))
		for j := range 2 {
			r, err := tier.Take(context.Background(), p, store.Request{Key: key, Limit: lim, Cost: 1})
			if err != nil || r.Allowed != (j == 0) {
				t.Fatalf("key %d, request %d: %+v %v: want the first of each key admitted, the second denied", i, j, r, err)
			}
		}
	}
	if n := tier.Keys(); n > 64 {
		t.Fatalf("%d keys tracked, MaxKeys is 64", n)
	}
	if st := p.Stats(); st.Exact == 0 {
		t.Fatalf("stats %+v: want keys beyond MaxKeys decided exactly", st)
	}
}

// A grant that expires unspent is credited back by the sweep: the counter
// gets its units back, and no unit is counted twice.
func TestExpiredGrantIsCreditedBack(t *testing.T) {
	lim := algo.Limit{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour, Burst: 1000}
	st := newRedis(t, false)
	tier := newPod(t, st, localtier.Options{SweepInterval: -1})
	p := policy(tier, lim, v1alpha1.LocalTier{TTL: &metav1.Duration{Duration: 100 * time.Millisecond},
		MaxOvershoot: ptr.To(intstr.FromInt32(50))})
	key := storetest.KeyFor(t, "expire")
	start := time.Now()
	got := drive(t, []*localtier.Tier{tier}, []*localtier.Policy{p}, key, lim, 4, 200)
	if p.Stats().Granted == 0 {
		t.Fatalf("stats %+v: nothing was granted", p.Stats())
	}
	if time.Now().Truncate(time.Hour) != start.Truncate(time.Hour) {
		t.Skip("the run crossed an hour boundary: the window reset") // once an hour at most
	}
	// Once the 100ms ttl has passed, a sweep gives back whatever the last
	// grant left: poll until the counter shows exactly what was admitted.
	var left int64
	deadline := time.Now().Add(time.Minute) // a loaded machine's deadline, not a target
	for time.Now().Before(deadline) {
		tier.Sweep()
		peek, err := st.Take(context.Background(), store.Request{Key: key, Limit: lim})
		if err != nil {
			t.Fatal(err)
		}
		if left = peek.Remaining; left == lim.Limit-got {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling: the grant's ttl must pass
	}
	t.Fatalf("counter has %d left after %d admitted of %d: the unspent grant did not come back exactly (stats %+v)", left, got, lim.Limit, p.Stats())
}

// The sweeper running on its own credits an expired grant back: a tick
// after a grant was taken scans the keys, though a tier of cold keys
// skips the scans between its idle sweeps.
func TestSweeperCreditsExpiredGrant(t *testing.T) {
	lim := algo.Limit{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour, Burst: 1000}
	st := newRedis(t, false)
	tier := newPod(t, st, localtier.Options{SweepInterval: 10 * time.Millisecond})
	p := policy(tier, lim, v1alpha1.LocalTier{TTL: &metav1.Duration{Duration: 100 * time.Millisecond},
		MaxOvershoot: ptr.To(intstr.FromInt32(50))})
	key := storetest.KeyFor(t, "sweeper")
	start := time.Now()
	got := drive(t, []*localtier.Tier{tier}, []*localtier.Policy{p}, key, lim, 4, 200)
	if p.Stats().Granted == 0 {
		t.Fatalf("stats %+v: nothing was granted", p.Stats())
	}
	var left int64
	deadline := time.Now().Add(2 * time.Minute) // a loaded machine's deadline, not a target
	for time.Now().Before(deadline) {
		if time.Now().Truncate(time.Hour) != start.Truncate(time.Hour) {
			t.Skip("the run crossed an hour boundary: the window reset") // once an hour at most
		}
		peek, err := st.Take(context.Background(), store.Request{Key: key, Limit: lim})
		if err != nil {
			t.Fatal(err)
		}
		if left = peek.Remaining; left == lim.Limit-got {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling: the grant's ttl must pass
	}
	t.Fatalf("counter has %d left after %d admitted of %d: the sweeper did not give the unspent grant back (stats %+v)", left, got, lim.Limit, p.Stats())
}

// A pod waits for its fair share of a bucket's refill (rate / pods) to
// cover the cost and its chunk before it asks an exhausted bucket again,
// but never longer than MaxHold or a twentieth of the period.
func TestPace(t *testing.T) {
	tb := func(limit int64, period time.Duration) algo.Limit {
		return algo.Limit{Algorithm: algo.TokenBucket, Limit: limit, Period: period, Burst: limit}
	}
	for _, c := range []struct {
		name             string
		lim              algo.Limit
		lt               v1alpha1.LocalTier
		cost, want, pods int64
		pace             time.Duration
	}{
		{"one pod: its chunk's refill", tb(1000, time.Second), overshoot(intstr.FromInt32(100)), 1, 5, 1, 6 * time.Millisecond},
		{"ten pods: its share of the refill", tb(1000, time.Second), overshoot(intstr.FromInt32(100)), 1, 3, 10, 40 * time.Millisecond},
		{"the chunk is the pod's share of the bound", tb(1000, time.Second), overshoot(intstr.FromInt32(20)), 1, 50, 2, 22 * time.Millisecond},
		{"at most MaxHold", tb(10000, 10*time.Second), overshoot(intstr.FromString("5%")), 1, 50, 10, localtier.MaxHold},
		{"at most a twentieth of the period", tb(100, 200*time.Millisecond), overshoot(intstr.FromInt32(100)), 1, 5, 10, 10 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.lt.Enabled = ptr.To(true)
			p := localtier.NewPolicy(tierConfig(c.lim, &c.lt))
			if got := localtier.Pace(p, c.cost, c.want, c.pods); got != c.pace {
				t.Fatalf("pace %v, want %v", got, c.pace)
			}
		})
	}
}

// A grant call that empties a bucket leaves the pod answering locally that
// it is exhausted once the grant is spent, for its pace (at most MaxHold),
// after which it asks the store again and is admitted from the refill.
func TestExhaustedBucketIsPaced(t *testing.T) {
	// 50 units a second, burst 10: the pace of a cost of 10 is 200ms,
	// capped at MaxHold (100ms), by when 5 units have refilled.
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 1000, Period: 20 * time.Second, Burst: 10}
	tier := newPod(t, newRedis(t, false), localtier.Options{})
	p := policy(tier, lim, v1alpha1.LocalTier{})
	key := storetest.KeyFor(t, "paced")
	take := func(cost int64) algo.Result {
		t.Helper()
		r, err := tier.Take(context.Background(), p, store.Request{Key: key, Limit: lim, Cost: cost})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	start := time.Now()
	if r := take(10); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("draining a fresh bucket: %+v", r)
	}
	deadline := start.Add(time.Minute) // a loaded machine's deadline, not a target
	for {
		r := take(1)
		if r.Allowed {
			// The store would have admitted a unit after 20ms; the
			// pod asked it again only once its pace had passed.
			if waited := time.Since(start); waited < localtier.MaxHold {
				t.Fatalf("admitted %v after the drain: want the pod paced for MaxHold (%v)", waited, localtier.MaxHold)
			}
			break
		}
		if r.RetryAfter <= 0 || r.RetryAfter > localtier.MaxHold {
			t.Fatalf("denied %+v: want a retry within MaxHold (%v)", r, localtier.MaxHold)
		}
		if time.Now().After(deadline) {
			t.Fatalf("still denied after a minute: %+v (stats %+v)", r, p.Stats())
		}
	}
	// The flood between the drain and the admission was answered locally:
	// the drain, the admission, and at most one denial the store confirmed
	// if this machine stalled past the pace.
	if st := p.Stats(); st.CachedDenials == 0 || st.Grants > 3 {
		t.Fatalf("stats %+v: want the exhausted bucket's denials answered locally", st)
	}
}
