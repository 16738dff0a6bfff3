// Package otelsdk makes the limiter's tracer with OpenTelemetry's SDK: the
// provider, its batch processor over an exporter the caller gives
// (limiter/app gives OTLP over gRPC), its resource, and a sampler that
// trusts nothing a caller sends (see limiter/tracing's package comment).
// limiter/tracing, which the service and the stores link, holds only the
// trace API.
package otelsdk

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/limiter/tracing"
)

// Options configure a Tracer.
type Options struct {
	// SampleRatio is the share of decisions traced, 0 to 1, drawn by this
	// process (see limiter/tracing's package comment).
	SampleRatio float64
	// Exporter receives the sampled spans, through a batch processor.
	Exporter sdktrace.SpanExporter
	// Processor, when set, is used instead of a batch processor over
	// Exporter (benchmarks and tests).
	Processor sdktrace.SpanProcessor
}

// New returns a Tracer exporting what it samples. The resource comes
// from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; the batch processor
// reads OTEL_BSP_*.
func New(ctx context.Context, opts Options) (*tracing.Tracer, error) {
	if _, err := tracing.NewRatio(opts.SampleRatio); err != nil {
		return nil, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", tracing.DefaultServiceName)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	sp := opts.Processor
	if sp == nil {
		if opts.Exporter == nil {
			return nil, errors.New("tracing: no exporter and no span processor")
		}
		sp = sdktrace.NewBatchSpanProcessor(opts.Exporter)
	}
	// Tracer.Start draws (Sampled) before it reads a traceparent or
	// starts a span, so that an unsampled decision costs one draw; the
	// provider's sampler then takes what Start starts.
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSpanProcessor(sp),
		sdktrace.WithSampler(NewSampler(1)))
	return tracing.NewTracer(tp, opts.SampleRatio, tp.Shutdown)
}

// Sampler samples a share ratio of root spans and of spans under a
// remote parent, by its own draw: the parent's sampled flag and the trace
// ID, both the caller's choice, count for nothing. A child of a local
// span follows it, so a decision's spans are exported together or not at
// all.
func NewSampler(ratio float64) sdktrace.Sampler {
	r, err := tracing.NewRatio(ratio)
	if err != nil {
		r, _ = tracing.NewRatio(0)
	}
	return sampler{r}
}

type sampler struct{ tracing.Ratio }

func (s sampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	psc := trace.SpanContextFromContext(p.ParentContext)
	var sample bool
	if psc.IsValid() && !psc.IsRemote() {
		sample = psc.IsSampled()
	} else {
		sample = s.Draw()
	}
	if !sample {
		return sdktrace.SamplingResult{Decision: sdktrace.Drop}
	}
	return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
}

func (s sampler) Description() string { return s.String() }
