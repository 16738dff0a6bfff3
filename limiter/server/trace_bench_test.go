package server_test

import (
	"context"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store/memory"
	"github.com/sluice-dev/sluice/limiter/tracing"
	"github.com/sluice-dev/sluice/limiter/tracing/otelsdk"
)

// discard is an exporter that drops what it is sent: the benchmark
// measures the limiter's cost of tracing, not a collector's.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkShouldRateLimitTracing is BenchmarkShouldRateLimit, each call
// under a caller's sampled traceparent in its gRPC metadata, with tracing
// off (the default), and on sampling 1% and 100% of decisions into the
// SDK's batch processor (an exporter that drops them).
//
//	go test ./limiter/server -run '^$' -bench ShouldRateLimitTracing -benchmem
func BenchmarkShouldRateLimitTracing(b *testing.B) {
	for _, c := range []struct {
		name  string
		on    bool
		ratio float64
	}{{"off", false, 0}, {"on-1pct", true, 0.01}, {"on-100pct", true, 1}} {
		b.Run(c.name, func(b *testing.B) {
			snap, err := config.Parse("inline", []byte(benchRLSPolicy))
			if err != nil {
				b.Fatal(err)
			}
			st := memory.New(memory.Options{})
			defer st.Close()
			var tr *tracing.Tracer
			if c.on {
				if tr, err = otelsdk.New(context.Background(), otelsdk.Options{SampleRatio: c.ratio, Exporter: discard{}}); err != nil {
					b.Fatal(err)
				}
				defer tr.Shutdown(context.Background())
			}
			svc := service.New(st, service.Options{Tracing: c.on})
			svc.Swap(snap)
			rls := server.NewRLS(svc, -1)
			rls.SetTracer(tr)
			req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{
				{Key: "user_id", Value: "user-42"}, {Key: "path", Value: "/v1/charges"}}}}}
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := rls.ShouldRateLimit(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
