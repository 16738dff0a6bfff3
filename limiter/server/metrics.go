package server

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Protocols, the "protocol" label of sluice_request_duration_seconds.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http"
)

type metrics struct {
	grpc, http prometheus.Observer
}

func newMetrics(reg prometheus.Registerer) *metrics {
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sluice_request_duration_seconds",
		Help: "Time to answer a rate-limit request (RLS ShouldRateLimit over gRPC, or POST /v1/ratelimit/check over HTTP), by protocol.",
		// 50µs to ~3.3s: a memory decision takes microseconds, a Redis one
		// a round trip, and the store's deadline is tens of milliseconds.
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 17),
	}, []string{"protocol"})
	if reg != nil {
		reg.MustRegister(duration)
	}
	return &metrics{
		grpc: duration.WithLabelValues(ProtocolGRPC),
		http: duration.WithLabelValues(ProtocolHTTP),
	}
}
