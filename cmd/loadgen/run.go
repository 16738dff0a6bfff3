package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
)

// Bounds on a run, whatever the flags say.
const (
	maxDuration    = time.Hour
	maxConcurrency = 10_000
	maxConns       = 256
	maxErrorKinds  = 32
)

// Config is one load run.
type Config struct {
	Addr        string        // RLS gRPC target, see parseTarget
	AllowRemote bool          // Addr and the metrics URL may be off this machine
	Conns       int           // gRPC connections; streams are spread across them
	Concurrency int           // concurrent in-flight ShouldRateLimit calls
	Keys        int           // distinct key indexes substituted for %d
	Random      bool          // pick key indexes at random instead of cycling
	Duration    time.Duration // measured interval
	Warmup      time.Duration // unmeasured interval before it
	Domain      string
	Descriptor  string // template, see parseTemplate
	Hits        uint32 // hits_addend; 0 leaves it unset (the server's default of 1)
	MaxRequests int64  // bound on calls sent, warm-up included
	Timeout     time.Duration
	CPU         []cpuSource // server processes whose CPU is measured
	Protocol    string      // "rls" (or "") or "gubernator", see caller
	// Open loop: with Rate > 0, call i starts at start + i/Rate whatever
	// the answers; Concurrency is then unused.
	Rate        float64       // calls per second; 0: closed loop
	MaxInFlight int           // calls in flight beyond which a call is dropped, not sent
	DropAfter   time.Duration // a call unanswered this long after its scheduled start is dropped
}

func (c *Config) validate() error {
	switch {
	case c.Conns < 1 || c.Conns > maxConns:
		return fmt.Errorf("--conns %d: want 1 to %d", c.Conns, maxConns)
	case c.Rate < 0 || c.Rate > maxRate:
		return fmt.Errorf("--rate %g: want 0 (closed loop) to %d calls per second", c.Rate, maxRate)
	case c.Rate > 0 && (c.MaxInFlight < 1 || c.MaxInFlight > maxMaxInFlight):
		return fmt.Errorf("--max-in-flight %d: want 1 to %d", c.MaxInFlight, maxMaxInFlight)
	case c.Rate > 0 && c.DropAfter <= 0:
		return fmt.Errorf("--drop-after %s: want more than 0", c.DropAfter)
	case c.Rate == 0 && (c.Concurrency < 1 || c.Concurrency > maxConcurrency):
		return fmt.Errorf("--concurrency %d: want 1 to %d", c.Concurrency, maxConcurrency)
	case c.Keys < 1:
		return fmt.Errorf("--keys %d: want at least 1", c.Keys)
	case c.Duration <= 0 || c.Duration > maxDuration:
		return fmt.Errorf("--duration %s: want more than 0 and at most %s", c.Duration, maxDuration)
	case c.Warmup < 0 || c.Warmup > maxDuration:
		return fmt.Errorf("--warmup %s: want 0 to %s", c.Warmup, maxDuration)
	case c.MaxRequests < 1:
		return fmt.Errorf("--max-requests %d: want at least 1", c.MaxRequests)
	case c.Timeout <= 0:
		return fmt.Errorf("--timeout %s: want more than 0", c.Timeout)
	case c.Domain == "":
		return fmt.Errorf("--domain is empty")
	}
	return nil
}

// Result is what a run measured. Times are in microseconds.
type Result struct {
	Target          string            `json:"target"`
	Protocol        string            `json:"protocol"`
	Domain          string            `json:"domain"`
	Descriptor      string            `json:"descriptor"`
	Conns           int               `json:"conns"`
	Concurrency     int               `json:"concurrency"`
	Keys            int               `json:"keys"`
	KeyOrder        string            `json:"key_order"`
	Hits            uint32            `json:"hits"`
	WarmupSeconds   float64           `json:"warmup_seconds"`
	MeasuredSeconds float64           `json:"measured_seconds"`
	StoppedBy       string            `json:"stopped_by"` // "duration" or "max-requests"
	Sent            int64             `json:"sent"`       // calls sent in all, warm-up included
	Decisions       uint64            `json:"decisions"`  // answers in the measured interval
	DecisionsPerSec float64           `json:"decisions_per_sec"`
	OK              uint64            `json:"ok"`
	OverLimit       uint64            `json:"over_limit"`
	Unknown         uint64            `json:"unknown"` // overall_code UNKNOWN
	Errors          uint64            `json:"errors"`
	ErrorsByCode    map[string]uint64 `json:"errors_by_code,omitempty"`
	FirstError      string            `json:"first_error,omitempty"`
	Unfinished      int64             `json:"unfinished"` // calls still running past the timeout at the end
	Latency         Latency           `json:"latency_us"`
	ServerCPU       *CPUResult        `json:"server_cpu,omitempty"`
	LoadgenCores    float64           `json:"loadgen_cpu_cores"`
	// MachineCores is the CPU the whole machine was busy with, in cores;
	// OtherCores is what is left after the server and the load generator:
	// other processes competing for the cores, which make the run noisy.
	// Both are -1 when /proc/stat cannot be read.
	MachineCores float64 `json:"machine_busy_cores"`
	OtherCores   float64 `json:"other_busy_cores"`
	// Backends counts the measured answers by the server that gave them,
	// when several may answer (a list or a dns:/// target).
	Backends map[string]uint64 `json:"backends,omitempty"`
	// Open is the open loop's own figures; nil for a closed loop.
	Open *OpenLoop `json:"open_loop,omitempty"`
}

