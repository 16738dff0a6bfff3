package service

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/limiter/config"
)

// Decision results, the "result" label of sluice_decisions_total.
const (
	ResultAllowed       = "allowed"
	ResultLimited       = "limited"
	ResultShadowLimited = "shadow_limited"
	ResultFailedOpen    = "failed_open"
	ResultFailedClosed  = "failed_closed"
	ResultLocalFallback = "local_fallback"
)

type metrics struct {
	decisions        *prometheus.CounterVec
	storeErrors      prometheus.Counter
	snapshotPolicies prometheus.Gauge
}

// policyCounters are one policy's resolved counters, so the request path
// never looks labels up.
type policyCounters struct {
	allowed, limited, shadowLimited         prometheus.Counter
	failedOpen, failedClosed, localFallback prometheus.Counter
	lastShadowLog                           atomic.Int64
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total",
			Help: "Decisions by policy (namespace/name), domain and result: allowed, limited, shadow_limited, failed_open, failed_closed, local_fallback.",
		}, []string{"domain", "policy", "result"}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_store_errors_total",
			Help: "Store calls that failed (timeouts, connection errors); each one was resolved by the policy's failure mode.",
		}),
		snapshotPolicies: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_snapshot_policies",
			Help: "Policies in the loaded snapshot.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.decisions, m.storeErrors, m.snapshotPolicies)
	}
	return m
}

func (m *metrics) forPolicy(p *config.Policy) *policyCounters {
	c := func(result string) prometheus.Counter {
		return m.decisions.WithLabelValues(p.Domain, p.ID(), result)
	}
	return &policyCounters{
		allowed:       c(ResultAllowed),
		limited:       c(ResultLimited),
		shadowLimited: c(ResultShadowLimited),
		failedOpen:    c(ResultFailedOpen),
		failedClosed:  c(ResultFailedClosed),
		localFallback: c(ResultLocalFallback),
	}
}

// forget drops the series of a policy that left the snapshot.
func (m *metrics) forget(p *config.Policy) {
	m.decisions.DeletePartialMatch(prometheus.Labels{"domain": p.Domain, "policy": p.ID()})
}
