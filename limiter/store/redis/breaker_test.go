package redis_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
	"github.com/sluice-dev/sluice/limiter/store/redis/redistest"
	"github.com/sluice-dev/sluice/limiter/store/storetest"
)

// Slot agrees with CLUSTER KEYSLOT, hash tags included, and so does the
// slot the store computes for its own keys.
func TestSlotMatchesRedis(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: clusterAddrs(t)[0]})
	defer c.Close()
	s := realStore(t, redisstore.Options{Addrs: clusterAddrs(t), Cluster: true})
	keys := []string{"", "a", "foo", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{}", "x{", "}{y}"}
	for i := range 200 {
		keys = append(keys, s.RedisKey(storetest.KeyFor(t, fmt.Sprint(i))))
	}
	for _, k := range keys {
		want, err := c.ClusterKeySlot(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := redisstore.Slot(k); int64(got) != want {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
}

// Failure classes, from errors that real servers and sockets produce: only
// "the shard can't answer" counts; answers that are errors do not.
func TestFailureClass(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	reply := func(msg string) error {
		return c.Eval(ctx, "return redis.error_reply(ARGV[1])", nil, msg).Err()
	}
	// A listener that accepts and never answers: a read times out.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
		}
	}()
	mute := goredis.NewClient(&goredis.Options{Addr: silent.Addr().String(), MaxRetries: -1, ReadTimeout: 50 * time.Millisecond})
	defer mute.Close()
	deadCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	refused := goredis.NewClient(&goredis.Options{Addr: redistest.FreeAddr(t, "127.0.0.1"), MaxRetries: -1})
	defer refused.Close()
	canceled, cancelNow := context.WithCancel(ctx)
	cancelNow()

	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"success", c.Ping(ctx).Err(), ""},
		{"nil reply", c.Get(ctx, "missing").Err(), ""},
		{"script error", c.Eval(ctx, "error('boom')", nil).Err(), ""},
		{"wrong type", func() error { c.Set(ctx, "s", "x", time.Minute); return c.LPush(ctx, "s", "y").Err() }(), ""},
		{"noscript", c.EvalSha(ctx, strings.Repeat("0", 40), nil).Err(), ""},
		{"caller canceled", c.Ping(canceled).Err(), ""},
		{"CLUSTERDOWN", reply("CLUSTERDOWN The cluster is down"), redisstore.ClassClusterDown},
		{"TRYAGAIN", reply("TRYAGAIN Multiple keys request during rehashing of slot"), redisstore.ClassTryAgain},
		{"MASTERDOWN", reply("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), redisstore.ClassMasterDown},
		{"LOADING", reply("LOADING Redis is loading the dataset in memory"), redisstore.ClassLoading},
		{"read timeout", mute.Ping(ctx).Err(), redisstore.ClassTimeout},
		{"context deadline", mute.Ping(deadCtx).Err(), redisstore.ClassTimeout},
		{"connection refused", refused.Ping(ctx).Err(), redisstore.ClassConnection},
	} {
		if got := redisstore.FailureClass(tc.err); got != tc.want {
			t.Errorf("%s (%v): class %q, want %q", tc.name, tc.err, got, tc.want)
		}
	}
}

// breakerOptions trip fast and probe often; the deadline is generous so
// that -race on a busy machine does not time out a healthy shard.
func faultStore(t *testing.T, addrs []string, cluster bool, timeout time.Duration) (*redisstore.Store, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	s := realStore(t, redisstore.Options{Addrs: addrs, Cluster: cluster, Timeout: timeout, Registerer: reg,
		Breaker: redisstore.BreakerOptions{Failures: 3, Cooldown: 100 * time.Millisecond}})
	return s, reg
}

var faultLimit = algo.Limit{Algorithm: algo.TokenBucket, Limit: 1 << 40, Period: time.Second, Burst: 1 << 40}

func take(s *redisstore.Store, k store.Key) (algo.Result, error, time.Duration) {
	start := time.Now()
	r, err := s.Take(context.Background(), store.Request{Key: k, Limit: faultLimit, Cost: 1})
	return r, err, time.Since(start)
}

// waitFor calls f until it is true, failing after within.
func waitFor(t *testing.T, within time.Duration, what string, f func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !f() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(5 * time.Millisecond) // polling the store under test
	}
	return time.Since(start)
}

