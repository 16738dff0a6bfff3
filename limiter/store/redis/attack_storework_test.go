package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// TestAttackSlidingLogCostWork: a tenant sends SlidingLog requests of the
// largest cost its policy allows. Each one used to log one sorted-set
// member per unit (a cost-10,000 call ran 10,000 ZADDs, ~17 ms of the
// shard), so a few such calls stalled every tenant of the shard. The log
// now holds one member per request, whatever its cost: the members the
// script writes, its work and the memory it takes are counted in
// requests, not units. The members are counted on a server of the test's
// own, over every key, so the test does not depend on how keys are named.
func TestAttackSlidingLogCostWork(t *testing.T) {
	srv := redistest.Start(t)
	s, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	c := srv.Client(t)
	ctx := context.Background()
	lim := algo.Limit{Algorithm: algo.SlidingLog, Limit: v1alpha1.MaxSlidingLogLimit, Period: time.Hour}
	key := storetest.KeyFor(t, "heavy")
	const requests, cost = 4, v1alpha1.MaxSlidingLogLimit / 4
	for i := range requests {
		r, err := s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: cost})
		if err != nil {
			t.Fatal(err)
		}
		if want := lim.Limit - int64(i+1)*cost; !r.Allowed || r.Remaining != want {
			t.Fatalf("request %d of cost %d: %+v, want allowed with %d remaining", i, cost, r, want)
		}
	}
	// The log is full: a denial, with the retry of the oldest request.
	r, err := s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Allowed || r.Remaining != 0 || r.RetryAfter <= 0 || r.RetryAfter > time.Hour {
		t.Fatalf("cost 1 on a full log: %+v, want denied, retry within the hour", r)
	}
	var members int64
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if typ := c.Type(ctx, k).Val(); typ == "zset" {
			members += c.ZCard(ctx, k).Val()
		}
	}
	if members > requests {
		t.Errorf("%d requests of cost %d left %d sorted-set members (keys %q): the log's work grows with cost, want at most one member per request",
			requests, cost, members, keys)
	}
}