// Latency summarises answered calls in the measured interval, in µs.
type Latency struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p99_9"`
	Max   float64 `json:"max"`
}

// CPUResult is the server CPU spent over the measured interval.
type CPUResult struct {
	Seconds       float64      `json:"seconds"`
	UsPerDecision float64      `json:"us_per_decision"`
	Cores         float64      `json:"cores"`
	Processes     []ProcessCPU `json:"processes"`
	Error         string       `json:"error,omitempty"`
}

// ProcessCPU is one measured process.
type ProcessCPU struct {
	Name          string  `json:"name"`
	Seconds       float64 `json:"seconds"`
	UsPerDecision float64 `json:"us_per_decision"`
	Cores         float64 `json:"cores"`
}

const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

// workerStats is one worker's own counters, merged at the end.
type workerStats struct {
	hist     *Histogram
	ok, over uint64
	unknown  uint64
	errors   uint64
	byCode   map[string]uint64
	backends map[string]uint64 // answers by server, for a balanced target
	firstErr string
	_padding [64]byte
}

// dial opens conns connections to the target addr names (see
// parseTarget).
func dial(addr string, allowRemote bool, conns int) ([]*grpc.ClientConn, target, error) {
	t, err := parseTarget(addr, allowRemote)
	if err != nil {
		return nil, t, err
	}
	var cs []*grpc.ClientConn
	for i := 0; i < conns; i++ {
		grpcTarget, extra := t.dialOptions()
		// WithNoProxy: never route through a proxy from the environment.
		cc, err := grpc.NewClient(grpcTarget, append([]grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithNoProxy(),
			grpc.WithUserAgent("sluice-loadgen"),
		}, extra...)...)
		if err != nil {
			closeAll(cs)
			return nil, t, err
		}
		cs = append(cs, cc)
	}
	return cs, t, nil
}

func closeAll(cs []*grpc.ClientConn) {
	for _, c := range cs {
		_ = c.Close()
	}
}

// preflight sends one call on every connection, so that a server that is not
// there fails the run at once with a clear error, and every connection is up
// before the clock starts.
func preflight(ctx context.Context, cs []*grpc.ClientConn, target string, newCall func(*grpc.ClientConn) caller, timeout time.Duration) error {
	for _, cc := range cs {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		_, err := newCall(cc).call(cctx, 0, grpc.WaitForReady(true))
		cancel()
		if err != nil {
			return fmt.Errorf("cannot get an answer from the rate-limit server at %s within %s: %w", target, timeout, err)
		}
	}
	return nil
}

// Run sends load as cfg says and returns what it measured: a closed loop of
// cfg.Concurrency calls in flight, or with cfg.Rate an open loop (runOpen).
// It stops by itself after cfg.Warmup + cfg.Duration, or when
// cfg.MaxRequests have been sent, or when ctx is done.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tmpl, err := parseTemplate(cfg.Descriptor)
	if err != nil {
		return nil, err
	}
	newCall, err := newCallerFunc(cfg.Protocol, tmpl, cfg.Domain, cfg.Hits)
	if err != nil {
		return nil, err
	}
	conns, tgt, err := dial(cfg.Addr, cfg.AllowRemote, cfg.Conns)
	if err != nil {
		return nil, err
	}
	defer closeAll(conns)
	if err := preflight(ctx, conns, tgt.name, newCall, cfg.Timeout); err != nil {
		return nil, err
	}
	var res *Result
	if cfg.Rate > 0 {
		res, err = runOpen(ctx, cfg, newCall, conns, tgt.name)
	} else {
		res, err = runClosed(ctx, cfg, newCall, conns, tgt)
	}
	if err == nil && !tmpl.varies() {
		res.Keys = 1
	}
	return res, err
}

// closedRun is one closed-loop run's state.
type closedRun struct {
	cfg      Config
	phase    atomic.Int32
	sent     atomic.Int64
	nextKey  atomic.Uint64
	inflight atomic.Int64
	stopOnce sync.Once
	stopCh   chan struct{}
	stopBy   atomic.Value
}