func gauge(t *testing.T, reg *prometheus.Registry, name, shard string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "shard" && l.GetValue() == shard {
					if m.Gauge != nil {
						return m.GetGauge().GetValue()
					}
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

// p99 of durations.
func p99(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)*99/100]
}

// openLatency takes n decisions against an open breaker and returns their
// p99, checking that each failed with store.ErrUnavailable.
func openLatency(t *testing.T, s *redisstore.Store, k store.Key, n int) time.Duration {
	t.Helper()
	ds := make([]time.Duration, n)
	for i := range ds {
		_, err, d := take(s, k)
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("decision %d with the breaker open: %v, want store.ErrUnavailable", i, err)
		}
		ds[i] = d
	}
	return p99(ds)
}

// A standalone server has one breaker: killed, it opens, and decisions fail
// in microseconds; restarted, the breaker closes within the target (2s).
func TestBreakerStandaloneKillAndRestart(t *testing.T) {
	srv := redistest.Start(t)
	s, reg := faultStore(t, []string{srv.Addr}, false, 300*time.Millisecond)
	key := storetest.KeyFor(t, "k")
	if _, err, _ := take(s, key); err != nil {
		t.Fatal(err)
	}
	if got := gauge(t, reg, "sluice_redis_breaker_state", "standalone"); got != 0 {
		t.Fatalf("breaker state %v before the fault, want 0 (closed)", got)
	}

	srv.Stop()
	killed := time.Now()
	waitFor(t, 5*time.Second, "breaker open", func() bool {
		_, err, _ := take(s, key)
		return errors.Is(err, store.ErrUnavailable)
	})
	opened := time.Since(killed)
	p := openLatency(t, s, key, 2000)
	t.Logf("breaker opened %v after the kill; p99 of a decision while open: %v", opened.Round(time.Millisecond), p)
	if opened > 3*time.Second {
		t.Errorf("breaker opened %v after the kill; the target is 1s", opened)
	}
	if p > 20*time.Millisecond {
		t.Errorf("p99 %v while open: decisions should skip Redis (target 2ms)", p)
	}
	if got := gauge(t, reg, "sluice_redis_breaker_state", "standalone"); got != 1 && got != 2 {
		t.Errorf("breaker state %v while down, want 1 (open) or 2 (probing)", got)
	}
	if got := gauge(t, reg, "sluice_redis_breaker_opened_total", "standalone"); got != 1 {
		t.Errorf("breaker opened %v times, want 1", got)
	}

	srv.Restart(t) // returns once it answers PING
	resumed := waitFor(t, 10*time.Second, "decisions from Redis again", func() bool {
		_, err, _ := take(s, key)
		return err == nil
	})
	t.Logf("decisions from Redis %v after it answered again", resumed.Round(time.Millisecond))
	if resumed > 5*time.Second {
		t.Errorf("enforcement resumed %v after Redis answered; the target is 2s", resumed)
	}
	if got := gauge(t, reg, "sluice_redis_breaker_state", "standalone"); got != 0 {
		t.Errorf("breaker state %v after recovery, want 0", got)
	}
}

