package server

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Protocols, the "protocol" label of sluice_request_duration_seconds.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http"
	// ProtocolForwardAuth is a forward-auth call of a gateway (nginx
	// auth_request, Traefik ForwardAuth).
	ProtocolForwardAuth = "forward_auth"
	// ProtocolStatus is a status peek, GET /v1/ratelimit/status.
	ProtocolStatus = "status"
)

type metrics struct {
	grpc, http, forwardAuth, status prometheus.Observer
}

func newMetrics(reg prometheus.Registerer) *metrics {
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sluice_request_duration_seconds",
		Help: "Time to answer a rate-limit request, by protocol: grpc (RLS ShouldRateLimit), http (POST /v1/ratelimit/check), forward_auth (/v1/forward-auth/{domain}) or status (GET /v1/ratelimit/status).",
		// 50µs to ~3.3s: a memory decision takes microseconds, a Redis one
		// a round trip, and the store's deadline is tens of milliseconds.
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 17),
	}, []string{"protocol"})
	if reg != nil {
		reg.MustRegister(duration)
	}
	return &metrics{
		grpc:        duration.WithLabelValues(ProtocolGRPC),
		http:        duration.WithLabelValues(ProtocolHTTP),
		forwardAuth: duration.WithLabelValues(ProtocolForwardAuth),
		status:      duration.WithLabelValues(ProtocolStatus),
	}
}

// timed observes how long h takes to answer.
func timed(o prometheus.Observer, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		defer func() { o.Observe(time.Since(start).Seconds()) }()
		h(w, r)
	}
}
