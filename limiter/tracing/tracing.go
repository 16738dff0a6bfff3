// Package tracing is the limiter's OpenTelemetry tracing: a span per
// decision, started where a request enters the limiter (limiter/server),
// continuing the caller's W3C traceparent, and child spans for the calls to
// the counter store (limiter/service, annotated by limiter/store/redis).
//
// It is off unless a Tracer is made (--tracing). Off, a nil *Tracer starts
// nothing, and its Span is a zero value whose methods return at once: the
// request path pays a nil check, and no allocation.
//
// What a client sends can't make the limiter trace more, or export more:
//
//   - Sampling is this process's own draw, at Options.SampleRatio. The
//     client's sampled flag is not trusted, nor is its trace ID (which the
//     SDK's TraceIDRatioBased sampler reads, and a client chooses): a
//     parent-based sampler would let any client force every one of its
//     requests into the export. A span continues the caller's trace ID and
//     parent span ID, sampled or not.
//   - Only traceparent is read, and only when it is one value of at most
//     MaxTraceparentLen bytes; tracestate and baggage are dropped, so no
//     client bytes ride along on exported spans. A malformed traceparent
//     starts a new trace.
//   - Spans carry no descriptor value (see limiter/server's trace.go), and
//     the batch processor's queue is bounded: past it, spans are dropped,
//     never waited for.
package tracing

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Names of the limiter's spans.
const (
	SpanRLS         = "sluice.rls"          // Envoy RLS ShouldRateLimit
	SpanCheck       = "sluice.check"        // POST /v1/ratelimit/check
	SpanForwardAuth = "sluice.forward_auth" // /v1/forward-auth/{domain}
	SpanRelease     = "sluice.release"      // POST /v1/ratelimit/release
	SpanSettle      = "sluice.settle"       // POST /v1/ratelimit/settle
	SpanStore       = "sluice.store"        // one policy's call to the counter store
)

// MaxTraceparentLen is the longest traceparent read. Version 00 is 55
// bytes; a later version may append fields, which a version-00 reader
// ignores.
const MaxTraceparentLen = 128

// DefaultServiceName is service.name unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES say otherwise.
const DefaultServiceName = "sluice-limiter"

const scope = "github.com/sluice-dev/sluice/limiter"

// Options configure a Tracer.
type Options struct {
	// SampleRatio is the share of decisions traced, 0 to 1, drawn by this
	// process (see the package comment).
	SampleRatio float64
	// Exporter receives the sampled spans; nil means OTLP over gRPC,
	// configured by the standard OTEL_EXPORTER_OTLP_* variables.
	Exporter sdktrace.SpanExporter
	// Processor, when set, is used instead of a batch processor over
	// Exporter (benchmarks and tests).
	Processor sdktrace.SpanProcessor
}

// Tracer starts the limiter's spans. A nil *Tracer is tracing off.
type Tracer struct {
	tp      *sdktrace.TracerProvider
	tr      trace.Tracer
	sampler sampler
}

// New returns a Tracer exporting what it samples. The resource comes
// from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; the batch processor
// reads OTEL_BSP_*.
func New(ctx context.Context, opts Options) (*Tracer, error) {
	if opts.SampleRatio < 0 || opts.SampleRatio > 1 || math.IsNaN(opts.SampleRatio) {
		return nil, fmt.Errorf("tracing: sample ratio %v: want 0 to 1", opts.SampleRatio)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", DefaultServiceName)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	sp := opts.Processor
	if sp == nil {
		exp := opts.Exporter
		if exp == nil {
			if exp, err = otlptracegrpc.New(ctx); err != nil {
				return nil, fmt.Errorf("tracing: OTLP exporter from OTEL_EXPORTER_OTLP_*: %w", err)
			}
		}
		sp = sdktrace.NewBatchSpanProcessor(exp)
	}
	// Start draws (see sampler.draw) before it reads a traceparent or
	// starts a span, so that an unsampled decision costs one draw; the
	// provider's sampler then takes what Start starts.
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSpanProcessor(sp),
		sdktrace.WithSampler(NewSampler(1)))
	return &Tracer{tp: tp, tr: tp.Tracer(scope), sampler: NewSampler(opts.SampleRatio).(sampler)}, nil
}

// Shutdown exports what is queued and stops the exporter. Nil-safe.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// Start starts the server span name of a request whose caller sent the
// traceparent header values traceparent (see ExtractParent), and returns
// ctx with it, for a share SampleRatio of its calls. Otherwise, and for a
// nil Tracer, it starts nothing and returns ctx and a zero Span: read the
// header only when t is not nil.
func (t *Tracer) Start(ctx context.Context, name string, traceparent []string) (context.Context, Span) {
	if !t.Sampled() {
		return ctx, Span{}
	}
	return t.StartSampled(ctx, name, traceparent)
}

