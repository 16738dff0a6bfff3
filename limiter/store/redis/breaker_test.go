package redis_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/store"
)

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
