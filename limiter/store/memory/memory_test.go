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

// TestAttackMemoryStoreBytes: a tenant fills large SlidingLogs (5,000
// entries each) under many keys. The store was bounded by
// key count only, so a few thousand such keys took gigabytes; it now
// holds at most MaxBytes of counters, by an estimate that counts each
// log's array, evicting as when it holds MaxKeys, and other keys still
// count.
func TestAttackMemoryStoreBytes(t *testing.T) {
	const maxBytes = 16 << 20
	clock := storetest.NewClock()
	s := memory.New(memory.Options{MaxBytes: maxBytes, Clock: clock.Now, SweepInterval: -1})
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	lim := algo.Limit{Algorithm: algo.SlidingLog, Limit: 5_000, Period: time.Hour}
	// 400 logs of 5,000 requests, 1µs apart: ~80KB each, 32 MB in all
	// (each shard's share, 256KB, holds a few).
	for k := range 400 {
		key := storetest.KeyFor(t, "flood-"+time.Duration(k).String())
		for i := range 5_000 {
			clock.Set(storetest.Base.Add(time.Duration(i) * time.Microsecond))
			if _, err := s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1}); err != nil {
				t.Fatal(err)
			}
		}
		if b := s.Bytes(); b > maxBytes {
			t.Fatalf("after %d logs: %d bytes stored, more than MaxBytes %d", k+1, b, maxBytes)
		}
	}
	if s.Evicted() == 0 {
		t.Fatalf("nothing evicted after 400 full logs (%d bytes, %d keys)", s.Bytes(), s.Len())
	}
	// Another tenant's counter still counts.
	other := storetest.KeyFor(t, "other")
	small := algo.Limit{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Hour}
	for i := range 4 {
		r, err := s.Take(ctx, store.Request{Key: other, Limit: small, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed != (i < 3) {
			t.Fatalf("other counter, request %d: %+v", i, r)
		}
	}
	t.Logf("%d bytes in %d keys, %d evicted", s.Bytes(), s.Len(), s.Evicted())
	// The estimate is kept exactly: nothing left after everything expired.
	clock.Set(storetest.Base.Add(3 * time.Hour))
	s.Sweep()
	if b, n := s.Bytes(), s.Len(); b != 0 || n != 0 {
		t.Fatalf("after every key expired and a sweep: %d bytes in %d keys, want 0", b, n)
	}
}