// Sampled draws whether to trace a decision: true for a share SampleRatio
// of its calls; false for a nil Tracer. Read the caller's traceparent, and
// call StartSampled, only when it is true.
func (t *Tracer) Sampled() bool { return t != nil && t.sampler.draw() }

// StartSampled is Start for a decision Sampled drew.
func (t *Tracer) StartSampled(ctx context.Context, name string, traceparent []string) (context.Context, Span) {
	if psc, ok := ExtractParent(traceparent); ok {
		ctx = trace.ContextWithRemoteSpanContext(ctx, psc)
	}
	ctx, sp := t.tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
	if !sp.IsRecording() {
		return ctx, Span{}
	}
	return ctx, Span{sp: sp}
}

var traceContext = propagation.TraceContext{}

// ExtractParent reads a caller's span context from the values of its
// traceparent header: one value, at most MaxTraceparentLen bytes, in the
// W3C format. Anything else is no parent.
func ExtractParent(values []string) (trace.SpanContext, bool) {
	if len(values) != 1 || len(values[0]) > MaxTraceparentLen {
		return trace.SpanContext{}, false
	}
	ctx := traceContext.Extract(context.Background(), onlyTraceparent(values[0]))
	sc := trace.SpanContextFromContext(ctx)
	return sc, sc.IsValid()
}

// onlyTraceparent is a carrier with a traceparent and nothing else: no
// tracestate.
type onlyTraceparent string

func (c onlyTraceparent) Get(key string) string {
	if key == "traceparent" {
		return string(c)
	}
	return ""
}
func (onlyTraceparent) Set(string, string) {}
func (onlyTraceparent) Keys() []string     { return []string{"traceparent"} }

// StartStore starts a child span for a call to the counter store, when
// ctx's span is recording; otherwise it returns ctx and a zero Span.
func StartStore(ctx context.Context) (context.Context, Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, Span{}
	}
	ctx, sp := parent.TracerProvider().Tracer(scope).Start(ctx, SpanStore, trace.WithSpanKind(trace.SpanKindClient))
	return ctx, Span{sp: sp}
}

// FromContext is ctx's span when it is recording, else a zero Span: how
// a store adds what it knows to the span of its call.
func FromContext(ctx context.Context) Span {
	if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
		return Span{sp: sp}
	}
	return Span{}
}

// Span is a recording span, or the zero Span, whose methods do nothing.
type Span struct{ sp trace.Span }

// Recording reports whether s records: build attributes only then.
func (s Span) Recording() bool { return s.sp != nil }

// Set sets attributes of s.
func (s Span) Set(kv ...attribute.KeyValue) {
	if s.sp != nil {
		s.sp.SetAttributes(kv...)
	}
}

// Fail marks s failed with err.
func (s Span) Fail(err error) {
	if s.sp != nil && err != nil {
		s.sp.RecordError(err)
		s.sp.SetStatus(codes.Error, err.Error())
	}
}

// End ends s.
func (s Span) End() {
	if s.sp != nil {
		s.sp.End()
	}
}

// Sampler samples a share ratio of root spans and of spans under a
// remote parent, by its own draw: the parent's sampled flag and the trace
// ID, both the caller's choice, count for nothing. A child of a local
// span follows it, so a decision's spans are exported together or not at
// all.
func NewSampler(ratio float64) sdktrace.Sampler {
	s := sampler{ratio: ratio}
	switch {
	case ratio >= 1:
		s.bound = math.MaxUint64
	case ratio > 0:
		s.bound = uint64(ratio * (1 << 63) * 2)
	}
	return s
}

type sampler struct {
	ratio float64
	bound uint64 // sample when a draw is below it; 0 never
}

func (s sampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	psc := trace.SpanContextFromContext(p.ParentContext)
	var sample bool
	if psc.IsValid() && !psc.IsRemote() {
		sample = psc.IsSampled()
	} else {
		sample = s.draw()
	}
	if !sample {
		return sdktrace.SamplingResult{Decision: sdktrace.Drop}
	}
	return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
}

// draw is true for a share ratio of its calls.
func (s sampler) draw() bool {
	return s.bound == math.MaxUint64 || (s.bound > 0 && rand.Uint64() < s.bound)
}

func (s sampler) Description() string {
	return fmt.Sprintf("SluiceLocalRatio{%g}", s.ratio)
}
