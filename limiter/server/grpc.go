package server

import (
	"context"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

// RLSServiceName is the gRPC service Envoy calls; gRPC health reports it,
// and the empty name for the whole server, with the same status.
const RLSServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// newGRPCServer registers the RLS service and gRPC health on a new server.
func newGRPCServer(rls *RLS, hs *health.Server, m *metrics, opts Options) *grpc.Server {
	gs := grpc.NewServer(
		// Strings that are not UTF-8 are decoded, for the service to
		// refuse: an error would make Envoy fail open (codec.go).
		grpc.ForceServerCodecV2(newRLSCodec()),
		grpc.MaxConcurrentStreams(opts.MaxConcurrentStreams),
		grpc.MaxRecvMsgSize(int(opts.MaxBodyBytes)),
		// Gateways hold long-lived connections: ping idle ones so dead peers
		// are noticed, and cap connection age so that new limiter pods get a
		// share of the connections after a scale-up.
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge:      30 * time.Minute,
			MaxConnectionAgeGrace: 30 * time.Second,
			Time:                  30 * time.Second,
			Timeout:               10 * time.Second,
		}),
		// Envoy may ping as often as every few seconds, with no stream open.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             5 * time.Second,
			PermitWithoutStream: true,
		}),
		grpc.ChainUnaryInterceptor(observeUnary(m.grpc)),
		// Calls run on long-lived goroutines whose stacks have grown to
		// what a decision needs, not on a new goroutine each, which grows
		// (copies) its stack on every call that waits for the store;
		// gRPC starts a goroutine for a call when all are busy.
		grpc.NumStreamWorkers(streamWorkers),
	)
	rlsv3.RegisterRateLimitServiceServer(gs, rls)
	healthpb.RegisterHealthServer(gs, hs)
	return gs
}

// streamWorkers is how many goroutines answer gRPC calls (see
// grpc.NumStreamWorkers): enough for the calls a gateway keeps in flight
// to one limiter under load.
const streamWorkers = 128

// observeUnary times every unary call except health checks.
func observeUnary(o interface{ Observe(float64) }) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if strings.HasPrefix(info.FullMethod, "/grpc.health.") {
			return handler(ctx, req)
		}
		start := time.Now()
		resp, err := handler(ctx, req)
		o.Observe(time.Since(start).Seconds())
		return resp, err
	}
}

// setServing sets the health of the server and of the RLS service.
func setServing(hs *health.Server, serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	hs.SetServingStatus("", st)
	hs.SetServingStatus(RLSServiceName, st)
}
