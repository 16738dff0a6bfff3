package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

// A round trip decides its calls in order, exactly as the memory store
// decides them one after another, whatever it holds: several algorithms,
// the same counter more than once, idempotency records, costs of 0 and
// more than capacity, the clock going forwards and backwards between
// round trips.
func TestRoundTripAgreesWithMemory(t *testing.T) {
	srv := redistest.Start(t)
	clock := storetest.NewClock()
	rs := newInternal(t, srv.Addr, clock.Now)
	mem := memory.New(memory.Options{Clock: clock.Now, SweepInterval: -1})
	t.Cleanup(func() { _ = mem.Close() })

	const s, ms = time.Second, time.Millisecond
	limits := []algo.Limit{
		{Algorithm: algo.TokenBucket, Limit: 7, Period: 3 * s, Burst: 4},
		{Algorithm: algo.TokenBucket, Limit: 1000, Period: time.Minute, Burst: 50},
		{Algorithm: algo.GCRA, Limit: 7, Period: 3 * s, Burst: 4},
		{Algorithm: algo.GCRA, Limit: 3, Period: s, Burst: 1},
		{Algorithm: algo.FixedWindow, Limit: 7, Period: 3 * s},
		{Algorithm: algo.SlidingWindow, Limit: 7, Period: 3 * s},
		{Algorithm: algo.SlidingWindow, Limit: 100, Period: s},
		{Algorithm: algo.SlidingLog, Limit: 7, Period: 3 * s},
	}
	keys := make([]store.Key, len(limits)) // one limit per counter
	for i := range keys {
		keys[i] = storetest.KeyFor(t, fmt.Sprint(i))
	}
	idem := []store.Key{storetest.IdemKey(t, "a"), storetest.IdemKey(t, "b")}
	rng := rand.New(rand.NewPCG(7, 11))
	now := storetest.Base
	decisions := 0
	for round := range 300 {
		switch r := rng.IntN(20); {
		case r == 0:
			now = now.Add(-time.Duration(rng.IntN(2000)) * ms)
		case r < 4:
			now = now.Add(time.Duration(rng.IntN(5000)) * ms)
		default:
			now = now.Add(time.Duration(rng.IntN(300000)) * time.Microsecond)
		}
		clock.Set(now)
		reqs := make([]store.Request, 1+rng.IntN(12))
		for i := range reqs {
			k := rng.IntN(len(keys))
			reqs[i] = store.Request{Key: keys[k], Limit: limits[k], Cost: int64(rng.IntN(int(limits[k].Capacity()) + 2))}
			if rng.IntN(6) == 0 {
				reqs[i].Idempotency, reqs[i].IdempotencyTTL = idem[rng.IntN(len(idem))], 10*s
			}
		}
		got, errs := runBatch(rs, reqs)
		for i, r := range reqs {
			m, err := mem.Take(context.Background(), r)
			if errs[i] != nil || err != nil {
				t.Fatalf("round %d, decision %d: errors %v / %v", round, i, errs[i], err)
			}
			if got[i] != m {
				t.Fatalf("round %d, decision %d of %d (at %v, %v cost %d): stores disagree\n redis  %+v\n memory %+v",
					round, i, len(reqs), now.Sub(storetest.Base), r.Limit.Algorithm, r.Cost, got[i], m)
			}
			decisions++
		}
	}
	t.Logf("%d decisions agree", decisions)
}

// A decision that fails in a round trip (its counter holds the wrong type)
// fails alone, with Redis's error; the others are decided, and the shard's
// breaker does not count it.
func TestRoundTripFailsOneDecisionAlone(t *testing.T) {
	srv := redistest.Start(t)
	s := newInternal(t, srv.Addr, nil)
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second, Burst: 10}
	good1, bad, good2 := storetest.KeyFor(t, "good1"), storetest.KeyFor(t, "bad"), storetest.KeyFor(t, "good2")
	if err := srv.Client(t).HSet(context.Background(), s.RedisKey(bad), "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	res, errs := runBatch(s, []store.Request{
		{Key: good1, Limit: lim, Cost: 1},
		{Key: bad, Limit: lim, Cost: 1},
		{Key: good2, Limit: lim, Cost: 3},
	})
	if errs[0] != nil || !res[0].Allowed || res[0].Remaining != 9 {
		t.Errorf("first decision: %+v %v, want allowed with 9 remaining", res[0], errs[0])
	}
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "WRONGTYPE") {
		t.Errorf("decision on a hash: %+v %v, want Redis's WRONGTYPE error", res[1], errs[1])
	}
	if errs[2] != nil || !res[2].Allowed || res[2].Remaining != 7 {
		t.Errorf("third decision: %+v %v, want allowed with 7 remaining", res[2], errs[2])
	}
	if st := s.shards.breakerFor(bad).State(); st != BreakerClosed {
		t.Errorf("breaker %v after a WRONGTYPE reply, want closed", st)
	}
}
