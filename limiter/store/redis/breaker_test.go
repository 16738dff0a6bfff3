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
// without trying Redis; restarted, the breaker closes. How long each took is
// logged against its target (open in 1s, closed in 2s, 2ms a decision while
// open): figures, not pass marks (make bench measures them).
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
	waitFor(t, settle, "breaker open", func() error {
		_, err, _ := take(s, key)
		return unavailable(err)
	})
	opened := time.Since(killed)
	p := openLatency(t, s, key, 2000) // each one store.ErrUnavailable: it did not try Redis
	t.Logf("breaker opened %v after the kill (target 1s); p99 of a decision while open: %v (target 2ms)", opened.Round(time.Millisecond), p)
	if got := gauge(t, reg, "sluice_redis_breaker_state", "standalone"); got != 1 && got != 2 {
		t.Errorf("breaker state %v while down, want 1 (open) or 2 (probing)", got)
	}
	if got := gauge(t, reg, "sluice_redis_breaker_opened_total", "standalone"); got != 1 {
		t.Errorf("breaker opened %v times, want 1", got)
	}

	srv.Restart(t) // returns once it answers PING
	resumed := waitFor(t, settle, "decisions from Redis again", func() error {
		_, err, _ := take(s, key)
		return err
	})
	t.Logf("decisions from Redis %v after it answered again (target 2s)", resumed.Round(time.Millisecond))
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
	waitFor(t, settle, "breaker open", func() error {
		_, err, d := take(s, key)
		if err == nil {
			t.Fatal("a decision succeeded against a paused server")
		}
		slowest = max(slowest, d)
		return unavailable(err)
	})
	opened := time.Since(start)
	p := openLatency(t, s, key, 2000) // each one store.ErrUnavailable: it did not try Redis
	t.Logf("breaker opened %v after the pause (target 1s); slowest decision before %v (deadline %v); p99 while open %v (target 2ms)",
		opened.Round(time.Millisecond), slowest.Round(time.Millisecond), timeout, p)
	// The deadline's own test: without it a decision waits on a paused
	// server for ever, or until go-redis's 3s read timeout: beyond this.
	if slowest > timeout+2*time.Second {
		t.Errorf("a decision waited %v on a paused server; the deadline is %v", slowest, timeout)
	}
	srv.Resume(t)
	paused = false
	resumed := waitFor(t, settle, "decisions from Redis again", func() error {
		_, err, _ := take(s, key)
		return err
	})
	t.Logf("decisions from Redis %v after SIGCONT (target 2s)", resumed.Round(time.Millisecond))
}

// 500ms of latency on one shard's primary (through a proxy): only that
// shard's keys degrade; its breaker stays open while probes time out, and
// closes when the latency goes.
func TestLatencyOnOneShard(t *testing.T) {
	c := redistest.StartClusterWith(t, redistest.ClusterOptions{Primaries: 3, Proxied: []int{1}})
	s, reg := faultStore(t, c.Addrs(), true, 200*time.Millisecond)
	slow, fast := keysOn(t, s, c, 1, 2), append(keysOn(t, s, c, 0, 2), keysOn(t, s, c, 2, 2)...)
	waitFor(t, settle, "every shard answers", func() error { return allAnswer(s, append(slices.Clone(slow), fast...), 3) })

	c.Proxies[1].SetLatency(500 * time.Millisecond)
	start := time.Now()
	// The other shards keep answering. A decision there that missed its
	// 200ms deadline on a busy machine is noise (logged); one refused by an
	// open breaker on a healthy shard is the failure.
	var fastUnavailable, fastSlow []string
	takeFast := func() {
		for _, k := range fast {
			if _, err, _ := take(s, k); errors.Is(err, store.ErrUnavailable) {
				fastUnavailable = append(fastUnavailable, err.Error())
			} else if err != nil {
				fastSlow = append(fastSlow, err.Error())
			}
		}
	}
	waitFor(t, settle, "slow shard's breaker open", func() error {
		takeFast()
		_, err, _ := take(s, slow[0])
		return unavailable(err)
	})
	t.Logf("slow shard's breaker opened %v after 500ms of latency was added", time.Since(start).Round(time.Millisecond))
	// Several probes later, it is still open, and the other shards answer.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		takeFast()
		if _, err, d := take(s, slow[1]); !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("a decision on the slow shard: %v after %v, want store.ErrUnavailable (not trying Redis)", err, d)
		}
		time.Sleep(20 * time.Millisecond) // pacing the load, not synchronising
	}
	if len(fastUnavailable) > 0 {
		t.Errorf("%d decisions on the other shards refused by a breaker: %v", len(fastUnavailable), fastUnavailable[0])
	}
	if len(fastSlow) > 0 {
		t.Logf("%d decisions on the other shards missed the deadline on this machine: %v", len(fastSlow), fastSlow[0])
	}

	c.Proxies[1].SetLatency(0)
	resumed := waitFor(t, settle, "slow shard answers again", func() error {
		_, err, _ := take(s, slow[1])
		return err
	})
	t.Logf("slow shard decided by Redis %v after the latency went", resumed.Round(time.Millisecond))

	// The metrics tell the shards apart: every shard's round trips, and
	// the slow one's timeouts and slow round trips under its own name.
	slowName := shardNameOf(t, reg, s, slow[0])
	rt := shardSeries(t, reg, "sluice_redis_roundtrip_seconds")
	if len(rt) != 3 {
		t.Fatalf("sluice_redis_roundtrip_seconds has %d shards, want 3: %v", len(rt), rt)
	}
	if h := rt[slowName]; h.GetHistogram().GetSampleSum() < 0.2 {
		t.Errorf("the slow shard %s's round trips sum to %vs, want at least one of 200ms+", slowName, h.GetHistogram().GetSampleSum())
	}
	var slowTimeouts float64
	for _, m := range mustFamily(t, reg, "sluice_redis_errors_total").GetMetric() {
		if label(m, "shard") == slowName && label(m, "class") == "timeout" {
			slowTimeouts += m.GetCounter().GetValue()
		}
	}
	if slowTimeouts == 0 {
		t.Errorf("no timeout of the slow shard %s in sluice_redis_errors_total", slowName)
	}
}
