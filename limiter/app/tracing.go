package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/limiter/tracing"
)

// tracerShutdownTimeout bounds the export of the spans still queued when
// the limiter stops.
const tracerShutdownTimeout = 5 * time.Second

// openTracer makes the limiter's tracer with cfg.Tracing, else returns
// nil: tracing off.
func openTracer(ctx context.Context, cfg Config, log *slog.Logger) (*tracing.Tracer, error) {
	if !cfg.Tracing {
		return nil, nil
	}
	t, err := tracing.New(ctx, tracing.Options{SampleRatio: cfg.TraceSampleRatio})
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
