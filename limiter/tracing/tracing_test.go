package tracing_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/limiter/tracing"
)

func TestExtractParent(t *testing.T) {
	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, c := range []struct {
		name   string
		values []string
		ok     bool
	}{
		{"valid", []string{valid}, true},
		{"unsampled", []string{strings.TrimSuffix(valid, "01") + "00"}, true},
		{"later version with fields", []string{"01" + valid[2:] + "-more"}, true},
		{"none", nil, false},
		{"repeated", []string{valid, valid}, false},
		// The W3C parser takes a later version of any length.
		{"huge", []string{"01" + valid[2:] + "-" + strings.Repeat("a", 8<<10)}, false},
		{"just over the cap", []string{"01" + valid[2:] + "-" + strings.Repeat("a", tracing.MaxTraceparentLen-len(valid))}, false},
		{"malformed span ID", []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-zzzz-01"}, false},
		{"zero trace ID", []string{"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, false},
		{"version 00 too long", []string{valid + "-x"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc, ok := tracing.ExtractParent(c.values)
			if ok != c.ok {
				t.Fatalf("ExtractParent ok %v, want %v (%v)", ok, c.ok, sc)
			}
			if ok && (sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || !sc.IsRemote() || sc.TraceState().Len() != 0) {
				t.Errorf("ExtractParent %v, want the caller's trace, remote, no trace state", sc)
			}
		})
	}
}

// Off, a nil Tracer starts nothing and costs no allocation.
func TestNilTracer(t *testing.T) {
	var tr *tracing.Tracer
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		c, sp := tr.Start(ctx, tracing.SpanRLS, nil)
		sp.End()
		if c != ctx || sp.Recording() {
			t.Fatal("a nil Tracer started a span")
		}
	})
	if allocs != 0 {
		t.Errorf("a nil Tracer allocates %v per span", allocs)
	}
	if err := tr.Shutdown(ctx); err != nil {
		t.Error(err)
	}
}

func TestNewRatioRejects(t *testing.T) {
	for _, r := range []float64{-0.1, 1.5} {
		if _, err := tracing.NewRatio(r); err == nil || !strings.Contains(err.Error(), "want 0 to 1") {
			t.Errorf("ratio %v: %v, want an error naming the range", r, err)
		}
	}
}

// The service and the stores link this package: it holds the trace API
// only, no SDK and no exporter (limiter/app wires OTLP's).
func TestTracingLinksNoSDK(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".", "../service", "../store/redis").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "go.opentelemetry.io/otel/sdk") || strings.HasPrefix(pkg, "go.opentelemetry.io/otel/exporters") {
			t.Errorf("limiter/tracing, service or store/redis links %s", pkg)
		}
	}
}