// A paused server (SIGSTOP: no RST, nothing answers) is found by the
// deadline: each decision waits at most the timeout until the breaker opens.
func TestBreakerPausedServer(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 300 * time.Millisecond
	s, _ := faultStore(t, []string{srv.Addr}, false, timeout)
	key := storetest.KeyFor(t, "k")
	if _, err, _ := take(s, key); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	paused := true
	defer func() {
		if paused {
			srv.Resume(t)
		}
	}()
	start := time.Now()
	var slowest time.Duration
	waitFor(t, 10*time.Second, "breaker open", func() bool {
		_, err, d := take(s, key)
		if err == nil {
			t.Fatal("a decision succeeded against a paused server")
		}
		slowest = max(slowest, d)
		return errors.Is(err, store.ErrUnavailable)
	})
	opened := time.Since(start)
	p := openLatency(t, s, key, 2000)
	t.Logf("breaker opened %v after the pause; slowest decision before %v (deadline %v); p99 while open %v",
		opened.Round(time.Millisecond), slowest.Round(time.Millisecond), timeout, p)
	if slowest > timeout+time.Second {
		t.Errorf("a decision waited %v on a paused server; the deadline is %v", slowest, timeout)
	}
	if opened > 3*time.Second {
		t.Errorf("breaker opened %v after the pause; the target is 1s", opened)
	}
	if p > 20*time.Millisecond {
		t.Errorf("p99 %v while open (target 2ms)", p)
	}
	srv.Resume(t)
	paused = false
	resumed := waitFor(t, 10*time.Second, "decisions from Redis again", func() bool {
		_, err, _ := take(s, key)
		return err == nil
	})
	t.Logf("decisions from Redis %v after SIGCONT", resumed.Round(time.Millisecond))
	if resumed > 5*time.Second {
		t.Errorf("enforcement resumed %v after the server answered; the target is 2s", resumed)
	}
}

// keysOn returns n keys whose counters live on shard i.
func keysOn(t *testing.T, s *redisstore.Store, c *redistest.Cluster, i, n int) []store.Key {
	var out []store.Key
	for j := 0; len(out) < n; j++ {
		k := storetest.KeyFor(t, fmt.Sprintf("shard %d key %d", i, j))
		if c.ShardOf(redisstore.Slot(s.RedisKey(k))) == i {
			out = append(out, k)
		}
	}
	return out
}

// goroutines polls until the goroutine count is at most want, and returns
// the last count.
func settledGoroutines(want int, within time.Duration) int {
	deadline := time.Now().Add(within)
	for {
		n := runtime.NumGoroutine()
		if n <= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond) // goroutines exit asynchronously
	}
}

