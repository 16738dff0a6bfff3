package redis_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// BenchmarkScriptWorstCase is the Redis time of one call of each script
// at the largest values a policy and a request may now have: rate.limit
// and burst 1e9 with a cost of 1e6 (the service's MaxCost, within the
// capacity) for the constant-time algorithms, on the exact path (Take)
// and the grant path (Grant, wanting 1e6 more); and for SlidingLog, a
// limit of 10,000 (its cap) and a cost of 1 ("cost1") or of 10,000 (the
// capacity: a larger cost is refused before any script runs), into an
// empty log ("fill") and into a full log whose entries all left the
// window ("refill": pruned and logged again). The log keeps one member
// per request, whatever its cost, so cost1 and fill should cost the same
// (before issue #24 it kept one per unit, and fill ran 10,000 ZADDs).
// "records-full" is an idempotent TokenBucket call on a counter holding
// the most records a limiter allows (store.MaxIdempotencyMaxRecords).
// "uncapped" is a SlidingLog of limit 1e9, as main once allowed, logging
// 100,000 units in one call, run twice whatever the count: with one member
// per request it is no dearer than fill.
// redis-µs/call is INFO commandstats' usec per EVALSHA call (Redis's own
// time inside the script), the median of chunks of 25 calls. Run it with a
// fixed count:
//
//	go test -run '^$' -bench BenchmarkScriptWorstCase -benchtime 100x ./limiter/store/redis/
func BenchmarkScriptWorstCase(b *testing.B) {
	srv := redistest.Start(b)
	s, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Timeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	c := srv.Client(b)
	ctx := context.Background()
	const worstChunk = 25
	var n int
	freshKey := func() store.Key {
		n++
		return storetest.KeyFor(b, "worst-"+strconv.Itoa(n))
	}
	run := func(b *testing.B, calls int, prepare func([]store.Key), call func(k store.Key) error) {
		if err := call(freshKey()); err != nil { // loads the script
			b.Fatal(err)
		}
		var perCall []float64
		for done := 0; done < calls; done += worstChunk {
			keys := make([]store.Key, min(worstChunk, calls-done))
			for i := range keys {
				keys[i] = freshKey()
			}
			if prepare != nil {
				prepare(keys)
			}
			resetStats(b, c)
			for _, k := range keys {
				if err := call(k); err != nil {
					b.Fatal(err)
				}
			}
			calls, usec := evalshaStats(b, c)
			if calls < int64(len(keys)) {
				b.Fatalf("%d EVALSHA calls for %d decisions", calls, len(keys))
			}
			perCall = append(perCall, float64(usec)/float64(calls))
			if err := c.FlushAll(ctx).Err(); err != nil { // the logs weigh ~1 MB each
				b.Fatal(err)
			}
		}
		slices.Sort(perCall)
		b.ReportMetric(perCall[len(perCall)/2], "redis-µs/call")
	}
	take := func(lim algo.Limit, cost int64) func(store.Key) error {
		return func(k store.Key) error {
			r, err := s.Take(ctx, store.Request{Key: k, Limit: lim, Cost: cost})
			if err == nil && !r.Allowed {
				b.Fatalf("%v cost %d denied: not the worst case", lim, cost)
			}
			return err
		}
	}
	big := func(a algo.Algorithm) algo.Limit {
		return algo.Limit{Algorithm: a, Limit: v1alpha1.MaxLimit, Period: time.Hour, Burst: v1alpha1.MaxBurst}
	}
	for _, a := range algo.All {
		if a == algo.SlidingLog {
			continue
		}
		b.Run("exact/"+a.String()+"/max", func(b *testing.B) {
			run(b, b.N, nil, take(big(a), service.DefaultMaxCost))
		})
		b.Run("grant/"+a.String()+"/max", func(b *testing.B) {
			lim := big(a)
			run(b, b.N, nil, func(k store.Key) error {
				_, err := s.Grant(ctx, store.GrantRequest{Key: k, Limit: lim, Cost: service.DefaultMaxCost,
					Want: service.DefaultMaxCost, Credit: 0, CreditWindow: time.Now().UnixMicro() / lim.PeriodMicros(),
					Pod: "p", Bound: -1, PodCap: v1alpha1.MaxLimit, TTL: time.Second})
				return err
			})
		})
	}
	logLimit := algo.Limit{Algorithm: algo.SlidingLog, Limit: v1alpha1.MaxSlidingLogLimit, Period: time.Second,
		Burst: v1alpha1.MaxSlidingLogLimit}
	b.Run("exact/SlidingLog/cost1", func(b *testing.B) {
		run(b, b.N, nil, take(logLimit, 1))
	})
	b.Run("exact/SlidingLog/fill", func(b *testing.B) {
		run(b, b.N, nil, take(logLimit, v1alpha1.MaxSlidingLogLimit))
	})
	b.Run("exact/SlidingLog/refill", func(b *testing.B) {
		// Fill each log, then wait for its entries to leave the 1s window.
		run(b, b.N, func(keys []store.Key) {
			for _, k := range keys {
				if err := take(logLimit, v1alpha1.MaxSlidingLogLimit)(k); err != nil {
					b.Fatal(err)
				}
			}
			time.Sleep(1100 * time.Millisecond) // the window passes
		}, take(logLimit, v1alpha1.MaxSlidingLogLimit))
	})
	b.Run("exact/TokenBucket/records-full", func(b *testing.B) {
		// One counter holding the most idempotency records a limiter
		// allows, the older half of them expired: each call records one
		// more, so it drops 8 expired records or the oldest live one.
		k := freshKey()
		lim := big(algo.TokenBucket)
		const full = store.MaxIdempotencyMaxRecords
		nowUs := time.Now().UnixMicro()
		p := c.Pipeline()
		for i := range full {
			name := "filler-" + strconv.Itoa(i)
			expires := nowUs + int64(time.Hour/time.Microsecond)
			if i < full/2 {
				expires = nowUs - 1
			}
			p.HSet(ctx, s.RecordsKey(k), name, strconv.Itoa(1)+" 0 "+strconv.FormatInt(expires, 10)+" 0")
			p.ZAdd(ctx, s.RecordIndexKey(k), goredis.Z{Score: float64(expires), Member: name})
			if p.Len() >= 10_000 || i == full-1 {
				if _, err := p.Exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		var perCall []float64
		for done := 0; done < b.N; done += worstChunk {
			resetStats(b, c)
			calls := min(worstChunk, b.N-done)
			for i := range calls {
				_, err := s.Take(ctx, store.Request{Key: k, Limit: lim, Cost: 1, Idempotency: storetest.IdemKey(b, strconv.Itoa(done+i)),
					IdempotencyTTL: time.Hour, IdempotencyMaxRecords: full})
				if err != nil {
					b.Fatal(err)
				}
			}
			n, usec := evalshaStats(b, c)
			perCall = append(perCall, float64(usec)/float64(n))
		}
		if size := c.ZCard(ctx, s.RecordIndexKey(k)).Val(); size > full {
			b.Fatalf("%d records, more than %d", size, full)
		}
		slices.Sort(perCall)
		b.ReportMetric(perCall[len(perCall)/2], "redis-µs/call")
		_ = c.FlushAll(ctx).Err()
	})
	b.Run("exact/SlidingLog/uncapped", func(b *testing.B) {
		lim := algo.Limit{Algorithm: algo.SlidingLog, Limit: v1alpha1.MaxLimit, Period: time.Hour, Burst: v1alpha1.MaxLimit}
		run(b, 2, nil, take(lim, 10*v1alpha1.MaxSlidingLogLimit))
	})
}
