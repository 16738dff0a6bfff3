package service_test

import (
	"context"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/memory"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
	"github.com/sluice-dev/sluice/limiter/store/redis/redistest"
)

func load(t testing.TB) *config.Snapshot {
	t.Helper()
	snap, err := config.LoadFile("testdata/policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func newService(t testing.TB, st store.Store) (*service.Service, *prometheus.Registry) {
	t.Helper()
	if st == nil {
		m := memory.New(memory.Options{})
		t.Cleanup(func() { _ = m.Close() })
		st = m
	}
	reg := prometheus.NewRegistry()
	svc := service.New(st, service.Options{Registerer: reg, RetryAfterJitter: -1})
	t.Cleanup(func() { _ = svc.Close() })
	svc.Swap(load(t))
	return svc, reg
}

// desc builds a descriptor from key=value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func call(t *testing.T, svc *service.Service, domain string, hits uint32, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func header(resp *rlsv3.RateLimitResponse, name string) string {
	for _, h := range resp.ResponseHeadersToAdd {
		if h.Key == name {
			return h.Value
		}
	}
	return ""
}

func decisions(t *testing.T, reg *prometheus.Registry, policy, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_decisions_total" {
			continue
		}
		for _, m := range mf.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["policy"] == policy && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestUnknownDomainAndUnmatchedAreOK(t *testing.T) {
	svc, _ := newService(t, nil)
	for _, tc := range []struct {
		domain string
		d      *rlv3.RateLimitDescriptor
	}{
		{"nope", desc("user", "a")},
		{"shop", desc("nobody", "a")},
		{"shop", desc("path", "/checkout")}, // lacks user
	} {
		resp := call(t, svc, tc.domain, 0, tc.d)
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil || len(resp.ResponseHeadersToAdd) != 0 {
			t.Errorf("%s %v: %v", tc.domain, tc.d, resp)
		}
	}
}

func TestLimitThenOverLimitWithHeaders(t *testing.T) {
	svc, reg := newService(t, nil)
	for i := range 5 {
		resp := call(t, svc, "shop", 0, desc("user", "ann"))
		if resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d: %v", i, resp.OverallCode)
		}
		st := resp.Statuses[0]
		if st.CurrentLimit.GetRequestsPerUnit() != 5 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR ||
			st.LimitRemaining != uint32(4-i) || st.CurrentLimit.GetName() != "shop/per-user" {
			t.Fatalf("request %d: status %v", i, st)
		}
		if got := header(resp, "X-RateLimit-Remaining"); got != string(rune('4'-i)) {
			t.Fatalf("request %d: X-RateLimit-Remaining %q", i, got)
		}
	}
	resp := call(t, svc, "shop", 0, desc("user", "ann"))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("6th request: %v", resp)
	}
	if d := resp.Statuses[0].DurationUntilReset.AsDuration(); d <= 0 || d > time.Hour {
		t.Fatalf("duration_until_reset %v", d)
	}
	want := map[string]string{
		"X-RateLimit-Limit":     "5",
		"X-RateLimit-Remaining": "0",
		"RateLimit-Policy":      `"shop/per-user";q=5;w=3600`,
	}
	for k, v := range want {
		if got := header(resp, k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if !strings.HasPrefix(header(resp, "RateLimit"), `"shop/per-user";r=0;t=`) {
		t.Errorf("RateLimit = %q", header(resp, "RateLimit"))
	}
	if ra := header(resp, "Retry-After"); ra == "" || ra == "0" {
		t.Errorf("Retry-After = %q", ra)
	}
	// Another user has their own counter.
	if call(t, svc, "shop", 0, desc("user", "bob")).OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatal("bob was limited by ann's counter")
	}
	if a, l := decisions(t, reg, "shop/per-user", "allowed"), decisions(t, reg, "shop/per-user", "limited"); a != 6 || l != 1 {
		t.Fatalf("metrics allowed=%v limited=%v, want 6 and 1", a, l)
	}
}

