package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// sample is one decision the harness saw.
type sample struct {
	at      int64 // Unix ns, midway between send and answer
	latency time.Duration
	allowed bool
	err     bool
	// units is the call's hits_addend beyond 1 (a drain), 0 for 1.
	units int64
}

func (s sample) cost() int64 { return max(1, s.units) }

// drain spends a bucket's whole burst in one call, so that a case starts
// from an empty bucket, where overshoot would show.
func drain(ctx context.Context, c rlsv3.RateLimitServiceClient, domain, key string, burst int64) (sample, error) {
	req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: uint32(burst), Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user_id", Value: key}}}}}
	sent := time.Now()
	resp, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		return sample{}, err
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		return sample{}, fmt.Errorf("draining %d units of a fresh key was denied", burst)
	}
	got := time.Now()
	return sample{at: (sent.UnixNano() + got.UnixNano()) / 2, latency: got.Sub(sent), allowed: true, units: burst}, nil
}

// dial opens one gRPC connection per limiter.
func dial(ls []*limiter) ([]rlsv3.RateLimitServiceClient, func(), error) {
	var conns []*grpc.ClientConn
	closeAll := func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	var out []rlsv3.RateLimitServiceClient
	for _, l := range ls {
		c, err := grpc.NewClient("passthrough:///"+l.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, c)
		out = append(out, rlsv3.NewRateLimitServiceClient(c))
	}
	return out, closeAll, nil
}

// shares splits rate over n pods: evenly, or with skew of it to the first.
func shares(rate float64, n int, skew float64) []float64 {
	out := make([]float64, n)
	if n == 1 {
		out[0] = rate
		return out
	}
	rest := rate
	if skew > 0 {
		out[0] = rate * skew
		rest = rate - out[0]
		for i := 1; i < n; i++ {
			out[i] = rest / float64(n-1)
		}
		return out
	}
	for i := range out {
		out[i] = rate / float64(n)
	}
	return out
}

// workersFor is how many workers send a pod's share of rate calls per
// second, open loop: each keeps its own schedule of evenly spaced calls, at
// most 50 a second, so a slow answer delays only its own worker.
func workersFor(rate float64) int { return max(2, int(math.Ceil(rate/50))) }

// drive sends rates[i] calls per second to clients[i] for d, all on one
// key of domain, and returns every decision seen.
func drive(ctx context.Context, clients []rlsv3.RateLimitServiceClient, rates []float64, domain, key string, d time.Duration) []sample {
	req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: 1, Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user_id", Value: key}}}}}
	start := time.Now()
	end := start.Add(d)
	var mu sync.Mutex
	var all []sample
	var wg sync.WaitGroup
	for i, c := range clients {
		if rates[i] <= 0 {
			continue
		}
		workers := workersFor(rates[i])
		interval := time.Duration(float64(time.Second) * float64(workers) / rates[i])
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []sample
				next := start.Add(interval * time.Duration(w) / time.Duration(workers))
				for ; next.Before(end); next = next.Add(interval) {
					if wait := time.Until(next); wait > 0 {
						time.Sleep(wait) // pacing the open-loop schedule
					}
					sent := time.Now()
					cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					resp, err := c.ShouldRateLimit(cctx, req)
					cancel()
					got := time.Now()
					mine = append(mine, sample{at: (sent.UnixNano() + got.UnixNano()) / 2, latency: got.Sub(sent),
						allowed: err == nil && resp.OverallCode == rlsv3.RateLimitResponse_OK, err: err != nil})
				}
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	slices.SortFunc(all, func(a, b sample) int { return int(a.at - b.at) })
	return all
}

// result is one case's figures.
type result struct {
	decisions, admitted, denied, errors int64
	seconds                             float64
	perSecond                           float64
	p99                                 time.Duration
	// allowance is what the exact algorithm admits at most over the run:
	// burst + limit·elapsed/period for the buckets, limit per window
	// touched for the windows; overshoot is admitted beyond it, as
	// measured (the largest window's excess for the windows).
	allowance, overshoot int64
	// windows are admitted/limit per full window, aligned to the Unix
	// epoch: of period, or of 1s (against limit·1s/period) for a bucket
	// whose period is longer.
	windows []float64
}

func analyse(ss []sample, p policySpec) result {
	var r result
	if len(ss) == 0 {
		return r
	}
	lat := make([]time.Duration, 0, len(ss))
	for _, s := range ss {
		r.decisions++
		switch {
		case s.err:
			r.errors++
		case s.allowed:
			r.admitted += s.cost()
		default:
			r.denied++
		}
		lat = append(lat, s.latency)
	}
	slices.Sort(lat)
	r.p99 = lat[int(math.Ceil(0.99*float64(len(lat))))-1]
	first, last := ss[0].at-int64(ss[0].latency/2), ss[len(ss)-1].at+int64(ss[len(ss)-1].latency/2)
	r.seconds = float64(last-first) / 1e9
	r.perSecond = float64(r.decisions) / r.seconds
	period := int64(p.period)
	win, perWin := period, float64(p.limit)
	if p.algorithm != "FixedWindow" && p.period > time.Second {
		win, perWin = int64(time.Second), float64(p.limit)*float64(time.Second)/float64(p.period)
	}
	counts := map[int64]int64{}
	for _, s := range ss {
		if s.allowed {
			counts[s.at/win] += s.cost()
		}
	}
	w0, w1 := first/win, last/win
	for w := w0 + 1; w < w1; w++ {
		r.windows = append(r.windows, float64(counts[w])/perWin)
	}
	switch p.algorithm {
	case "FixedWindow":
		r.allowance = p.limit * (w1 - w0 + 1)
		r.overshoot = math.MinInt64
		for w := w0; w <= w1; w++ {
			r.overshoot = max(r.overshoot, counts[w]-p.limit)
		}
	default:
		r.allowance = p.burst + int64(float64(p.limit)*float64(last-first)/float64(period))
		r.overshoot = r.admitted - r.allowance
	}
	return r
}

func fmtWindows(ws []float64) string {
	if len(ws) == 0 {
		return "-"
	}
	s := ""
	for i, w := range ws {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%.3f", w)
	}
	return s
}
