package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
)

// noopService answers every request OK, with one OK status per descriptor
// and nothing else: the baseline cost of gRPC and the RLS protocol alone.
// With wait set it first waits that long, doing nothing: what a store's
// round trip alone costs a server under closed-loop load (make bench).
type noopService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	requests prometheus.Counter
	wait     time.Duration
}

func (s *noopService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	s.requests.Inc()
	if s.wait > 0 {
		t := time.NewTimer(s.wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	statuses := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))
	for i := range statuses {
		statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: statuses}, nil
}

// noopServer is a running do-nothing RLS server with its own /metrics.
type noopServer struct {
	grpc     *grpc.Server
	http     *http.Server
	grpcLis  net.Listener
	httpLis  net.Listener
	serveErr chan error
}

// startNoop listens on grpcAddr for RLS and, unless metricsAddr is empty, on
// metricsAddr for /metrics (with the process and Go collectors) and /healthz.
// Each call waits wait (0: none) before its answer.
func startNoop(grpcAddr, metricsAddr string, wait time.Duration) (*noopServer, error) {
	if wait < 0 {
		return nil, fmt.Errorf("--noop-wait %s: want 0 or more", wait)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(),
	)
	svc := &noopService{requests: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_noop_requests_total",
		Help: "ShouldRateLimit calls answered by the do-nothing RLS server.",
	}), wait: wait}
	reg.MustRegister(svc.requests)

	s := &noopServer{serveErr: make(chan error, 2)}
	var err error
	if s.grpcLis, err = net.Listen("tcp", grpcAddr); err != nil {
		return nil, fmt.Errorf("--serve-noop %s: %w", grpcAddr, err)
	}
	s.grpc = grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(s.grpc, svc)
	go func() { s.serveErr <- s.grpc.Serve(s.grpcLis) }()

	if metricsAddr != "" {
		if s.httpLis, err = net.Listen("tcp", metricsAddr); err != nil {
			s.grpc.Stop()
			return nil, fmt.Errorf("--noop-metrics-addr %s: %w", metricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
		s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := s.http.Serve(s.httpLis); !errors.Is(err, http.ErrServerClosed) {
				s.serveErr <- err
			}
		}()
	}
	return s, nil
}

// GRPCAddr is the address the RLS server listens on.
func (s *noopServer) GRPCAddr() string { return s.grpcLis.Addr().String() }

// MetricsAddr is the address of /metrics, or "" when there is none.
func (s *noopServer) MetricsAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// Err reports a server that stopped serving on its own.
func (s *noopServer) Err() <-chan error { return s.serveErr }

// Stop shuts both servers down, letting calls in flight finish for up to a
// few seconds.
func (s *noopServer) Stop() {
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		s.grpc.Stop()
	}
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = s.http.Shutdown(ctx)
	}
}
