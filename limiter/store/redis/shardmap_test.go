package redis_test

import (
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"

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