// A cluster has a breaker per shard, named by its slots: a killed primary
// opens only its shard's breaker, keys on other shards are decided as
// before, the breaker (same name) closes once the replica is promoted, and
// nothing leaks.
func TestBreakerPerShardClusterFailover(t *testing.T) {
	c := redistest.StartClusterWith(t, redistest.ClusterOptions{Primaries: 3, Replicas: 1, NodeTimeout: 2 * time.Second})
	before := runtime.NumGoroutine()
	s, reg := faultStore(t, c.Addrs(), true, 300*time.Millisecond)
	victim, healthy := keysOn(t, s, c, 0, 4), append(keysOn(t, s, c, 1, 4), keysOn(t, s, c, 2, 4)...)
	waitFor(t, 10*time.Second, "every shard answers", func() bool {
		for _, k := range append(slices.Clone(victim), healthy...) {
			if _, err, _ := take(s, k); err != nil {
				return false
			}
		}
		return len(s.Breakers()) == 3
	})
	var names []string
	for _, b := range s.Breakers() {
		names = append(names, b.Shard)
	}
	if want := []string{c.RangeName(0), c.RangeName(1), c.RangeName(2)}; !slices.Equal(names, want) {
		t.Fatalf("breakers %v, want one per shard %v", names, want)
	}

	old := c.Nodes[0]
	old.Stop()
	killed := time.Now()
	healthyErrors := 0
	opened := waitFor(t, 5*time.Second, "victim shard's breaker open", func() bool {
		for _, k := range healthy {
			if _, err, _ := take(s, k); err != nil {
				healthyErrors++
			}
		}
		_, err, _ := take(s, victim[0])
		return errors.Is(err, store.ErrUnavailable)
	})
	p := openLatency(t, s, victim[1], 1000)
	t.Logf("shard %s breaker opened %v after the kill; p99 while open %v", c.RangeName(0), opened.Round(time.Millisecond), p)
	if opened > 3*time.Second {
		t.Errorf("breaker opened %v after the kill; the target is 1s", opened)
	}
	if p > 20*time.Millisecond {
		t.Errorf("p99 %v while open (target 2ms)", p)
	}
	for _, b := range s.Breakers() {
		if b.Shard != c.RangeName(0) && b.State != redisstore.BreakerClosed {
			t.Errorf("breaker of healthy shard %s is %v", b.Shard, b.State)
		}
	}

	promoted := c.WaitFailover(t, 0, old, 30*time.Second)
	answered := time.Now()
	resumed := waitFor(t, 10*time.Second, "victim keys decided by Redis again", func() bool {
		for _, k := range healthy {
			if _, err, _ := take(s, k); err != nil {
				healthyErrors++
			}
		}
		_, err, _ := take(s, victim[2])
		return err == nil
	})
	t.Logf("replica %s promoted %v after the kill; decisions from Redis %v after that",
		promoted.Addr, answered.Sub(killed).Round(time.Millisecond), resumed.Round(time.Millisecond))
	if resumed > 5*time.Second {
		t.Errorf("enforcement resumed %v after the promoted replica answered; the target is 2s", resumed)
	}
	if healthyErrors > 0 {
		t.Errorf("%d decisions on healthy shards failed during the fault", healthyErrors)
	}
	if got := gauge(t, reg, "sluice_redis_breaker_opened_total", c.RangeName(0)); got != 1 {
		t.Errorf("shard %s breaker opened %v times, want once (the same breaker across the failover)", c.RangeName(0), got)
	}
	for _, k := range victim {
		if _, err, _ := take(s, k); err != nil {
			t.Errorf("after the failover: %v", err)
		}
	}

	// The old primary comes back as a replica; the store closes cleanly.
	old.Restart(t)
	c.WaitHealthy(t, 30*time.Second)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := settledGoroutines(before+2, 5*time.Second); n > before+2 {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Close, %d before the store: a leak\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// 500ms of latency on one shard's primary (through a proxy): only that
// shard's keys degrade; its breaker stays open while probes time out, and
// closes when the latency goes.
func TestLatencyOnOneShard(t *testing.T) {
	c := redistest.StartClusterWith(t, redistest.ClusterOptions{Primaries: 3, Proxied: []int{1}})
	s, _ := faultStore(t, c.Addrs(), true, 200*time.Millisecond)
	slow, fast := keysOn(t, s, c, 1, 2), append(keysOn(t, s, c, 0, 2), keysOn(t, s, c, 2, 2)...)
	waitFor(t, 10*time.Second, "every shard answers", func() bool {
		for _, k := range append(slices.Clone(slow), fast...) {
			if _, err, _ := take(s, k); err != nil {
				return false
			}
		}
		return len(s.Breakers()) == 3
	})

	c.Proxies[1].SetLatency(500 * time.Millisecond)
	start := time.Now()
	fastErrors := 0
	waitFor(t, 5*time.Second, "slow shard's breaker open", func() bool {
		for _, k := range fast {
			if _, err, _ := take(s, k); err != nil {
				fastErrors++
			}
		}
		_, err, _ := take(s, slow[0])
		return errors.Is(err, store.ErrUnavailable)
	})
	t.Logf("slow shard's breaker opened %v after 500ms of latency was added", time.Since(start).Round(time.Millisecond))
	// Several probes later, it is still open, and the other shards answer.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		for _, k := range fast {
			if _, err, _ := take(s, k); err != nil {
				fastErrors++
			}
		}
		if _, err, d := take(s, slow[1]); err == nil || d > 100*time.Millisecond {
			t.Fatalf("a decision on the slow shard: %v after %v, want store.ErrUnavailable at once", err, d)
		}
		time.Sleep(20 * time.Millisecond) // pacing the load, not synchronising
	}
	if fastErrors > 0 {
		t.Errorf("%d decisions on the other shards failed", fastErrors)
	}

	c.Proxies[1].SetLatency(0)
	resumed := waitFor(t, 10*time.Second, "slow shard answers again", func() bool {
		_, err, _ := take(s, slow[1])
		return err == nil
	})
	t.Logf("slow shard decided by Redis %v after the latency went", resumed.Round(time.Millisecond))
}
