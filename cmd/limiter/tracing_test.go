package main_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-dev/sluice/internal/otlptest"
	"github.com/sluice-dev/sluice/internal/redistest"
)

// otlpReceiver is the tests' OTLP/gRPC trace receiver.
type otlpReceiver struct{ *otlptest.Receiver }

func startReceiver(t *testing.T) otlpReceiver { return otlpReceiver{otlptest.Start(t, "")} }

// snapshot is what the receiver has got so far, and the service.name of
// the last span that had one.
func (r otlpReceiver) snapshot() ([]*tracepb.Span, string) {
	service := ""
	for _, sp := range r.Received() {
		if n := sp.Resource["service.name"]; n != "" {
			service = n
		}
	}
	return r.Spans(), service
}

// env points a limiter's OTLP exporter at r, flushing every 100ms.
func (r otlpReceiver) env() []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + r.Addr, "OTEL_BSP_SCHEDULE_DELAY=100",
		"OTEL_SERVICE_NAME=sluice-test", "OTEL_TRACES_SAMPLER=parentbased_always_on"}
}

func attr(sp *tracepb.Span, key string) *commonpb.AnyValue {
	for _, kv := range sp.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}

func strs(v *commonpb.AnyValue) []string {
	var out []string
	for _, x := range v.GetArrayValue().GetValues() {
		out = append(out, x.GetStringValue())
	}
	return out
}

func describe(spans []*tracepb.Span) string {
	var b strings.Builder
	for _, sp := range spans {
		fmt.Fprintf(&b, "\n  %s trace=%x span=%x parent=%x attrs=%v", sp.GetName(), sp.GetTraceId(), sp.GetSpanId(), sp.GetParentSpanId(), sp.GetAttributes())
	}
	return b.String()
}

const tracedPolicies = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-user, namespace: shop}
spec:
  domain: shop
  descriptors: [{key: user}]
  algorithm: TokenBucket
  rate: {limit: 1, period: 1h}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-tenant, namespace: shop}
spec:
  domain: shop
  descriptors: [{key: tenant}]
  algorithm: FixedWindow
  rate: {limit: 100, period: 24h}
`

// tracedLimiter starts a limiter on Redis, tracing at ratio into r.
func tracedLimiter(t *testing.T, r otlpReceiver, ratio string) (*process, rlsv3.RateLimitServiceClient) {
	t.Helper()
	rs := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(path, []byte(tracedPolicies), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startLimiterEnv(t, r.env(), "--policies", path, "--store", "redis://"+rs.Addr, "--redis-timeout", "2s",
		"--tracing", "--trace-sample-ratio", ratio)
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return p, rlsv3.NewRateLimitServiceClient(conn)
}

func rlsWith(t *testing.T, c rlsv3.RateLimitServiceClient, domain, user string, md ...string) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(context.Background(), md...)
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}},
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// One RLS decision and one HTTP check, each under a caller's traceparent,
// reach a real OTLP receiver from a real limiter process as a tree: the
// decision's span is the caller's span's child in the caller's trace, and
// each policy's store call its child, with the Redis shard, breaker state,
// script and sends. No span carries the descriptor's value or the
// caller's tracestate.
func TestTracingSpanTree(t *testing.T) {
	recv := startReceiver(t)
	p, rls := tracedLimiter(t, recv, "1")
	const secret = "alice-secret-4242"
	traceID, callerSpan := "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	resp := rlsWith(t, rls, "shop", secret, "traceparent", "00-"+traceID+"-"+callerSpan+"-01",
		"tracestate", "evil="+strings.Repeat("x", 200))
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first request: %v, want OK", resp.GetOverallCode())
	}
	// The second is over per-user's limit of 1, and asks over HTTP.
	checkTrace, checkParent := "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	req, _ := http.NewRequest(http.MethodPost, p.http+"/v1/ratelimit/check",
		strings.NewReader(`{"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"`+secret+`"}]},{"entries":[{"key":"tenant","value":"acme"}]}]}`))
	req.Header.Set("Traceparent", "00-"+checkTrace+"-"+checkParent+"-01")
	hresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = hresp.Body.Close()
	if hresp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second request: %d, want 429", hresp.StatusCode)
	}

	var spans []*tracepb.Span
	eventually(t, "both decisions and their four store calls exported", func() (bool, string) {
		spans, _ = recv.snapshot()
		return len(spans) >= 6, describe(spans)
	})
	_, service := recv.snapshot()
	if service != "sluice-test" {
		t.Errorf("service.name %q, want OTEL_SERVICE_NAME's sluice-test", service)
	}
	for _, c := range []struct {
		name, trace, parent, result string
		denied                      []string
	}{
		{"sluice.rls", traceID, callerSpan, "ok", nil},
		{"sluice.check", checkTrace, checkParent, "over_limit", []string{"shop/per-user"}},
	} {
		var root *tracepb.Span
		for _, sp := range spans {
			if sp.GetName() == c.name {
				root = sp
			}
		}
		if root == nil {
			t.Fatalf("no %s span:%s", c.name, describe(spans))
		}
		if got := hex.EncodeToString(root.GetTraceId()); got != c.trace {
			t.Errorf("%s: trace %s, want the caller's %s", c.name, got, c.trace)
		}
		if got := hex.EncodeToString(root.GetParentSpanId()); got != c.parent {
			t.Errorf("%s: parent %s, want the caller's span %s", c.name, got, c.parent)
		}
		if root.GetTraceState() != "" {
			t.Errorf("%s: trace state %q, want none (the caller's is dropped)", c.name, root.GetTraceState())
		}
		if root.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
			t.Errorf("%s: kind %v, want server", c.name, root.GetKind())
		}
		if got := attr(root, "sluice.domain").GetStringValue(); got != "shop" {
			t.Errorf("%s: sluice.domain %q, want shop", c.name, got)
		}
		if got := attr(root, "sluice.result").GetStringValue(); got != c.result {
			t.Errorf("%s: sluice.result %q, want %s", c.name, got, c.result)
		}
		if got := strs(attr(root, "sluice.denied_policies")); !slices.Equal(got, c.denied) {
			t.Errorf("%s: sluice.denied_policies %q, want %q", c.name, got, c.denied)
		}
		var policies []string
		for _, sp := range spans {
			if !slices.Equal(sp.GetParentSpanId(), root.GetSpanId()) {
				continue
			}
			if sp.GetName() != "sluice.store" || !slices.Equal(sp.GetTraceId(), root.GetTraceId()) {
				t.Errorf("%s: child %s in trace %x, want sluice.store in the same trace", c.name, sp.GetName(), sp.GetTraceId())
			}
			policies = append(policies, attr(sp, "sluice.policy").GetStringValue())
			// The shard as the breaker metrics name it: a standalone
			// server is one shard.
			if got := attr(sp, "redis.shard").GetStringValue(); got != "standalone" {
				t.Errorf("%s: store call's redis.shard %q, want standalone", c.name, got)
			}
			if got := attr(sp, "redis.breaker").GetStringValue(); got != "closed" {
				t.Errorf("%s: store call's redis.breaker %q, want closed", c.name, got)
			}
			if got := attr(sp, "redis.sends").GetIntValue(); got < 1 {
				t.Errorf("%s: store call's redis.sends %d, want at least 1", c.name, got)
			}
			if got := attr(sp, "redis.script").GetStringValue(); !strings.HasPrefix(got, "take/") {
				t.Errorf("%s: store call's redis.script %q, want take/<algorithm>", c.name, got)
			}
		}
		slices.Sort(policies)
		if want := []string{"shop/per-tenant", "shop/per-user"}; !slices.Equal(policies, want) {
			t.Errorf("%s: store calls of %q, want one per matched policy %q:%s", c.name, policies, want, describe(spans))
		}
	}
	for _, sp := range spans {
		if strings.Contains(sp.String(), secret) {
			t.Errorf("span %s carries the descriptor value %q: %v", sp.GetName(), secret, sp)
		}
	}
}

