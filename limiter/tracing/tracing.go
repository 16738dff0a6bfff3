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
	"go.opentelemetry.io/otel/propagation"
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

// Tracer starts the limiter's spans. A nil *Tracer is tracing off.
type Tracer struct {
	tr       trace.Tracer
	ratio    Ratio
	shutdown func(context.Context) error
}

// NewTracer returns a Tracer that starts its spans with tp's tracers, for
// a share ratio of the decisions (see Sampled); shutdown, if not nil,
// exports what is queued and stops the exporter. limiter/tracing/otelsdk
// makes tp (the SDK) and limiter/app its exporter: this package, which the
// service and the stores link, holds only the trace API.
func NewTracer(tp trace.TracerProvider, ratio float64, shutdown func(context.Context) error) (*Tracer, error) {
	r, err := NewRatio(ratio)
	if err != nil {
		return nil, err
	}
	return &Tracer{tr: tp.Tracer(scope), ratio: r, shutdown: shutdown}, nil
}

// Shutdown exports what is queued and stops the exporter. Nil-safe.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil || t.shutdown == nil {
		return nil
	}
	return t.shutdown(ctx)
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
func (t *Tracer) Sampled() bool { return t != nil && t.ratio.Draw() }

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

// Ratio draws true for a share of its calls, by this process's own
// random numbers: nothing a caller sends counts.
type Ratio struct {
	ratio float64
	bound uint64 // true when a draw is below it; 0 never
}

// NewRatio is a Ratio drawing true for a share ratio, 0 to 1.
func NewRatio(ratio float64) (Ratio, error) {
	if ratio < 0 || ratio > 1 || math.IsNaN(ratio) {
		return Ratio{}, fmt.Errorf("tracing: sample ratio %v: want 0 to 1", ratio)
	}
	r := Ratio{ratio: ratio}
	switch {
	case ratio >= 1:
		r.bound = math.MaxUint64
	case ratio > 0:
		r.bound = uint64(ratio * (1 << 63) * 2)
	}
	return r, nil
}

// Draw is true for a share ratio of its calls.
func (r Ratio) Draw() bool {
	return r.bound == math.MaxUint64 || (r.bound > 0 && rand.Uint64() < r.bound)
}

// String names the ratio, as a sampler's description.
func (r Ratio) String() string { return fmt.Sprintf("SluiceLocalRatio{%g}", r.ratio) }