func (r *closedRun) stop(why string) {
	r.stopOnce.Do(func() { r.stopBy.Store(why); close(r.stopCh) })
}

// worker sends calls one after the other until the run stops.
func (r *closedRun) worker(runCtx context.Context, c caller, st *workerStats, opts []grpc.CallOption, from *peer.Peer) {
	for {
		if r.phase.Load() == phaseStop {
			return
		}
		if r.sent.Add(1) > r.cfg.MaxRequests {
			r.sent.Add(-1)
			r.stop("max-requests")
			return
		}
		k := int(r.nextKey.Add(1)-1) % r.cfg.Keys
		if r.cfg.Random {
			k = rand.IntN(r.cfg.Keys)
		}
		r.inflight.Add(1)
		start := time.Now()
		out, err := c.call(runCtx, k, opts...)
		elapsed := time.Since(start)
		r.inflight.Add(-1)
		switch r.phase.Load() {
		case phaseWarmup:
			continue
		case phaseStop:
			return // answered after the measured interval
		}
		if err != nil {
			st.recordError(err)
			if runCtx.Err() != nil {
				return
			}
			continue
		}
		st.hist.Record(elapsed)
		if st.backends != nil && from.Addr != nil {
			st.backends[from.Addr.String()]++
		}
		st.record(out)
	}
}

// runClosed is Run's closed loop: cfg.Concurrency workers, each sending its
// next call when the last is answered.
func runClosed(ctx context.Context, cfg Config, newCall func(*grpc.ClientConn) caller, conns []*grpc.ClientConn, tgt target) (*Result, error) {
	// Calls run on runCtx, which ends well after the run should have: a
	// server that stops answering cannot keep the load generator waiting.
	hardStop := cfg.Warmup + cfg.Duration + cfg.Timeout + 5*time.Second
	runCtx, cancel := context.WithTimeout(ctx, hardStop)
	defer cancel()

	r := &closedRun{cfg: cfg, stopCh: make(chan struct{})}
	stats := make([]*workerStats, cfg.Concurrency)
	var wg sync.WaitGroup
	for w := 0; w < cfg.Concurrency; w++ {
		st := &workerStats{hist: NewHistogram(), byCode: map[string]uint64{}}
		var opts []grpc.CallOption
		from := &peer.Peer{}
		if tgt.balanced {
			st.backends = map[string]uint64{}
			opts = append(opts, grpc.Peer(from))
		}
		stats[w] = st
		c := newCall(conns[w%len(conns)])
		wg.Add(1)
		go func() { defer wg.Done(); r.worker(runCtx, c, st, opts, from) }()
	}

	t0 := time.Now().Add(cfg.Warmup)
	m := measureIntervalStop(ctx, t0, t0.Add(cfg.Duration), cfg.CPU, r.stopCh, &r.phase)
	r.stop("duration")
	if ctx.Err() != nil {
		r.stopBy.Store("interrupted")
	}

	// Let calls in flight finish, up to the timeout, then cut them off.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(cfg.Timeout):
	}
	unfinished := r.inflight.Load()
	cancel()
	<-done

	res := baseResult(cfg, tgt.name, r.stopBy.Load().(string), r.sent.Load(), unfinished, m)
	mergeStats(res, stats)
	finishResult(res, cfg, m)
	return res, nil
}

func readCPU(ctx context.Context, srcs []cpuSource) ([]float64, error) {
	out := make([]float64, len(srcs))
	var errs []error
	for i, s := range srcs {
		v, err := s.read(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Name, err))
		}
		out[i] = v
	}
	return out, errors.Join(errs...)
}

func cpuResult(srcs []cpuSource, c0, c1 []float64, err error, res *Result) *CPUResult {
	out := &CPUResult{}
	if err != nil {
		out.Error = err.Error()
		return out
	}
	for i, s := range srcs {
		p := ProcessCPU{Name: s.Name, Seconds: c1[i] - c0[i]}
		if res.Decisions > 0 {
			p.UsPerDecision = p.Seconds / float64(res.Decisions) * 1e6
		}
		if res.MeasuredSeconds > 0 {
			p.Cores = p.Seconds / res.MeasuredSeconds
		}
		out.Processes = append(out.Processes, p)
		out.Seconds += p.Seconds
	}
	if res.Decisions > 0 {
		out.UsPerDecision = out.Seconds / float64(res.Decisions) * 1e6
	}
	if res.MeasuredSeconds > 0 {
		out.Cores = out.Seconds / res.MeasuredSeconds
	}
	return out
}

// sortedCodes lists error codes by count, largest first.
func sortedCodes(m map[string]uint64) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		if m[ks[i]] != m[ks[j]] {
			return m[ks[i]] > m[ks[j]]
		}
		return ks[i] < ks[j]
	})
	return ks
}