// Every matching policy is evaluated; the most restrictive is reported.
func TestOverlappingPoliciesReportTheMostRestrictive(t *testing.T) {
	svc, _ := newService(t, nil)
	d := desc("user", "cy", "path", "/checkout")
	r1 := call(t, svc, "shop", 0, d)
	if r1.Statuses[0].CurrentLimit.GetName() != "shop/per-user-checkout" || r1.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("first: %v", r1.Statuses[0])
	}
	call(t, svc, "shop", 0, d)
	r3 := call(t, svc, "shop", 0, d)
	if r3.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r3.Statuses[0].CurrentLimit.GetName() != "shop/per-user-checkout" {
		t.Fatalf("third: %v", r3)
	}
	// The per-user policy counted all three (the denial by the other
	// policy does not refund it), so this fourth request leaves 1.
	r := call(t, svc, "shop", 0, desc("user", "cy"))
	if r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("per-user remaining after 3+1 requests: %v", r.Statuses[0])
	}
}

// A shadow policy is evaluated and counted, and invisible to clients: it
// never denies and never shows in statuses or headers.
func TestShadowNeverDeniesNorShows(t *testing.T) {
	svc, reg := newService(t, nil)
	for i := range 3 {
		resp := call(t, svc, "shop", 0, desc("ip", "10.0.0.1"))
		if resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d denied by a shadow policy", i)
		}
		if resp.Statuses[0].CurrentLimit != nil || len(resp.ResponseHeadersToAdd) != 0 {
			t.Fatalf("request %d shows the shadow policy: %v", i, resp)
		}
	}
	if got := decisions(t, reg, "shop/per-ip-shadow", "shadow_limited"); got != 2 {
		t.Fatalf("shadow_limited = %v, want 2", got)
	}
	// Mixed with an enforcing policy, the enforcing one is what clients see.
	resp := call(t, svc, "shop", 0, desc("ip", "10.0.0.1"), desc("user", "fay"))
	if got := header(resp, "X-RateLimit-Remaining"); resp.OverallCode != rlsv3.RateLimitResponse_OK || got != "4" {
		t.Fatalf("mixed request: %v, remaining %q", resp.OverallCode, got)
	}
	if !strings.Contains(header(resp, "RateLimit-Policy"), "shop/per-user") {
		t.Fatalf("headers name %q", header(resp, "RateLimit-Policy"))
	}
}

// With burst above rate.limit, the headers report the burst as the quota,
// so remaining never exceeds the limit shown.
func TestBurstAboveLimitInHeaders(t *testing.T) {
	snap, err := config.Parse("inline", []byte(`
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: bursty, namespace: shop}
spec:
  domain: shop
  descriptors: [{key: key}]
  algorithm: GCRA
  rate: {limit: 10, period: 1s}
  burst: 20
`))
	if err != nil {
		t.Fatal(err)
	}
	svc, _ := newService(t, nil)
	svc.Swap(snap)
	resp := call(t, svc, "shop", 0, desc("key", "k"))
	if l, r := header(resp, "X-RateLimit-Limit"), header(resp, "X-RateLimit-Remaining"); l != "20" || r != "19" {
		t.Fatalf("limit %q remaining %q, want 20 and 19", l, r)
	}
	if got := header(resp, "RateLimit-Policy"); got != `"shop/bursty";q=20;w=1` {
		t.Fatalf("RateLimit-Policy %q", got)
	}
}

func TestHitsAddend(t *testing.T) {
	svc, _ := newService(t, nil)
	if r := call(t, svc, "shop", 4, desc("user", "dee")); r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("after hits 4: %v", r.Statuses[0])
	}
	if r := call(t, svc, "shop", 2, desc("user", "dee")); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("hits 2 with 1 left: %v", r.OverallCode)
	}
	// A descriptor's own hits_addend wins; 0 peeks.
	peek := desc("user", "dee")
	peek.HitsAddend = wrapperspb.UInt64(0)
	if r := call(t, svc, "shop", 5, peek); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("peek: %v", r)
	}
	if r := call(t, svc, "shop", 0, desc("user", "dee")); r.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("last unit after a peek: %v", r.OverallCode)
	}
}

