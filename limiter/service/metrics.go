package service

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/limiter/store"
)

// Decision results, the "result" label of sluice_decisions_total.
const (
	ResultAllowed       = "allowed"
	ResultLimited       = "limited"
	ResultShadowLimited = "shadow_limited"
	ResultFailedOpen    = "failed_open"
	ResultFailedClosed  = "failed_closed"
	ResultLocalFallback = "local_fallback"
	// ResultSoftLimited: over a soft policy's threshold, allowed and
	// marked.
	ResultSoftLimited = "soft_limited"
	// ResultPenalized: denied because the key is penalized (spec.penalty).
	ResultPenalized = "penalized"
	// ResultRefused: not counted because of what the client sent (a cost
	// above a cap, an over-long value, a malformed lease...), and denied
	// with a reason when an enforcing policy matched (refuse.go).
	ResultRefused = "refused"
)

type metrics struct {
	decisions   *prometheus.Desc // collected from policyStats (decisionsCollector)
	hotRequests *prometheus.Desc // collected from the top sketches (decisionsCollector)
	hotLimited  *prometheus.Desc
	// priorityDecisions are collected from the level counts (priority.go).
	priorityDecisions *prometheus.Desc
	storeErrors       storeErrorCounters
	snapshotPolicies  prometheus.Gauge
	enforcement       prometheus.Gauge
	readyPods         prometheus.Gauge
}

// Causes of store errors, the "cause" label of sluice_store_errors_total.
const (
	// CauseUnavailable: the store did not try, knowing its backend can't
	// answer now (store.ErrUnavailable; for Redis, the shard's breaker is
	// open).
	CauseUnavailable = "unavailable"
	// CauseQueued: the call waited its whole deadline to be sent
	// (store.ErrQueueTimeout): the limiter is overloaded.
	CauseQueued = "queued"
	// CauseTimeout: the call was sent and its answer did not come in time.
	CauseTimeout = "timeout"
	// CauseCanceled: the request's own context ended first (its client
	// went away).
	CauseCanceled = "canceled"
	// CauseError: any other failure (a refused or dropped connection, an
	// error reply).
	CauseError = "error"
)

// storeErrorCause is a store error's cause, an index of the counters.
type storeErrorCause int

const (
	causeUnavailable storeErrorCause = iota
	causeQueued
	causeTimeout
	causeCanceled
	causeError
	numCauses
)

// storeErrorCauses are the cause label's values, each series made at
// start so that every one reads 0 before its first error.
var storeErrorCauses = [numCauses]string{
	causeUnavailable: CauseUnavailable, causeQueued: CauseQueued, causeTimeout: CauseTimeout,
	causeCanceled: CauseCanceled, causeError: CauseError,
}

// storeErrorCounters is sluice_store_errors_total, with a child per cause.
type storeErrorCounters struct {
	vec   *prometheus.CounterVec
	cause [numCauses]prometheus.Counter
}

func newStoreErrorCounters() storeErrorCounters {
	c := storeErrorCounters{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_store_errors_total",
		Help: "Store calls that failed, by cause: unavailable (the store did not try: a Redis shard's breaker is open), queued (not sent within the deadline: the limiter is overloaded), timeout (sent, not answered in time), canceled (the client went away), error (any other). Each was resolved by the policy's failure mode.",
	}, []string{"cause"})}
	for i, name := range storeErrorCauses {
		c.cause[i] = c.vec.WithLabelValues(name)
	}
	return c
}

// inc counts err under its cause.
func (c storeErrorCounters) inc(err error) {
	c.cause[causeOf(err)].Inc()
}

// causeOf is err's cause. A call left unsent also wraps
// context.DeadlineExceeded: it is queued, not a timeout.
func causeOf(err error) storeErrorCause {
	switch {
	case errors.Is(err, store.ErrUnavailable):
		return causeUnavailable
	case errors.Is(err, store.ErrQueueTimeout):
		return causeQueued
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return causeTimeout
	case errors.Is(err, context.Canceled):
		return causeCanceled
	default:
		return causeError
	}
}