// TestAttackTraceparent: a client's traceparent steers neither what the
// limiter samples nor what it exports. A sampled flag on every request,
// with trace IDs the SDK's TraceIDRatioBased sampler would always sample,
// gets no more than the configured 1% exported (a parent-based sampler
// would export every one of them); a traceparent of a later version
// padded to 8KB, which the W3C parser would accept, and a malformed one
// start traces of their own.
func TestAttackTraceparent(t *testing.T) {
	recv := startReceiver(t)
	p, rls := tracedLimiter(t, recv, "0.01")
	const n = 300
	for i := range n {
		// The low 8 bytes of the trace ID are what TraceIDRatioBased
		// compares with its bound: zeros pass any bound.
		tid := fmt.Sprintf("%016x0000000000000000", i+1)
		rlsWith(t, rls, "flood", "u", "traceparent", "00-"+tid+"-00f067aa0ba902b7-01")
	}
	p.stop(t) // flushes what was sampled
	spans, _ := recv.snapshot()
	if len(spans) > n/10 {
		t.Fatalf("%d of %d flagged requests exported at a 1%% sample ratio: the client's sampled flag decides", len(spans), n)
	}
	t.Logf("%d of %d requests with a sampled traceparent exported at ratio 0.01", len(spans), n)

	recv2 := startReceiver(t)
	_, rls2 := tracedLimiter(t, recv2, "1")
	hugeParent := "00f067aa0ba902b7"
	huge := "01-4bf92f3577b34da6a3ce929d0e0e4736-" + hugeParent + "-01-" + strings.Repeat("a", 8<<10)
	rlsWith(t, rls2, "huge", "u", "traceparent", huge)
	rlsWith(t, rls2, "malformed", "u", "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-zzzz-01")
	rlsWith(t, rls2, "repeated", "u", "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-"+hugeParent+"-01",
		"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-"+hugeParent+"-01")
	var found map[string]*tracepb.Span
	eventually(t, "the three requests' spans exported", func() (bool, string) {
		spans, _ := recv2.snapshot()
		found = map[string]*tracepb.Span{}
		for _, sp := range spans {
			if d := attr(sp, "sluice.domain").GetStringValue(); d != "" {
				found[d] = sp
			}
		}
		return len(found) == 3, describe(spans)
	})
	for d, sp := range found {
		if len(sp.GetParentSpanId()) != 0 || hex.EncodeToString(sp.GetTraceId()) == "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("%s traceparent: span continues trace %x under %x, want a trace of its own", d, sp.GetTraceId(), sp.GetParentSpanId())
		}
	}
}
