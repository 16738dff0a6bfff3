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

// MEMORY USAGE of one counter key per algorithm, as Redis reports it. The
// target for a token-bucket key is at most 100 bytes; memory is
// deterministic, so unlike speed it is asserted here.
func TestMemoryPerKey(t *testing.T) {
	s := realStore(t, redisstore.Options{Addrs: []string{standaloneAddr(t)}})
	c := goredis.NewClient(&goredis.Options{Addr: standaloneAddr(t)})
	defer c.Close()
	ctx := context.Background()
	for _, a := range algo.All {
		lim := algo.Limit{Algorithm: a, Limit: 7, Period: time.Minute, Burst: 7} // fractional refill
		key := storetest.KeyFor(t, a.String())
		if _, err := s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1}); err != nil {
			t.Fatal(err)
		}
		n, err := c.MemoryUsage(ctx, s.CounterKey(key, a), 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-13v MEMORY USAGE %d bytes (key %q)", a, n, s.CounterKey(key, a))
		if a == algo.TokenBucket && n > 100 {
			t.Errorf("a token-bucket key uses %d bytes, the target is at most 100", n)
		}
	}

	// Idempotency records are a hash and an index of the counter's, written
	// only when a request carries an idempotency key; the counter is
	// unchanged.
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 7, Period: time.Minute, Burst: 7}
	key, idem := storetest.KeyFor(t, "with a record"), storetest.IdemKey(t, "retried")
	if _, err := s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1, Idempotency: idem}); err != nil {
		t.Fatal(err)
	}
	counter, err := c.MemoryUsage(ctx, s.RedisKey(key), 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	records, err := c.MemoryUsage(ctx, s.RecordsKey(key), 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	index, err := c.MemoryUsage(ctx, s.RecordIndexKey(key), 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("TokenBucket with one idempotency record: counter %d bytes, records %d bytes, index %d bytes (keys %q, %q)", counter, records, index, s.RecordsKey(key), s.RecordIndexKey(key))
	if counter > 100 {
		t.Errorf("the counter of an idempotent request uses %d bytes", counter)
	}
}
