package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"

	"github.com/sluice-dev/sluice/limiter/tracing"
	"github.com/sluice-dev/sluice/limiter/tracing/otelsdk"
)

// tracerShutdownTimeout bounds the export of the spans still queued when
// the limiter stops.
const tracerShutdownTimeout = 5 * time.Second

// openTracer makes the limiter's tracer with cfg.Tracing, exporting over
// OTLP/gRPC as the OTEL_EXPORTER_OTLP_* variables say, else returns nil:
// tracing off.
func openTracer(ctx context.Context, cfg Config, log *slog.Logger) (*tracing.Tracer, error) {
	if !cfg.Tracing {
		return nil, nil
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter from OTEL_EXPORTER_OTLP_*: %w", err)
	}
	t, err := otelsdk.New(ctx, otelsdk.Options{SampleRatio: cfg.TraceSampleRatio, Exporter: exp})
	if err != nil {
		return nil, err
	}
	log.Info("Tracing decisions", "sampleRatio", cfg.TraceSampleRatio)
	return t, nil
}

// shutdownTracer exports the spans still queued, within
// tracerShutdownTimeout.
func shutdownTracer(t *tracing.Tracer, log *slog.Logger) {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), tracerShutdownTimeout)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("Exporting the last spans", "error", err)
	}
}
