package main

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
)

// Bounds of an open-loop run.
const (
	maxRate        = 1_000_000
	maxMaxInFlight = 1_000_000
	openShards     = 16
)

// OpenLoop is what an open-loop run (--rate) measured beyond Result's
// common fields. Latency there counts from each call's scheduled start.
type OpenLoop struct {
	OfferedRate float64 `json:"offered_rate"`
	MaxInFlight int     `json:"max_in_flight"`
	DropAfterMs float64 `json:"drop_after_ms"`
	// Scheduled calls fall in the measured interval; each was answered
	// in time (a decision), dropped, or failed (Result.Errors).
	Scheduled   uint64 `json:"scheduled"`
	Dropped     uint64 `json:"dropped"`
	DroppedCap  uint64 `json:"dropped_at_cap"` // not sent: --max-in-flight calls were in flight
	DroppedLate uint64 `json:"dropped_late"`   // not answered within --drop-after of its schedule
	// SendLag is how late calls left the load generator after their
	// scheduled start (its own scheduling delay, counted in Latency).
	SendLag Latency `json:"send_lag_us"`
}

// openShard is the counters of the calls of one shard, under mu.
type openShard struct {
	mu        sync.Mutex
	st        workerStats
	lag       *Histogram
	dropLate  uint64
	dropCap   uint64
	scheduled uint64
	_padding  [64]byte
}

// openRun is one open-loop run's state.
type openRun struct {
	cfg      Config
	newCall  func(cc *grpc.ClientConn) caller
	conns    []*grpc.ClientConn
	pools    []sync.Pool // callers per connection
	start    time.Time
	t0, t1   time.Time // measured interval, of scheduled starts
	inflight atomic.Int64
	sent     atomic.Int64
	wg       sync.WaitGroup
	shards   [openShards]openShard
}

// due is call i's scheduled start: start + i/rate.
func (o *openRun) due(i int64) time.Time {
	return o.start.Add(time.Duration(float64(i) * 1e9 / o.cfg.Rate))
}

// schedule issues call i at due(i), whether or not earlier calls were
// answered, until the end of the measured interval, MaxRequests calls, or
// the end of ctx. It returns why it stopped.
func (o *openRun) schedule(ctx context.Context, runCtx context.Context) string {
	var next uint64
	for i := int64(0); ; i++ {
		due := o.due(i)
		if !due.Before(o.t1) {
			return "duration"
		}
		if i >= o.cfg.MaxRequests {
			return "max-requests"
		}
		if d := time.Until(due); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return "interrupted"
			}
		}
		k := int(next % uint64(o.cfg.Keys))
		next++
		if o.cfg.Random {
			k = rand.IntN(o.cfg.Keys)
		}
		o.issue(runCtx, i, due, k)
	}
}

// issue sends call i in a goroutine of its own, or counts it dropped when
// MaxInFlight calls are in flight already.
func (o *openRun) issue(runCtx context.Context, i int64, due time.Time, k int) {
	sh := &o.shards[i%openShards]
	measured := !due.Before(o.t0)
	if o.inflight.Load() >= int64(o.cfg.MaxInFlight) {
		if measured {
			sh.mu.Lock()
			sh.scheduled++
			sh.dropCap++
			sh.mu.Unlock()
		}
		return
	}
	o.inflight.Add(1)
	o.sent.Add(1)
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		defer o.inflight.Add(-1)
		o.send(runCtx, sh, int(i)%len(o.conns), due, k, measured)
	}()
}

// send makes one call and records it in sh when measured.
func (o *openRun) send(runCtx context.Context, sh *openShard, conn int, due time.Time, k int, measured bool) {
	lag := time.Since(due)
	c, _ := o.pools[conn].Get().(caller)
	if c == nil {
		c = o.newCall(o.conns[conn])
	}
	cctx, cancel := context.WithDeadline(runCtx, due.Add(o.cfg.DropAfter))
	out, err := c.call(cctx, k)
	cancel()
	latency := time.Since(due)
	o.pools[conn].Put(c)
	// Answered after the deadline, or cut off by it: dropped, either way.
	late := latency > o.cfg.DropAfter && runCtx.Err() == nil
	if !measured {
		return
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.scheduled++
	sh.lag.Record(lag)
	switch {
	case late:
		sh.dropLate++
	case err != nil:
		sh.st.recordError(err)
	default:
		sh.st.hist.Record(latency)
		sh.st.record(out)
	}
}

// runOpen is Run's open loop: calls at cfg.Rate from a schedule, latency
// from each call's scheduled start, so that a slow answer delays no later
// call's start and is counted in full (no coordinated omission).
func runOpen(ctx context.Context, cfg Config, newCall func(*grpc.ClientConn) caller, conns []*grpc.ClientConn, tgtName string) (*Result, error) {
	o := &openRun{cfg: cfg, newCall: newCall, conns: conns, pools: make([]sync.Pool, len(conns))}
	for i := range o.shards {
		o.shards[i].st = workerStats{hist: NewHistogram(), byCode: map[string]uint64{}}
		o.shards[i].lag = NewHistogram()
	}
	o.start = time.Now()
	o.t0 = o.start.Add(cfg.Warmup)
	o.t1 = o.t0.Add(cfg.Duration)
	hardStop := cfg.Warmup + cfg.Duration + cfg.DropAfter + cfg.Timeout + 5*time.Second
	runCtx, cancel := context.WithTimeout(ctx, hardStop)
	defer cancel()

	stopped, scheduleDone := make(chan string, 1), make(chan struct{})
	go func() { stopped <- o.schedule(ctx, runCtx); close(scheduleDone) }()
	m := measureIntervalStop(ctx, o.t0, o.t1, cfg.CPU, scheduleDone, nil)
	stopBy := <-stopped

	// Calls in flight end by their drop deadline; wait a little past it.
	done := make(chan struct{})
	go func() { o.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(cfg.DropAfter + cfg.Timeout):
	}
	unfinished := o.inflight.Load()
	cancel()
	<-done
	return o.result(tgtName, stopBy, unfinished, m), nil
}

// result merges the shards into a Result.
func (o *openRun) result(tgtName, stopBy string, unfinished int64, m measured) *Result {
	res := baseResult(o.cfg, tgtName, stopBy, o.sent.Load(), unfinished, m)
	open := &OpenLoop{OfferedRate: o.cfg.Rate, MaxInFlight: o.cfg.MaxInFlight,
		DropAfterMs: float64(o.cfg.DropAfter) / 1e6}
	stats := make([]*workerStats, 0, openShards)
	lag := NewHistogram()
	for i := range o.shards {
		sh := &o.shards[i]
		sh.mu.Lock()
		stats = append(stats, &sh.st)
		lag.Merge(sh.lag)
		open.Scheduled += sh.scheduled
		open.DroppedCap += sh.dropCap
		open.DroppedLate += sh.dropLate
		sh.mu.Unlock()
	}
	open.Dropped = open.DroppedCap + open.DroppedLate
	open.SendLag = latencyOf(lag)
	res.Open = open
	mergeStats(res, stats)
	finishResult(res, o.cfg, m)
	// Decisions are the answers of the calls scheduled in the measured
	// interval: per second of that schedule, when it ran to its end.
	if stopBy == "duration" {
		res.DecisionsPerSec = float64(res.Decisions) / o.cfg.Duration.Seconds()
	}
	return res
}
