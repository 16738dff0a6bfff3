package otelsdk_test

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/limiter/tracing"
	"github.com/sluice-dev/sluice/limiter/tracing/otelsdk"
)

// hostileParent is a remote parent as a flooding client sends it: sampled,
// with a trace ID whose low 8 bytes are zero, which TraceIDRatioBased
// samples at any ratio above 0.
func hostileParent(i int) context.Context {
	var tid trace.TraceID
	binary.BigEndian.PutUint64(tid[:8], uint64(i+1))
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, Remote: true})
	return trace.ContextWithRemoteSpanContext(context.Background(), sc)
}

func sampled(s sdktrace.Sampler, n int) int {
	count := 0
	for i := range n {
		ctx := hostileParent(i)
		r := s.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: trace.SpanContextFromContext(ctx).TraceID(), Name: tracing.SpanRLS})
		if r.Decision == sdktrace.RecordAndSample {
			count++
		}
	}
	return count
}

// TestAttackSampledFlag: 10,000 requests that each claim a sampled parent,
// with trace IDs chosen to pass a trace-ID ratio, are sampled at the
// configured 1% (within a bound that a fair draw passes but for a chance
// below 1e-9), where the SDK's parent-based sampler samples every one.
func TestAttackSampledFlag(t *testing.T) {
	const n = 10_000
	if got := sampled(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01)), n); got != n {
		t.Fatalf("the SDK's parent-based sampler sampled %d of %d flagged parents; the attack this test guards against needs all", got, n)
	}
	if got := sampled(sdktrace.TraceIDRatioBased(0.01), n); got != n {
		t.Fatalf("the SDK's trace-ID ratio sampled %d of %d chosen trace IDs; the attack this test guards against needs all", got, n)
	}
	got := sampled(otelsdk.NewSampler(0.01), n)
	if got > 250 || got < 20 {
		t.Fatalf("sampled %d of %d flagged parents at ratio 0.01: want about 100", got, n)
	}
	t.Logf("sampled %d of %d flagged parents at ratio 0.01", got, n)
	if got := sampled(otelsdk.NewSampler(0), n); got != 0 {
		t.Errorf("ratio 0 sampled %d", got)
	}
	if got := sampled(otelsdk.NewSampler(1), n); got != n {
		t.Errorf("ratio 1 sampled %d of %d", got, n)
	}
}

// A local parent is followed: a decision's store spans are exported with
// it or not at all.
func TestSamplerFollowsLocalParent(t *testing.T) {
	s := otelsdk.NewSampler(0)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	if r := s.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: sc.TraceID()}); r.Decision != sdktrace.RecordAndSample {
		t.Errorf("child of a sampled local span: %v, want sampled", r.Decision)
	}
}

func TestNewRejectsRatio(t *testing.T) {
	for _, r := range []float64{-0.1, 1.5} {
		if _, err := otelsdk.New(context.Background(), otelsdk.Options{SampleRatio: r}); err == nil || !strings.Contains(err.Error(), "want 0 to 1") {
			t.Errorf("ratio %v: %v, want an error naming the range", r, err)
		}
	}
	if _, err := otelsdk.New(context.Background(), otelsdk.Options{SampleRatio: 1}); err == nil || !strings.Contains(err.Error(), "no exporter") {
		t.Errorf("no exporter: %v, want an error saying so", err)
	}
}