// isTimeout reports a network timeout (net.Error.Timeout, os.ErrDeadlineExceeded).
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		decisions: prometheus.NewDesc("sluice_decisions_total",
			"Decisions by policy (namespace/name), domain and result: allowed, limited, shadow_limited, failed_open, failed_closed, local_fallback, soft_limited, penalized (a penalized key's denials, spec.penalty), refused (requests not counted because of what the client sent, denied with a reason).",
			[]string{"domain", "policy", "result"}, nil),
		hotRequests: prometheus.NewDesc("sluice_hottest_descriptor_requests",
			"Requests of each policy's hottest descriptor values (hashed or truncated) in the last complete interval; only with --top-descriptors.",
			[]string{"domain", "policy", "value"}, nil),
		hotLimited: prometheus.NewDesc("sluice_hottest_descriptor_limited",
			"Denials (or would-be denials) of each policy's hottest descriptor values in the last complete interval; only with --top-descriptors.",
			[]string{"domain", "policy", "value"}, nil),
		priorityDecisions: prometheus.NewDesc("sluice_priority_decisions_total",
			"Decisions of policies with priority shedding (spec.priority) by policy, priority level (requests with no or an unknown priority count under the default level) and result: allowed, limited, shadow_limited, and soft_limited for a soft policy.",
			[]string{"domain", "policy", "priority", "result"}, nil),
		storeErrors: newStoreErrorCounters(),
		snapshotPolicies: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_snapshot_policies",
			Help: "Policies in the loaded snapshot.",
		}),
		enforcement: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_enforcement_enabled",
			Help: "1 when denials are enforced; 0 when the kill switch (--enforcement=disabled, or the fleet's snapshot) allows every request and counts would-be denials as shadow_limited.",
		}),
		readyPods: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_local_fallback_pods",
			Help: "Ready limiter pods sharing each limit: failureMode Local enforces limit divided by this while the store can't answer.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.storeErrors.vec, m.snapshotPolicies, m.enforcement, m.readyPods)
	}
	return m
}

// decisionsCollector exports sluice_decisions_total from the loaded
// policies' stats: the request path counts once, in policyStats, and the
// series of a policy that left the snapshot go with it.
type decisionsCollector struct{ s *Service }

func (d decisionsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- d.s.metrics.decisions
	ch <- d.s.metrics.hotRequests
	ch <- d.s.metrics.hotLimited
	ch <- d.s.metrics.priorityDecisions
}

func (d decisionsCollector) Collect(ch chan<- prometheus.Metric) {
	l := d.s.loaded.Load()
	if l.snap == nil {
		return
	}
	for _, p := range l.snap.Policies {
		ps := l.policies[p]
		st := ps.stats
		if st == nil {
			continue
		}
		d.collectPriority(ch, p, ps)
		for _, v := range []struct {
			result string
			n      *atomic.Int64
		}{
			{ResultAllowed, &st.allowed}, {ResultLimited, &st.limited}, {ResultShadowLimited, &st.shadowLimited},
			{ResultFailedOpen, &st.failedOpen}, {ResultFailedClosed, &st.failedClosed}, {ResultLocalFallback, &st.localFallback},
			{ResultSoftLimited, &st.softLimited}, {ResultPenalized, &st.penalized}, {ResultRefused, &st.refused},
		} {
			ch <- prometheus.MustNewConstMetric(d.s.metrics.decisions, prometheus.CounterValue, float64(v.n.Load()), p.Domain, p.ID(), v.result)
		}
		if st.top != nil {
			hot, _ := st.top.report(d.s.clock())
			for _, h := range hot {
				ch <- prometheus.MustNewConstMetric(d.s.metrics.hotRequests, prometheus.GaugeValue, float64(h.Requests), p.Domain, p.ID(), h.Value)
				ch <- prometheus.MustNewConstMetric(d.s.metrics.hotLimited, prometheus.GaugeValue, float64(h.Limited), p.Domain, p.ID(), h.Value)
			}
		}
	}
}