func TestSwapIsAtomicAndTakesEffect(t *testing.T) {
	svc, _ := newService(t, nil)
	snap, err := config.Parse("inline", []byte(`
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-user, namespace: shop}
spec:
  domain: shop
  descriptors: [{key: user}]
  algorithm: FixedWindow
  rate: {limit: 1, period: 1h}
`))
	if err != nil {
		t.Fatal(err)
	}
	call(t, svc, "shop", 0, desc("user", "eve"))
	svc.Swap(snap)
	if svc.Snapshot().Version != snap.Version {
		t.Fatal("Snapshot() is not the swapped snapshot")
	}
	// Same policy identity, algorithm and period: the counter carries over.
	if r := call(t, svc, "shop", 0, desc("user", "eve")); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after lowering the limit to 1: %v", r.Statuses[0])
	}
}

func TestInvalidRequests(t *testing.T) {
	svc, _ := newService(t, nil)
	long := strings.Repeat("x", 1025)
	many := func(n int) []*rlv3.RateLimitDescriptor {
		out := make([]*rlv3.RateLimitDescriptor, n)
		for i := range out {
			out[i] = desc("user", "a")
		}
		return out
	}
	wide := &rlv3.RateLimitDescriptor{}
	for range 17 {
		wide.Entries = append(wide.Entries, &rlv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	bigHits := desc("user", "a")
	bigHits.HitsAddend = wrapperspb.UInt64(1 << 40)
	negative := desc("user", "a")
	negative.IsNegativeHits = true
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: many(1)}, "domain is empty"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "shop"}, "descriptors are empty"},
		{"17 descriptors", &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: many(17)}, "17 descriptors, the maximum is 16"},
		{"17 entries", &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{wide}}, "has 17 entries, the maximum is 16"},
		{"no entries", &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{{}}}, "descriptors[0] has no entries"},
		{"empty key", &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{desc("", "v")}}, "empty key"},
		{"long key", &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{desc(long, "v")}}, "key is 1025 bytes long, the maximum is 1024"},
		{"long value", &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", long)}}, "value is 1025 bytes long"},
		{"absurd hits", &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: many(1), HitsAddend: 2_000_000_000}, "hits_addend 2000000000 exceeds the maximum 1000000"},
		{"absurd descriptor hits", &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{bigHits}}, "descriptors[0].hits_addend 1099511627776 exceeds"},
		{"negative hits", &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{negative}}, "is_negative_hits is not supported"},
	} {
		_, err := svc.ShouldRateLimit(context.Background(), tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want InvalidArgument %q", tc.name, err, tc.want)
		}
	}
}

// Failure modes against a real Redis that stops answering.
func TestFailureModesWhenRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	st, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc, reg := newService(t, st)
	if r := call(t, svc, "modes", 0, desc("closed", "x")); r.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("with Redis up: %v", r)
	}
	srv.Stop()

	for i := range 3 {
		if r := call(t, svc, "modes", 0, desc("open", "x")); r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("Open, request %d: %v", i, r.OverallCode)
		}
	}
	r := call(t, svc, "modes", 0, desc("closed", "x"))
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || !strings.Contains(header(r, "X-Sluice-Reason"), "failureMode Closed") {
		t.Fatalf("Closed: %v", r)
	}
	// Local enforces the limit (2) in this pod's memory.
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if r := call(t, svc, "modes", 0, desc("local", "x")); r.OverallCode != want {
			t.Fatalf("Local, request %d: %v, want %v", i, r.OverallCode, want)
		}
	}
	for policy, want := range map[string]float64{"modes/open": 3, "modes/closed": 1, "modes/local": 3} {
		result := map[string]string{"modes/open": "failed_open", "modes/closed": "failed_closed", "modes/local": "local_fallback"}[policy]
		if got := decisions(t, reg, policy, result); got != want {
			t.Errorf("%s %s = %v, want %v", policy, result, got, want)
		}
	}
	if got := counterValue(t, reg, "sluice_store_errors_total"); got != 7 {
		t.Errorf("store errors = %v, want 7", got)
	}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.Metric[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}
