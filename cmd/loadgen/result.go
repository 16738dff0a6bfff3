package main

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/status"
)

// measured is what was read at both ends of the measured interval.
type measured struct {
	t0, t1       time.Time
	cpu0, cpu1   []float64
	cpuErr       error
	self0, self1 float64
	busy0, busy1 float64
	busyErr      error
}

// measureIntervalStop waits until t0, reads CPU, waits until t1 (or stop
// is closed, or ctx is done) and reads it again; it moves phase (unless
// nil) to phaseMeasure at t0 and phaseStop at t1.
func measureIntervalStop(ctx context.Context, t0, t1 time.Time, cpu []cpuSource, stop <-chan struct{}, phase *atomic.Int32) measured {
	wait := func(until time.Time) {
		d := time.Until(until)
		if d <= 0 {
			return
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-stop:
		case <-ctx.Done():
		}
	}
	var m measured
	wait(t0)
	m.cpu0, m.cpuErr = readCPU(ctx, cpu)
	m.self0 = selfCPU()
	m.busy0, m.busyErr = machineBusy()
	m.t0 = time.Now()
	if phase != nil {
		phase.Store(phaseMeasure)
	}
	wait(t1)
	if phase != nil {
		phase.Store(phaseStop)
	}
	m.t1 = time.Now()
	m.self1 = selfCPU()
	var err error
	if m.busy1, err = machineBusy(); m.busyErr == nil {
		m.busyErr = err
	}
	if m.cpu1, err = readCPU(ctx, cpu); m.cpuErr == nil {
		m.cpuErr = err
	}
	return m
}

// baseResult is a Result with the run's settings filled in.
func baseResult(cfg Config, tgtName, stopBy string, sent, unfinished int64, m measured) *Result {
	protocol := cfg.Protocol
	if protocol == "" {
		protocol = protoRLS
	}
	return &Result{
		Target:          tgtName,
		Protocol:        protocol,
		Domain:          cfg.Domain,
		Descriptor:      cfg.Descriptor,
		Conns:           cfg.Conns,
		Concurrency:     cfg.Concurrency,
		Keys:            cfg.Keys,
		KeyOrder:        map[bool]string{false: "cycle", true: "random"}[cfg.Random],
		Hits:            cfg.Hits,
		WarmupSeconds:   cfg.Warmup.Seconds(),
		MeasuredSeconds: m.t1.Sub(m.t0).Seconds(),
		StoppedBy:       stopBy,
		Sent:            sent,
		Unfinished:      unfinished,
		ErrorsByCode:    map[string]uint64{},
	}
}

// mergeStats adds the counters and latencies of stats to res.
func mergeStats(res *Result, stats []*workerStats) {
	hist := NewHistogram()
	for _, st := range stats {
		hist.Merge(st.hist)
		res.OK += st.ok
		res.OverLimit += st.over
		res.Unknown += st.unknown
		res.Errors += st.errors
		for c, n := range st.byCode {
			res.ErrorsByCode[c] += n
		}
		for b, n := range st.backends {
			if res.Backends == nil {
				res.Backends = map[string]uint64{}
			}
			res.Backends[b] += n
		}
		if res.FirstError == "" {
			res.FirstError = st.firstErr
		}
	}
	if len(res.ErrorsByCode) == 0 {
		res.ErrorsByCode = nil
	}
	res.Decisions = res.OK + res.OverLimit + res.Unknown
	res.Latency = latencyOf(hist)
}

// latencyOf summarises h in µs.
func latencyOf(h *Histogram) Latency {
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	return Latency{
		Count: h.Count(),
		Mean:  us(h.Mean()),
		P50:   us(h.Quantile(0.50)),
		P90:   us(h.Quantile(0.90)),
		P99:   us(h.Quantile(0.99)),
		P999:  us(h.Quantile(0.999)),
		Max:   us(h.Max()),
	}
}

// finishResult adds the rates and CPU figures of interval m to res.
func finishResult(res *Result, cfg Config, m measured) {
	if res.MeasuredSeconds > 0 {
		res.DecisionsPerSec = float64(res.Decisions) / res.MeasuredSeconds
		res.LoadgenCores = (m.self1 - m.self0) / res.MeasuredSeconds
	}
	if len(cfg.CPU) > 0 {
		res.ServerCPU = cpuResult(cfg.CPU, m.cpu0, m.cpu1, m.cpuErr, res)
	}
	res.MachineCores, res.OtherCores = -1, -1
	if m.busyErr == nil && res.MeasuredSeconds > 0 {
		res.MachineCores = (m.busy1 - m.busy0) / res.MeasuredSeconds
		res.OtherCores = res.MachineCores - res.LoadgenCores
		if res.ServerCPU != nil && res.ServerCPU.Error == "" {
			res.OtherCores -= res.ServerCPU.Cores
		}
		if res.OtherCores < 0 { // clock-tick rounding
			res.OtherCores = 0
		}
	}
}

// record counts one answered decision.
func (st *workerStats) record(out outcome) {
	switch out {
	case outcomeOK:
		st.ok++
	case outcomeOver:
		st.over++
	default:
		st.unknown++
	}
}

// recordError counts one failed call by its gRPC code.
func (st *workerStats) recordError(err error) {
	st.errors++
	code := status.Code(err).String()
	if len(st.byCode) < maxErrorKinds || st.byCode[code] > 0 {
		st.byCode[code]++
	}
	if st.firstErr == "" {
		st.firstErr = err.Error()
	}
}
