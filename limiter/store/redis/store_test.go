package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

func TestConformanceStandalone(t *testing.T) { storetest.Run(t, newStandalone) }

func TestConformanceCluster(t *testing.T) { storetest.Run(t, newCluster) }

func TestIdempotencyStandalone(t *testing.T) { storetest.RunIdempotency(t, newStandalone) }

func TestIdempotencyCluster(t *testing.T) { storetest.RunIdempotency(t, newCluster) }

func TestMemoryAndStandaloneAgree(t *testing.T) {
	storetest.RunDifferential(t, newMemory, newStandalone, 400)
}

func TestMemoryAndClusterAgree(t *testing.T) {
	storetest.RunDifferential(t, newMemory, newCluster, 150)
}

// Every key a script writes has a TTL, with time from Redis TIME.
func TestEveryKeyHasTTL(t *testing.T) {
	s := realStore(t, redisstore.Options{Addrs: []string{standaloneAddr(t)}, KeyPrefix: "ttltest"})
	c := goredis.NewClient(&goredis.Options{Addr: standaloneAddr(t)})
	defer c.Close()
	ctx := context.Background()
	for _, a := range algo.All {
		lim := algo.Limit{Algorithm: a, Limit: 5, Period: time.Minute, Burst: 5}
		key := storetest.KeyFor(t, a.String())
		for range 3 {
			if r, err := s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1}); err != nil || !r.Allowed {
				t.Fatalf("%v: %+v %v", a, r, err)
			}
		}
	}
	keys, err := c.Keys(ctx, "ttltest:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != len(algo.All) {
		t.Fatalf("want one key per algorithm, got %v", keys)
	}
	for _, k := range keys {
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 || ttl > 2*time.Minute {
			t.Errorf("key %s has TTL %v, want within (0, 2m]", k, ttl)
		}
	}
}

// The real clock: a fixed window admits exactly its limit, then denies
// with a retry inside the window.
func TestRedisTimeDrivesDecisions(t *testing.T) {
	s := realStore(t, redisstore.Options{Addrs: []string{standaloneAddr(t)}})
	lim := algo.Limit{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Hour}
	key := storetest.KeyFor(t, "fw")
	for i := range 4 {
		r, err := s.Take(context.Background(), store.Request{Key: key, Limit: lim, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed != (i < 3) {
			t.Fatalf("take %d: allowed=%v", i, r.Allowed)
		}
		if r.ResetAfter <= 0 || r.ResetAfter > time.Hour {
			t.Fatalf("take %d: reset %v outside (0, 1h]", i, r.ResetAfter)
		}
	}
}

// A penalty is stored beside its counter, in the same slot, and expires by
// itself: its TTL covers the penalty and the count after it, no more.
func TestPenaltyKeyBesideCounter(t *testing.T) {
	s := realStore(t, redisstore.Options{Addrs: []string{standaloneAddr(t)}, KeyPrefix: "pentest"})
	c := goredis.NewClient(&goredis.Options{Addr: standaloneAddr(t)})
	defer c.Close()
	ctx := context.Background()
	lim := algo.Limit{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Hour, Burst: 1,
		Penalty: algo.Penalty{Duration: 10 * time.Minute, After: 1, Within: time.Minute}}
	key := storetest.KeyFor(t, "abuser")
	if r, err := s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1}); err != nil || !r.Allowed {
		t.Fatalf("first: %+v %v", r, err)
	}
	r, err := s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1})
	if err != nil || r.Allowed || !r.Penalized || r.RetryAfter != 10*time.Minute {
		t.Fatalf("over the limit: %+v %v, want penalized for 10m", r, err)
	}
	pk := s.PenaltyKey(key)
	if redisstore.Slot(pk) != redisstore.Slot(s.RedisKey(key)) {
		t.Errorf("penalty key %s is in slot %d, its counter %s in %d", pk, redisstore.Slot(pk), s.RedisKey(key), redisstore.Slot(s.RedisKey(key)))
	}
	ttl, err := c.PTTL(ctx, pk).Result()
	if err != nil || ttl <= 10*time.Minute-5*time.Second || ttl > 11*time.Minute {
		t.Errorf("penalty key %s: TTL %v %v, want the penalty and the minute after it", pk, ttl, err)
	}
	// Whatever it sends meanwhile is denied, even a peek.
	if r, err := s.Take(ctx, store.Request{Key: key, Limit: lim}); err != nil || r.Allowed || !r.Penalized || r.RetryAfter <= 9*time.Minute {
		t.Fatalf("a peek while penalized: %+v %v", r, err)
	}
}
