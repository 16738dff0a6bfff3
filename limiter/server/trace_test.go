package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store/memory"
	"github.com/sluice-dev/sluice/limiter/tracing"
	"github.com/sluice-dev/sluice/limiter/tracing/otelsdk"
)

// Forward-auth, release and settle each make a server span in the
// caller's trace (the RLS call and the check are traced end to end by
// cmd/limiter's TestTracingSpanTree), forward-auth's with a store span
// per policy; none carries a header's value.
func TestTraceHTTPEntryPoints(t *testing.T) {
	snap, err := config.Parse("bench", []byte(benchPolicies))
	if err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tr, err := otelsdk.New(context.Background(), otelsdk.Options{SampleRatio: 1, Processor: sdktrace.NewSimpleSpanProcessor(exp)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	st := memory.New(memory.Options{})
	t.Cleanup(func() { _ = st.Close() })
	svc := newService(t, st, service.Options{Logger: slog.New(slog.DiscardHandler), Tracing: true})
	srv, err := server.New(svc, server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0",
		Logger: slog.New(slog.DiscardHandler), TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, Tracer: tr})
	if err != nil {
		t.Fatal(err)
	}
	srv.Swap(snap)
	const secret = "key-secret-4242"
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	for i, c := range []struct {
		span, method, path, body string
		stores                   int
	}{
		{tracing.SpanForwardAuth, http.MethodGet, server.ForwardAuthPath + "bench", "", 2},
		{tracing.SpanRelease, http.MethodPost, server.ReleasePath, `{"domain":"bench","descriptors":[{"entries":[{"key":"api_key","value":"` + secret + `"}]}],"lease":"not-a-lease"}`, 0},
		{tracing.SpanSettle, http.MethodPost, server.SettlePath, `{"domain":"bench","descriptors":[{"entries":[{"key":"api_key","value":"` + secret + `"}]}],"lease":"not-a-lease","cost":1}`, 0},
	} {
		exp.Reset()
		parent := fmt.Sprintf("%016x", i+1)
		r := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
		r.RemoteAddr = "127.0.0.1:4242"
		r.Header.Set("X-Api-Key", secret)
		r.Header.Set("Traceparent", "00-"+traceID+"-"+parent+"-01")
		w := httptest.NewRecorder()
		srv.Handler().ServeHTTP(w, r)
		spans := exp.GetSpans()
		var root *tracetest.SpanStub
		stores := 0
		for i := range spans {
			switch spans[i].Name {
			case c.span:
				root = &spans[i]
			case tracing.SpanStore:
				stores++
			}
			for _, kv := range spans[i].Attributes {
				if strings.Contains(kv.Value.Emit(), secret) {
					t.Errorf("%s: span %s attribute %s carries the client's value", c.span, spans[i].Name, kv.Key)
				}
			}
		}
		if root == nil {
			t.Fatalf("%s (answered %d): no such span among %d", c.span, w.Code, len(spans))
		}
		if root.Parent.TraceID().String() != traceID || root.Parent.SpanID().String() != parent || !root.Parent.IsRemote() {
			t.Errorf("%s: parent %v, want the caller's span %s in trace %s", c.span, root.Parent, parent, traceID)
		}
		if stores != c.stores {
			t.Errorf("%s: %d store spans, want %d", c.span, stores, c.stores)
		}
	}
}
