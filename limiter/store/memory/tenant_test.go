package memory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

// Attack (issue 40, 4): eviction took the key nearest to expiry, from any
// namespace. With 640 keys, namespace b's 960 counters of 720h pushed out
// alice's (namespace a) 1-minute counter, and she got her full limit
// again. Now a full shard evicts from the namespace over its share, least
// recently used first: alice stays denied.
func TestAttackMemoryEvictionAcrossNamespaces(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.Options{MaxKeys: 640, Clock: clock.Now, SweepInterval: -1})
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	alice := store.Request{Key: storetest.KeyFor(t, "alice"), Tenant: "a", Cost: 1,
		Limit: algo.Limit{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Minute}}
	for i := range 4 {
		if r, err := s.Take(ctx, alice); err != nil || r.Allowed != (i < 3) {
			t.Fatalf("alice's request %d of a limit of 3: %+v, %v", i+1, r, err)
		}
	}
	long := algo.Limit{Algorithm: algo.FixedWindow, Limit: 10, Period: 720 * time.Hour}
	for i := range 960 {
		req := store.Request{Key: storetest.KeyFor(t, fmt.Sprint("b-", i)), Tenant: "b", Limit: long, Cost: 1}
		if _, err := s.Take(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if s.Evicted() == 0 {
		t.Fatalf("960 counters in a store of 640: none evicted (%d stored)", s.Len())
	}
	clock.Set(storetest.Base.Add(time.Second))
	if r, err := s.Take(ctx, alice); err != nil || r.Allowed {
		t.Errorf("alice after namespace b's 960 counters (%d evicted, %d stored): %+v, %v; want denied, her counter kept",
			s.Evicted(), s.Len(), r, err)
	}
}

// A full shard evicts the least recently used counter of a tenant, not
// the one nearest to expiry: a busy counter with a short window outlives
// an idle one with a long window.
func TestEvictionLeastRecentlyUsed(t *testing.T) {
	clock := storetest.NewClock()
	// 64 keys: one a shard, so the 2nd key of a shard evicts.
	s := memory.New(memory.Options{MaxKeys: 128, Clock: clock.Now, SweepInterval: -1})
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	short := algo.Limit{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Minute}
	long := algo.Limit{Algorithm: algo.FixedWindow, Limit: 100, Period: 720 * time.Hour}
	busy := store.Request{Key: storetest.KeyFor(t, "busy"), Limit: short, Cost: 1}
	idle := busy
	idle.Key[1]++ // the same shard (Key[0]), another counter
	idle.Limit = long
	newer := busy
	newer.Key[1] += 2
	newer.Limit = long
	for _, req := range []store.Request{busy, busy, idle, busy} {
		if _, err := s.Take(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	// busy is spent (2 of 2) and used last; idle was used before it.
	if _, err := s.Take(ctx, newer); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Take(ctx, busy); r.Allowed {
		t.Errorf("busy after a third key in its shard of 2: allowed, want denied (its counter kept; idle evicted)")
	}
}

// As TestAttackMemoryEvictionAcrossNamespaces, for bytes: namespace b's
// long SlidingLogs fill every shard's bytes; alice's counter is kept.
func TestAttackMemoryBytesAcrossNamespaces(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.Options{MaxBytes: 64 << 12, Clock: clock.Now, SweepInterval: -1}) // 4 KiB a shard
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	alice := store.Request{Key: storetest.KeyFor(t, "alice"), Tenant: "a", Cost: 1,
		Limit: algo.Limit{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Minute}}
	for range 3 {
		if _, err := s.Take(ctx, alice); err != nil {
			t.Fatal(err)
		}
	}
	logs := algo.Limit{Algorithm: algo.SlidingLog, Limit: 100, Period: 720 * time.Hour}
	for k := range 300 {
		req := store.Request{Key: storetest.KeyFor(t, fmt.Sprint("b-", k)), Tenant: "b", Limit: logs, Cost: 1}
		for i := range 100 {
			clock.Set(storetest.Base.Add(time.Duration(k*100+i) * time.Microsecond))
			if _, err := s.Take(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
	}
	if s.Evicted() == 0 || s.Bytes() > s.MaxBytes() {
		t.Fatalf("300 logs of 100 in 256 KiB: %d evicted, %d bytes of %d", s.Evicted(), s.Bytes(), s.MaxBytes())
	}
	if r, err := s.Take(ctx, alice); err != nil || r.Allowed {
		t.Errorf("alice after namespace b's logs (%d evicted, %d bytes): %+v, %v; want denied, her counter kept", s.Evicted(), s.Bytes(), r, err)
	}
}

// As TestAttackMemoryEvictionAcrossNamespaces, for penalty states, which
// were evicted nearest to expiry too: namespace b's 960 penalties of 720h
// pushed out alice's of an hour, and she was let through again once her
// window passed. Now alice stays penalized.
func TestAttackMemoryPenaltiesAcrossNamespaces(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.Options{MaxKeys: 640, Clock: clock.Now, SweepInterval: -1})
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	penalized := func(p time.Duration) algo.Limit {
		return algo.Limit{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Minute,
			Penalty: algo.Penalty{Duration: p, After: 1, Within: time.Minute}}
	}
	alice := store.Request{Key: storetest.KeyFor(t, "alice"), Tenant: "a", Cost: 1, Limit: penalized(time.Hour)}
	for i := range 2 {
		if r, err := s.Take(ctx, alice); err != nil || r.Allowed != (i == 0) || (i == 1 && !r.Penalized) {
			t.Fatalf("alice's request %d: %+v, %v; want the 2nd denied and penalized", i+1, r, err)
		}
	}
	for i := range 960 {
		req := store.Request{Key: storetest.KeyFor(t, fmt.Sprint("b-", i)), Tenant: "b", Cost: 1, Limit: penalized(720 * time.Hour)}
		for range 2 {
			if _, err := s.Take(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Past alice's window, within her penalty: only the penalty denies.
	clock.Set(storetest.Base.Add(2 * time.Minute))
	if r, err := s.Take(ctx, alice); err != nil || r.Allowed || !r.Penalized {
		t.Errorf("alice after namespace b's 960 penalties (%d evicted): %+v, %v; want denied, penalized", s.Evicted(), r, err)
	}
}
