package service_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// The overshoot of costs known only at the end (README, "Reserve, then
// settle"). A token budget of overshootLimit, with a refill so slow that a
// run sees none of it, is spent by concurrent long requests whose actual
// costs are drawn from [overshootLow, overshootHigh]. Each request starts
// with a check and ends with a settlement at its actual cost:
//
//   - reserve-then-settle checks its estimate;
//   - charge-at-end (what Envoy Gateway's cost.response and the AI gateway
//     do) checks 1 unit, the request, and is charged its actual cost at
//     the end.
//
// With C requests in flight, the actual costs admitted exceed the limit by
// at most C × max(0, actual - estimate): every admission found its
// estimate within the limit, counting what is in flight at its estimate,
// and only the requests in flight at the last admission can add more,
// each its actual cost beyond its estimate. For charge-at-end, whose
// estimate is 1, that is C × (high - 1); for reservations of max_tokens
// (an estimate that is an upper bound) it is 0.
const (
	overshootLimit = 100_000
	overshootLow   = 200
	overshootHigh  = 1000
)

// overshootPolicy is a token budget of overshootLimit that refills in a
// month (period 720h): a run spends it once.
const overshootPolicy = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: budget, namespace: llm}
spec:
  domain: llm
  descriptors: [{key: api_key}]
  algorithm: TokenBucket
  rate: {limit: 100000, period: 720h}
  reserve: {expireAfter: 10m}
`

// overshoot is one run's figures.
type overshoot struct {
	mode                string
	inFlight            int
	estimate            int64
	admitted, denied    int64
	spent, bound, over  int64
	maxInFlightObserved int64
}

func (o overshoot) String() string {
	return fmt.Sprintf("%-19s C=%-3d estimate=%-4d admitted=%-4d denied=%-5d spent=%-7d overshoot=%-6d (%.1f%% of the limit) bound=%d",
		o.mode, o.inFlight, o.estimate, o.admitted, o.denied, o.spent, o.over, 100*float64(o.over)/overshootLimit, o.bound)
}

// measureOvershoot runs c workers, each with one long request in flight at
// a time, until the budget is spent and each has been denied 3 times.
// estimate is what a request checks at its start (1 for charge-at-end).
func measureOvershoot(tb testing.TB, st store.Store, mode string, c int, estimate int64, seed uint64) overshoot {
	tb.Helper()
	svc := service.New(st, service.Options{})
	snap, err := config.Parse("overshoot", []byte(overshootPolicy))
	if err != nil {
		tb.Fatal(err)
	}
	svc.Swap(snap)
	key := fmt.Sprintf("%s-%d-%d-%d-%d", mode, c, estimate, seed, time.Now().UnixNano())
	d := service.Descriptor{Entries: []config.Entry{{Key: "api_key", Value: key}}, HasHitsAddend: true, HitsAddend: uint64(estimate)}
	var (
		out               = overshoot{mode: mode, inFlight: c, estimate: estimate}
		admitted, denied  atomic.Int64
		spent, inFlight   atomic.Int64
		maxInFlight       atomic.Int64
		wg                sync.WaitGroup
		ctx               = context.Background()
		errOnce           sync.Once
		firstErr          error
		fail              = func(err error) { errOnce.Do(func() { firstErr = err }) }
		deniesPerWorker   = 3
		overshootBoundOne = max(0, overshootHigh-estimate)
	)
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for denials := 0; denials < deniesPerWorker; {
				resp, err := svc.Decide(ctx, &service.Request{Domain: "llm", Descriptors: []service.Descriptor{d}})
				if err != nil {
					fail(err)
					return
				}
				if resp.OverLimit {
					denied.Add(1)
					denials++
					continue
				}
				admitted.Add(1)
				n := inFlight.Add(1)
				for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
				}
				// The response streams for a while, then says what it cost.
				time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
				actual := overshootLow + rng.Int64N(overshootHigh-overshootLow+1)
				inFlight.Add(-1)
				es, err := svc.End(ctx, &service.EndRequest{Domain: "llm", Descriptors: []service.Descriptor{{Entries: d.Entries}}, Lease: resp.Lease, Cost: actual})
				if err != nil || len(es) != 1 || !es[0].Found {
					fail(fmt.Errorf("settle: %+v %v", es, err))
					return
				}
				spent.Add(actual)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		tb.Fatal(firstErr)
	}
	out.admitted, out.denied, out.spent, out.maxInFlightObserved = admitted.Load(), denied.Load(), spent.Load(), maxInFlight.Load()
	out.over = max(0, out.spent-overshootLimit)
	out.bound = int64(c) * overshootBoundOne
	return out
}

// The bound holds for concurrent long requests, on memory, a real Redis
// and a real Redis Cluster; charge-at-end, measured in the same run,
// stays within its own (much larger) bound. The figures are logged.
func TestReserveOvershootBound(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			st := newStore(t)
			const c = 16
			for _, run := range []struct {
				mode     string
				estimate int64
			}{
				{"reserve max_tokens", overshootHigh},
				{"reserve the mean", (overshootLow + overshootHigh) / 2},
				{"charge-at-end", 1},
			} {
				o := measureOvershoot(t, st, run.mode, c, run.estimate, 1)
				t.Log(o)
				if o.over > o.bound {
					t.Errorf("%s: overshoot %d above the bound %d", run.mode, o.over, o.bound)
				}
				if o.admitted == 0 || o.denied != 3*c {
					t.Errorf("%s: %d admitted, %d denied: want the budget spent, then 3 denials a worker", run.mode, o.admitted, o.denied)
				}
			}
		})
	}
}

// benchStore is a memory store or a real Redis, for b.
func benchStore(b *testing.B, name string) store.Store {
	if name == "memory" {
		return memoryStore(b)
	}
	srv := redistest.Start(b)
	st, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 2 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return st
}

// BenchmarkLifetimeOvershoot prints, for each store and number of requests
// in flight, the overshoot of reserve-then-settle (estimates at max_tokens,
// and at the mean) next to charge-at-end's, measured in the same run, with
// each one's bound. Run it with make bench-lifetime.
func BenchmarkLifetimeOvershoot(b *testing.B) {
	for _, name := range []string{"memory", "redis"} {
		for _, c := range []int{4, 16, 64} {
			b.Run(fmt.Sprintf("%s/C=%d", name, c), func(b *testing.B) {
				st := benchStore(b, name)
				for i := range b.N {
					for _, run := range []struct {
						mode     string
						estimate int64
						metric   string
					}{
						{"reserve max_tokens", overshootHigh, "reserve-max-overshoot"},
						{"reserve the mean", (overshootLow + overshootHigh) / 2, "reserve-mean-overshoot"},
						{"charge-at-end", 1, "charge-at-end-overshoot"},
					} {
						o := measureOvershoot(b, st, run.mode, c, run.estimate, uint64(i+1))
						fmt.Printf("overshoot %-6s %s\n", name, o)
						b.ReportMetric(float64(o.over), run.metric)
					}
				}
			})
		}
	}
}
