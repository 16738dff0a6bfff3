package regions

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// BenchmarkRegions is make bench-regions: three regions 80ms apart (the
// lab: a redis-server each, peer endpoints through delaying proxies), one
// Global per-user limit of 1000 per period (REGIONS_BENCH_PERIOD, 1m by
// default; bench-smoke runs 3s), offered at twice the limit spread
// 60/30/10. It prints, per window, what was admitted against the limit
// and the bound; each region's p99 decision latency, beside a synchronous
// check at the home over the same link; grant calls per decision; then a
// partition of region c for one period and its healing. It fails when the
// bound is broken, or (periods of a minute or more: a quick run's rates
// are scaled up and its figures mean nothing) a region's p99 reaches 10ms.
func BenchmarkRegions(b *testing.B) {
	period := time.Minute
	if v := os.Getenv("REGIONS_BENCH_PERIOD"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatal(err)
		}
		period = d
	}
	for range b.N {
		runRegionsBench(b, period)
	}
}

type benchRegion struct {
	name  string
	share int // of every 10 requests
}

func runRegionsBench(b *testing.B, period time.Duration) {
	names := []string{"a", "b", "c"}
	limit := algo.Limit{Algorithm: algo.FixedWindow, Limit: 1000, Period: period}
	p := Policy{ID: "bench/per-user", Limit: limit}
	lab := newLab(b, names, []Policy{p}, nil)
	key := keyHomedAt(b, p.ID, "a", names)
	a := lab.regions["a"].r
	bound := a.ReachBound(limit)
	share := lab.regions["c"].r.shareLimit(limit).Limit
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("regions: 3 regions 80ms apart, Global FixedWindow %d per %v, home a, grant %d, bound %d, partition share %d (load average %s)\n",
		limit.Limit, period, a.GrantSize(limit), bound, share, strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "))
	// 60/30/10, the heaviest load away from the home (a): the worst case.
	weights := []benchRegion{{"b", 6}, {"c", 3}, {"a", 1}}
	steady := lab.load(b, p, key, weights, 2*period, 2*limit.Limit)
	fail := false
	for i, w := range steady.windows {
		fmt.Printf("regions steady window %d: admitted %d (limit %d, bound %d) %v\n", i, w.total(), limit.Limit, bound, w.by)
		if w.total() > limit.Limit+bound {
			fmt.Printf("regions FAIL: window %d admitted %d > limit + bound %d\n", i, w.total(), limit.Limit+bound)
			fail = true
		}
	}
	for _, w := range weights {
		p99 := steady.p99(w.name)
		fmt.Printf("regions p99 %s (%d0%% of load): %v over %d decisions\n", w.name, w.share, p99, len(steady.lat[w.name]))
		if p99 >= 10*time.Millisecond && period >= time.Minute {
			fmt.Printf("regions FAIL: p99 in %s is %v, the goal is under 10ms\n", w.name, p99)
			fail = true
		}
	}
	calls := lab.grantCalls()
	fmt.Printf("regions grant calls per decision: %.4f (%d calls, %d decisions)\n", float64(calls)/float64(steady.decisions), calls, steady.decisions)

	// The synchronous check for comparison: each decision a call to the home.
	c := lab.regions["c"].r
	var syncLat []time.Duration
	for range 30 {
		start := time.Now()
		_, _ = c.call(context.Background(), c.peers["a"], grantCall{Region: "c", Policy: p.ID, Key: key.String(), Cost: 1})
		syncLat = append(syncLat, time.Since(start))
	}
	fmt.Printf("regions synchronous global check from c: p99 %v\n", percentile(syncLat, 0.99))

	// A partition of c for one period, then healing.
	for _, px := range lab.regions["c"].links {
		px.Cut()
	}
	for _, n := range []string{"a", "b"} {
		lab.regions[n].links["c"].Cut()
	}
	cut := lab.load(b, p, key, weights, period, 2*limit.Limit)
	var during int64
	for _, w := range cut.windows {
		during = max(during, w.total())
	}
	fmt.Printf("regions partition of c for %v: most admitted in a window %d (limit %d + bound %d + c's share %d); c admitted %d\n",
		period, during, limit.Limit, bound, share, cut.sum("c"))
	if during > limit.Limit+bound+share {
		fmt.Printf("regions FAIL: admitted %d during the partition\n", during)
		fail = true
	}
	for _, px := range lab.regions["c"].links {
		px.Restore()
	}
	for _, n := range []string{"a", "b"} {
		lab.regions[n].links["c"].Restore()
	}
	healed := time.Now()
	for peerStatus(c, "a").Reason != ReasonReachable {
		_, _ = c.Take(context.Background(), p, store.Request{Key: key, Limit: limit, Cost: 0})
		time.Sleep(5 * time.Millisecond)
		if time.Since(healed) > 2*time.Minute {
			b.Fatal("c never reached a again")
		}
	}
	fmt.Printf("regions healing: c reached its home again %v after the link came back\n", time.Since(healed).Round(time.Millisecond))
	after := lab.load(b, p, key, weights, period, 2*limit.Limit)
	for i, w := range after.windows {
		fmt.Printf("regions after healing window %d: admitted %d (limit %d, bound %d) %v\n", i, w.total(), limit.Limit, bound, w.by)
	}
	if fail {
		b.Fatal("the regions bench failed its checks (see above)")
	}
}

type window struct{ by map[string]int64 }

func (w window) total() int64 {
	var s int64
	for _, v := range w.by {
		s += v
	}
	return s
}

type loadResult struct {
	windows   []window
	lat       map[string][]time.Duration
	decisions int64
}

func (r loadResult) p99(n string) time.Duration { return percentile(r.lat[n], 0.99) }

func (r loadResult) sum(n string) int64 {
	var s int64
	for _, w := range r.windows {
		s += w.by[n]
	}
	return s
}

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*q))]
}

// load offers perPeriod requests per period for dur, spread by weights,
// each region paced on its own goroutine, and counts admissions per
// window of the limit's period.
func (l *lab) load(b *testing.B, p Policy, key store.Key, weights []benchRegion, dur time.Duration, perPeriod int64) loadResult {
	res := loadResult{lat: map[string][]time.Duration{}}
	nw := int(dur / p.Limit.Period)
	res.windows = make([]window, nw)
	for i := range res.windows {
		res.windows[i].by = map[string]int64{}
	}
	// Start at a window's start (Redis counts windows of the Unix time),
	// so that each measured window is one of the counter's.
	start := time.Now().Truncate(p.Limit.Period).Add(p.Limit.Period)
	time.Sleep(time.Until(start))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, w := range weights {
		r := l.regions[w.name].r
		every := time.Duration(int64(p.Limit.Period) * 10 / (perPeriod * int64(w.share)))
		wg.Go(func() {
			next := start
			for {
				next = next.Add(every)
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				el := time.Since(start)
				if el >= dur {
					return
				}
				t0 := time.Now()
				out, err := r.Take(context.Background(), p, store.Request{Key: key, Limit: p.Limit, Cost: 1})
				lat := time.Since(t0)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				res.decisions++
				res.lat[w.name] = append(res.lat[w.name], lat)
				if out.Allowed {
					res.windows[min(nw-1, int(el/p.Limit.Period))].by[w.name]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return res
}

func (l *lab) grantCalls() int64 {
	var n int64
	for _, r := range l.regions {
		n += r.r.callsSent.Load()
	}
	return n
}
