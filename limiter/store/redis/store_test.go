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

func TestMemoryAndRedisAgreeOnFeaturesTogether(t *testing.T) {
	t.Run("standalone", func(t *testing.T) { storetest.RunFeaturesTogether(t, newMemory, newStandalone, 300) })
	t.Run("cluster", func(t *testing.T) { storetest.RunFeaturesTogether(t, newMemory, newCluster, 150) })
}

// Every key a script writes has a TTL, with time from Redis TIME.
func TestEveryKeyHasTTL(t *testing.T) {
	s := realStore(t, redisstore.Options{Addrs: []string{standaloneAddr(t)}, KeyPrefix: "ttltest"})
	c := goredis.NewClient(&goredis.Options{Addr: standaloneAddr(t)})
	defer c.Close()
	ctx := context.Background()
	t.Cleanup(func() { deleteKeys(t, "ttltest:*") }) // they live an hour; a second run lists only its own
	for _, a := range algo.All {
		// An hour: a minute's fixed window could end between the takes
		// and the listing on a loaded machine, its key gone with it.
		lim := algo.Limit{Algorithm: a, Limit: 5, Period: time.Hour, Burst: 5}
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
		if ttl <= 0 || ttl > 2*time.Hour {
			t.Errorf("key %s has TTL %v, want within (0, 2h]", k, ttl)
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
	penalized := time.Now()
	r, err := s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1})
	if err != nil || r.Allowed || !r.Penalized || r.RetryAfter != 10*time.Minute {
		t.Fatalf("over the limit: %+v %v, want penalized for 10m", r, err)
	}
	pk := s.PenaltyKey(key)
	if redisstore.Slot(pk) != redisstore.Slot(s.RedisKey(key)) {
		t.Errorf("penalty key %s is in slot %d, its counter %s in %d", pk, redisstore.Slot(pk), s.RedisKey(key), redisstore.Slot(s.RedisKey(key)))
	}
	ttl, err := c.PTTL(ctx, pk).Result()
	// The TTL has run for at most the time since the penalized call began,
	// however slow the machine.
	if ran := time.Since(penalized); err != nil || ttl < 10*time.Minute-ran || ttl > 11*time.Minute {
		t.Errorf("penalty key %s: TTL %v %v (%v after the penalty), want the penalty and the minute after it", pk, ttl, err, ran)
	}
	// Whatever it sends meanwhile is denied, even a peek.
	if r, err := s.Take(ctx, store.Request{Key: key, Limit: lim}); err != nil || r.Allowed || !r.Penalized || r.RetryAfter <= 9*time.Minute {
		t.Fatalf("a peek while penalized: %+v %v", r, err)
	}
}

// A client that makes up a new idempotency key for every request (a
// hostile one, or a buggy retry loop) grows its counter's records to the
// cap and no further, in Redis memory as in the decisions; both keys
// expire with their newest record.
func TestIdempotencyRecordsAreBoundedPerCounter(t *testing.T) {
	s := realStore(t, redisstore.Options{Addrs: []string{standaloneAddr(t)}, KeyPrefix: "recflood"})
	c := goredis.NewClient(&goredis.Options{Addr: standaloneAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	t.Cleanup(func() { // the keys live an hour; a second run lists only its own
		if keys, err := c.Keys(ctx, "recflood:*").Result(); err == nil && len(keys) > 0 {
			c.Del(ctx, keys...)
		}
	})
	// A bucket of 4000 an hour, which the 2000 takes leave half empty: its
	// key lives until it is full again, half an hour, however slow the
	// machine. (A bucket of 2^40 an hour was full again a few ns after the
	// takes, its key gone after the store's slack, before the keys were
	// listed under load; a second's bucket likewise.)
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 4000, Period: time.Hour, Burst: 4000}
	key := storetest.KeyFor(t, "flooded")
	const maxRecords = 50
	for i := range 2000 {
		req := store.Request{Key: key, Limit: lim, Cost: 1, Idempotency: storetest.IdemKey(t, time.Duration(i).String()),
			IdempotencyTTL: time.Minute, IdempotencyMaxRecords: maxRecords}
		if r, err := s.Take(ctx, req); err != nil || !r.Allowed || r.Replayed {
			t.Fatalf("take %d: %+v %v", i, r, err)
		}
	}
	for _, k := range []string{s.RecordsKey(key), s.RecordIndexKey(key)} {
		n, err := c.Do(ctx, "TYPE", k).Text()
		if err != nil {
			t.Fatal(err)
		}
		var size int64
		switch n {
		case "hash":
			size, err = c.HLen(ctx, k).Result()
		case "zset":
			size, err = c.ZCard(ctx, k).Result()
		default:
			t.Fatalf("%s is a %s", k, n)
		}
		if err != nil {
			t.Fatal(err)
		}
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s (%s): %d entries, TTL %v", k, n, size, ttl)
		if size != maxRecords {
			t.Errorf("%s holds %d records after 2000 made-up keys, want the cap, %d", k, size, maxRecords)
		}
		if ttl <= 0 || ttl > time.Minute {
			t.Errorf("%s has TTL %v, want within (0, 1m]", k, ttl)
		}
	}
	// The newest record still replays; the first is long gone.
	for i, want := range map[int]bool{1999: true, 0: false} {
		req := store.Request{Key: key, Limit: lim, Cost: 1, Idempotency: storetest.IdemKey(t, time.Duration(i).String()),
			IdempotencyTTL: time.Minute, IdempotencyMaxRecords: maxRecords}
		if r, err := s.Take(ctx, req); err != nil || r.Replayed != want {
			t.Errorf("a retry of request %d: %+v %v, want replayed=%v", i, r, err, want)
		}
	}
	keys, err := c.Keys(ctx, "recflood:*").Result()
	if err != nil || len(keys) != 3 {
		t.Errorf("keys of the flooded counter: %v %v, want the counter, its records and their index", keys, err)
	}
}
