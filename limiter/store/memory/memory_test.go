package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

func newStore(t *testing.T, clock store.Clock) store.Store {
	s := memory.New(memory.Options{Clock: clock, SweepInterval: -1})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) { storetest.Run(t, newStore) }

func TestIdempotency(t *testing.T) { storetest.RunIdempotency(t, newStore) }

// Idempotency records are bounded: a flood of distinct keys keeps at most
// MaxIdempotencyRecords, and expired records are swept.
func TestIdempotencyRecordsAreBounded(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.Options{Clock: clock.Now, SweepInterval: -1, MaxIdempotencyRecords: 64 * 2})
	defer s.Close()
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 1 << 40, Period: time.Second, Burst: 1 << 40}
	counter := storetest.KeyFor(t, "counter")
	for i := range 5000 {
		req := store.Request{Key: counter, Limit: lim, Cost: 1, Idempotency: storetest.IdemKey(t, time.Duration(i).String()), IdempotencyTTL: time.Minute}
		if r, err := s.Take(context.Background(), req); err != nil || !r.Allowed || r.Replayed {
			t.Fatalf("take %d: %+v %v", i, r, err)
		}
	}
	if n := s.Records(); n > 64*2 {
		t.Fatalf("store holds %d idempotency records, bound is %d", n, 64*2)
	}
	clock.Set(storetest.Base.Add(2 * time.Minute))
	s.Sweep()
	if n := s.Records(); n != 0 {
		t.Fatalf("%d records left after their TTL and a sweep", n)
	}
}

func TestExpiredKeysAreSweptAndBounded(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.Options{Clock: clock.Now, SweepInterval: -1, MaxKeys: 64 * 4})
	defer s.Close()
	lim := algo.Limit{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Second}
	for i := range 1000 {
		var b store.KeyBuilder
		b.Add(string(rune('a' + i%26)))
		b.Add(time.Duration(i).String())
		if _, err := s.Take(context.Background(), store.Request{Key: b.Key(), Limit: lim, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Len(); n > 64*4 {
		t.Fatalf("store holds %d keys, bound is %d", n, 64*4)
	}
	if s.Evicted() == 0 {
		t.Fatal("a full store evicted nothing")
	}
	clock.Set(storetest.Base.Add(time.Second))
	s.Sweep()
	if n := s.Len(); n != 0 {
		t.Fatalf("after every window ended, %d keys remain", n)
	}
}

func TestSweeperRunsInBackground(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.Options{Clock: clock.Now, SweepInterval: time.Millisecond})
	defer s.Close()
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second, Burst: 10}
	if _, err := s.Take(context.Background(), store.Request{Key: storetest.KeyFor(t, "x"), Limit: lim, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	clock.Set(storetest.Base.Add(time.Hour))
	deadline := time.Now().Add(5 * time.Second)
	for s.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the sweeper never removed an expired key")
		}
		time.Sleep(time.Millisecond) // waiting on the sweeper's ticker
	}
}

func TestConcurrentTakesNeverOverAdmit(t *testing.T) {
	s := memory.New(memory.Options{SweepInterval: -1})
	defer s.Close()
	key := storetest.KeyFor(t, "hot")
	for _, a := range algo.All {
		lim := algo.Limit{Algorithm: a, Limit: 500, Period: time.Hour, Burst: 500}
		var b store.KeyBuilder
		b.Add(a.String())
		b.Add(string(key[:]))
		k := b.Key()
		allowed := make(chan int, 8)
		for range 8 {
			go func() {
				n := 0
				for range 200 {
					r, _ := s.Take(context.Background(), store.Request{Key: k, Limit: lim, Cost: 1})
					if r.Allowed {
						n++
					}
				}
				allowed <- n
			}()
		}
		total := 0
		for range 8 {
			total += <-allowed
		}
		if total != 500 {
			t.Errorf("%v: 1600 concurrent takes admitted %d, want exactly 500", a, total)
		}
	}
}

func newHolder(t *testing.T, clock store.Clock) store.Holder {
	return newStore(t, clock).(*memory.Store)
}

func TestHolds(t *testing.T) { storetest.RunHolds(t, newHolder) }
