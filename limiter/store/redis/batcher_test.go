package redis_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// Concurrent decisions on one key from many goroutines admit exactly the
// limit, whatever way they are batched.
func TestBatchedConcurrentTakesAreExact(t *testing.T) {
	for name, opts := range map[string]redisstore.Options{
		"standalone": {Addrs: []string{standaloneAddr(t)}},
		"cluster":    {Addrs: clusterAddrs(t), Cluster: true},
	} {
		t.Run(name, func(t *testing.T) {
			s := realStore(t, opts)
			for _, a := range algo.All {
				lim := algo.Limit{Algorithm: a, Limit: 300, Period: time.Hour, Burst: 300}
				key := storetest.KeyFor(t, a.String())
				var wg sync.WaitGroup
				var mu sync.Mutex
				allowed := 0
				for range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 40 {
							r, err := s.Take(context.Background(), store.Request{Key: key, Limit: lim, Cost: 1})
							if err != nil {
								t.Error(err)
								return
							}
							if r.Allowed {
								mu.Lock()
								allowed++
								mu.Unlock()
							}
						}
					}()
				}
				wg.Wait()
				if allowed != 300 {
					t.Errorf("%v: 640 takes admitted %d, want exactly 300", a, allowed)
				}
			}
		})
	}
}

// Callers that give up while waiting (their context ends), some of them
// handed the next round trip, strand nobody: later calls are decided, and
// Close returns.
func TestAbandonedCallersStrandNobody(t *testing.T) {
	srv := redistest.Start(t)
	s, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 300 * time.Millisecond, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 1000, Period: time.Second, Burst: 1000}
	key := storetest.KeyFor(t, "k")
	srv.Pause(t) // the round trip in flight stalls; the others queue
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Some give up at once, others about when the stalled round
			// trip times out and hands its slot on.
			wait := time.Duration(1+i%8) * time.Millisecond
			if i%2 == 1 {
				wait = time.Duration(280+i) * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			_, _ = s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1})
		}()
	}
	wg.Wait()
	srv.Resume(t)
	waitFor(t, settle, "a decision after the callers gave up", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1})
		return err
	})
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(settle):
		t.Fatalf("Close did not return within %v: a round trip slot was stranded", settle)
	}
	if _, err := s.Take(context.Background(), store.Request{Key: key, Limit: lim, Cost: 1}); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("take after Close: %v, want an error saying the store is closed", err)
	}
}
