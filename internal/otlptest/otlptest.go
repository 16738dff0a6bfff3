// Package otlptest is an OTLP/gRPC trace receiver for tests: the
// collector's TraceService, on an address of its own, keeping every span
// it is sent with its resource's attributes.
package otlptest

import (
	"context"
	"encoding/hex"
	"net"
	"slices"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Span is a span received, with its resource's string attributes.
type Span struct {
	*tracepb.Span
	Resource map[string]string
}

// Receiver receives spans until the test ends.
type Receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	// Addr is where it listens, host:port.
	Addr string

	mu    sync.Mutex
	spans []Span
}

// Start serves a Receiver on host (127.0.0.1 when empty), a port of its
// own, until the test ends.
func Start(t testing.TB, host string) *Receiver {
	t.Helper()
	if host == "" {
		host = "127.0.0.1"
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{Addr: lis.Addr().String()}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, r)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return r
}

// Export keeps the spans of req.
func (r *Receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r.spans = append(r.spans, Span{Span: sp, Resource: res})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// Received is every span received so far, in order.
func (r *Receiver) Received() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// Spans is every span received so far, without resources.
func (r *Receiver) Spans() []*tracepb.Span {
	var out []*tracepb.Span
	for _, sp := range r.Received() {
		out = append(out, sp.Span)
	}
	return out
}

// Trace is the spans received of trace id (hex).
func (r *Receiver) Trace(id string) []*tracepb.Span {
	var out []*tracepb.Span
	for _, sp := range r.Spans() {
		if hex.EncodeToString(sp.GetTraceId()) == id {
			out = append(out, sp)
		}
	}
	return out
}
