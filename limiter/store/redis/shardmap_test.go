package redis_test

import (
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// A cluster has a breaker per shard, named by its slots: a killed primary
// opens only its shard's breaker, keys on other shards are decided as
// before, the breaker (same name) closes once the replica is promoted, and
// nothing leaks.
func TestBreakerPerShardClusterFailover(t *testing.T) {
	c := redistest.StartClusterWith(t, redistest.ClusterOptions{Primaries: 3, Replicas: 1, NodeTimeout: 2 * time.Second})
	before := runtime.NumGoroutine()
	s, reg := faultStore(t, c.Addrs(), true, 300*time.Millisecond)
	victim, healthy := keysOn(t, s, c, 0, 4), append(keysOn(t, s, c, 1, 4), keysOn(t, s, c, 2, 4)...)
	waitFor(t, settle, "every shard answers", func() error { return allAnswer(s, append(slices.Clone(victim), healthy...), 3) })
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
	// A healthy shard's decision refused by a breaker is a failure; one
	// that missed its 300ms deadline on a busy machine is noise (logged).
	var healthyUnavailable, healthySlow []string
	takeHealthy := func() {
		for _, k := range healthy {
			if _, err, _ := take(s, k); errors.Is(err, store.ErrUnavailable) {
				healthyUnavailable = append(healthyUnavailable, err.Error())
			} else if err != nil {
				healthySlow = append(healthySlow, err.Error())
			}
		}
	}
	opened := waitFor(t, settle, "victim shard's breaker open", func() error {
		takeHealthy()
		_, err, _ := take(s, victim[0])
		return unavailable(err)
	})
	p := openLatency(t, s, victim[1], 1000) // each one store.ErrUnavailable: it did not try Redis
	t.Logf("shard %s breaker opened %v after the kill (target 1s); p99 while open %v (target 2ms)", c.RangeName(0), opened.Round(time.Millisecond), p)
	for _, b := range s.Breakers() {
		if b.Shard != c.RangeName(0) && b.State != redisstore.BreakerClosed {
			t.Errorf("breaker of healthy shard %s is %v", b.Shard, b.State)
		}
	}

	promoted := c.WaitFailover(t, 0, old, 30*time.Second)
	answered := time.Now()
	resumed := waitFor(t, settle, "victim keys decided by Redis again", func() error {
		takeHealthy()
		_, err, _ := take(s, victim[2])
		return err
	})
	t.Logf("replica %s promoted %v after the kill; decisions from Redis %v after that (target 2s)",
		promoted.Addr, answered.Sub(killed).Round(time.Millisecond), resumed.Round(time.Millisecond))
	if len(healthyUnavailable) > 0 {
		t.Errorf("%d decisions on healthy shards refused by a breaker during the fault: %v", len(healthyUnavailable), healthyUnavailable[0])
	}
	if len(healthySlow) > 0 {
		t.Logf("%d decisions on healthy shards missed the deadline on this machine: %v", len(healthySlow), healthySlow[0])
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
	if n := settledGoroutines(before+2, settle); n > before+2 {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Close, %d before the store: a leak\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// A primary hands its slots over (CLUSTER FAILOVER on its replica) and
// goes away before the store has sent it anything since: the store's slot
// map still names it, and its address refuses connections. The first
// decision that cannot reach it makes the store reload the map, so the
// shard is decided by the new primary again without a breaker opening
// (these never open) and long before go-redis's own periodic reload (60s).
func TestStaleSlotMapReloadedWhenPrimaryUnreachable(t *testing.T) {
	c := redistest.StartClusterWith(t, redistest.ClusterOptions{Primaries: 3, Replicas: 1, NodeTimeout: 2 * time.Second})
	reg := prometheus.NewRegistry()
	s := realStore(t, redisstore.Options{Addrs: c.Addrs(), Cluster: true, Timeout: time.Second, Registerer: reg,
		Breaker: redisstore.BreakerOptions{Failures: 1 << 30, Span: time.Hour}})
	keys := keysOn(t, s, c, 0, 4)
	waitFor(t, settle, "shard 0 answers", func() error { return allAnswer(s, keys, 3) })

	old, heir := c.Nodes[0], c.Replicas[0][0]
	if _, err := heir.Do("CLUSTER", "FAILOVER"); err != nil {
		t.Fatal(err)
	}
	c.WaitFailover(t, 0, old, settle)
	old.Stop()

	var failed []string
	resumed := waitFor(t, 10*time.Second, "shard 0 decided by "+heir.Addr, func() error {
		_, err, _ := take(s, keys[0])
		if err != nil {
			failed = append(failed, err.Error())
		}
		return err
	})
	t.Logf("decided again %v after %s went, %d decisions failed meanwhile", resumed.Round(time.Millisecond), old.Addr, len(failed))
	if len(failed) == 0 {
		t.Errorf("no decision failed: the store's slot map was reloaded before %s went, so this test proves nothing", old.Addr)
	}
	if got := gauge(t, reg, "sluice_redis_breaker_opened_total", c.RangeName(0)); got > 0 {
		t.Errorf("shard %s breaker opened %v times, want never", c.RangeName(0), got)
	}
}
