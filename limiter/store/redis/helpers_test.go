package redis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/internal/testtier"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/memory"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// Tests run against real redis-server processes, never a fake: one
// standalone server and one 3-primary cluster shared by this package.
var (
	standaloneOnce sync.Once
	standalone     *redistest.Server
	clusterOnce    sync.Once
	cluster        *redistest.Cluster
)

func standaloneAddr(t testing.TB) string {
	testtier.Integration(t, "redis-server")
	standaloneOnce.Do(func() { standalone = redistest.Start(redistest.Shared(t)) })
	if standalone == nil {
		t.Fatal("standalone redis did not start")
	}
	return standalone.Addr
}

func clusterAddrs(t *testing.T) []string { return clusterAddrsB(t) }

func clusterAddrsB(t testing.TB) []string {
	testtier.Integration(t, "redis-server")
	clusterOnce.Do(func() { cluster = redistest.StartCluster(redistest.Shared(t), 3) })
	if cluster == nil {
		t.Fatal("redis cluster did not start")
	}
	return cluster.Addrs()
}

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

func newStandalone(t *testing.T, clock store.Clock) store.Store {
	s, err := redisstore.New(redisstore.Options{Addrs: []string{standaloneAddr(t)}, PinnedClock: clock, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newCluster(t *testing.T, clock store.Clock) store.Store {
	s, err := redisstore.New(redisstore.Options{Addrs: clusterAddrs(t), Cluster: true, PinnedClock: clock, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newMemory(t *testing.T, clock store.Clock) store.Store {
	s := memory.New(memory.Options{Clock: clock, SweepInterval: -1})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// realStore uses Redis TIME, as in production.
func realStore(t *testing.T, opts redisstore.Options) *redisstore.Store {
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Second
	}
	s, err := redisstore.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
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

// settle is how long a test waits for something asynchronous (a breaker
// opening or closing, a failover, a shard answering again): sized for a
// loaded 2-core machine running -race, not for the targets the tests log.
const settle = time.Minute

// waitFor calls f until it returns nil, failing after within with what f
// saw last. It returns how long that took: a figure to log, not to assert.
func waitFor(t *testing.T, within time.Duration, what string, f func() error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := f()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v; last seen: %v", what, within, err)
		}
		time.Sleep(5 * time.Millisecond) // polling the store under test
	}
}

// unavailable is nil when err says the store did not try Redis (an open
// breaker: store.ErrUnavailable), else err, or an error saying it answered.
func unavailable(err error) error {
	switch {
	case errors.Is(err, store.ErrUnavailable):
		return nil
	case err == nil:
		return errors.New("a decision from Redis")
	}
	return err
}

// allAnswer is nil when every key is decided by Redis, else the first error.
func allAnswer(s *redisstore.Store, keys []store.Key, shards int) error {
	for _, k := range keys {
		if _, err, _ := take(s, k); err != nil {
			return err
		}
	}
	if n := len(s.Breakers()); n != shards {
		return fmt.Errorf("%d breakers, want %d", n, shards)
	}
	return nil
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

// shardSeries is metric name's series by their shard label.
func shardSeries(t *testing.T, reg *prometheus.Registry, name string) map[string]*dto.Metric {
	t.Helper()
	out := map[string]*dto.Metric{}
	for _, m := range mustFamily(t, reg, name).GetMetric() {
		out[label(m, "shard")] = m
	}
	return out
}

// mustFamily is metric name as reg gathers it.
func mustFamily(t *testing.T, reg *prometheus.Registry, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// shardNameOf is the name the store gives the shard of key k (its slot
// ranges, as sluice_redis_breaker_state labels it).
func shardNameOf(t *testing.T, reg *prometheus.Registry, s *redisstore.Store, k store.Key) string {
	t.Helper()
	slot := int(redisstore.Slot(s.RedisKey(k)))
	for name := range shardSeries(t, reg, "sluice_redis_breaker_state") {
		for _, r := range strings.Split(name, ",") {
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, errA := strconv.Atoi(lo)
			b, errB := strconv.Atoi(hi)
			if errA == nil && errB == nil && a <= slot && slot <= b {
				return name
			}
		}
	}
	t.Fatalf("no shard serves slot %d", slot)
	return ""
}

// deleteKeys deletes the standalone server's keys matching pattern.
func deleteKeys(t *testing.T, pattern string) {
	c := goredis.NewClient(&goredis.Options{Addr: standaloneAddr(t)})
	defer c.Close()
	ctx := context.Background()
	if keys, err := c.Keys(ctx, pattern).Result(); err == nil && len(keys) > 0 {
		c.Del(ctx, keys...)
	}
}
