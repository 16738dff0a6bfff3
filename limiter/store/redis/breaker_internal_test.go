package redis

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
)

// testEnv is a breaker environment with no store: probes ask addr, and
// reloads are counted.
func testEnv(t *testing.T, opts BreakerOptions, addr string) (*breakerEnv, *atomic.Int32) {
	var reloads atomic.Int32
	stop := make(chan struct{})
	var bg sync.WaitGroup
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { close(stop); bg.Wait(); _ = c.Close() })
	env := &breakerEnv{opts: opts, metrics: newStoreMetrics(nil), log: logger(nil), stop: stop, bg: &bg,
		reload: func(string) { reloads.Add(1) },
		probe: func(key string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			return c.Exists(ctx, key).Err()
		}}
	return env, &reloads
}

// Failures open the breaker only once there are enough of them in a row
// and they span Span: a burst of timeouts from one stall does not.
func TestBreakerNeedsFailuresOverASpan(t *testing.T) {
	env, _ := testEnv(t, BreakerOptions{Failures: 3, Span: time.Hour, Cooldown: time.Hour}, "127.0.0.1:1")
	b := newBreaker(env, "0-16383", "k")
	for range 100 {
		b.record(false)
	}
	if b.State() != BreakerClosed {
		t.Fatalf("100 failures within a moment opened the breaker (span 1h)")
	}

	env.opts.Span = time.Nanosecond
	b.record(true) // a success resets the streak
	b.record(false)
	b.record(false)
	if b.State() != BreakerClosed {
		t.Fatalf("2 failures opened a breaker that needs 3")
	}
	b.record(true)
	b.record(false)
	b.record(false)
	if b.State() != BreakerClosed {
		t.Fatalf("a success did not reset the streak")
	}
	b.record(false)
	if b.State() != BreakerOpen {
		t.Fatalf("3 failures in a row over the span: state %v, want open", b.State())
	}
	b.record(true) // only probes close an open breaker
	if b.State() != BreakerOpen {
		t.Fatalf("a late success closed an open breaker")
	}
}

// An open breaker probes its shard every Cooldown, asking for the slot map
// again after each failed probe, and closes once the shard answers; a
// retired breaker never opens.
func TestBreakerProbesUntilTheShardAnswers(t *testing.T) {
	srv := redistest.Start(t)
	// Span 0: one failure opens at once.
	env, reloads := testEnv(t, BreakerOptions{Failures: 1, Cooldown: 20 * time.Millisecond}, srv.Addr)
	b := newBreaker(env, "standalone", "probe")
	srv.Stop()
	b.record(false)
	if b.State() == BreakerClosed {
		t.Fatal("a failure did not open a breaker that needs 1")
	}
	for deadline := time.Now().Add(10 * time.Second); reloads.Load() < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("%d slot map reloads asked within 10s of probing a dead shard, want an opening's and each failed probe's", reloads.Load())
		}
		time.Sleep(10 * time.Millisecond) // polling the probe goroutine
	}
	if b.State() == BreakerClosed {
		t.Fatal("the breaker closed while its shard was down")
	}
	srv.Restart(t)
	for deadline := time.Now().Add(10 * time.Second); b.State() != BreakerClosed; {
		if time.Now().After(deadline) {
			t.Fatalf("breaker %v 10s after its shard answered again", b.State())
		}
		time.Sleep(10 * time.Millisecond)
	}

	b.retire()
	b.record(false)
	if b.State() != BreakerClosed {
		t.Fatalf("a retired breaker opened")
	}
}
