package redis

import "github.com/prometheus/client_golang/prometheus"

type storeMetrics struct {
	state     *prometheus.GaugeVec
	opened    *prometheus.CounterVec
	errors    *prometheus.CounterVec
	roundtrip *prometheus.HistogramVec
	loads     *prometheus.CounterVec
}

func newStoreMetrics(reg prometheus.Registerer) *storeMetrics {
	m := &storeMetrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_redis_breaker_state",
			Help: "Circuit breaker of each Redis shard (named by its slot ranges, or standalone): 0 closed, 1 open, 2 half-open (probing).",
		}, []string{"shard"}),
		opened: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_redis_breaker_opened_total",
			Help: "Times the circuit breaker of each Redis shard opened.",
		}, []string{"shard"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_redis_errors_total",
			Help: "Redis calls that failed because the shard could not answer, by shard (as the breaker names it) and class: timeout, connection, clusterdown, tryagain, masterdown, loading; and redirect, a MOVED or ASK not followed in time (no shard failure).",
		}, []string{"shard", "class"}),
		roundtrip: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_redis_roundtrip_seconds",
			Help:    "Round trips of the store's batched calls to each Redis shard: from the batch's first send to its last reply, resends after NOSCRIPT, TRYAGAIN or a redirect included.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"shard"}),
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_redis_slotmap_loads_total",
			Help: "Redis Cluster slot map loads, by trigger: timer (start and periodic), retry (after a failed load), open (a breaker is open), breaker (one opened or its probe failed), or what a round trip met: timeout, connection, clusterdown, masterdown, moved.",
		}, []string{"trigger"}),
	}
	if reg != nil {
		reg.MustRegister(m.state, m.opened, m.errors, m.roundtrip, m.loads)
	}
	return m
}

// New connects to Redis. It does not wait for the server to answer: the
// first decisions will report any connection error.

// Collectors are the store's metrics, for a registry that did not exist
// when the store was made (Options.Registerer registers them at once).
func (s *Store) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.metrics.state, s.metrics.opened, s.metrics.errors, s.metrics.roundtrip, s.metrics.loads}
}
