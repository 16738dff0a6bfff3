package server_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store/memory"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// rlsOn is the RLS adapter, in process, over a service on a memory store
// with policies, without Retry-After jitter.
func rlsOn(tb testing.TB, policies string) *server.RLS {
	tb.Helper()
	snap, err := config.Parse("inline", []byte(policies))
	if err != nil {
		tb.Fatal(err)
	}
	st := memory.New(memory.Options{})
	tb.Cleanup(func() { _ = st.Close() })
	svc := service.New(st, service.Options{})
	svc.Swap(snap)
	return server.NewRLS(svc, -1)
}

// With burst above rate.limit, the headers report the burst as the quota,
// so remaining never exceeds the limit shown.
func TestBurstAboveLimitInHeaders(t *testing.T) {
	rls := rlsOn(t, `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: bursty, namespace: shop}
spec:
  domain: shop
  descriptors: [{key: key}]
  algorithm: GCRA
  rate: {limit: 10, period: 1s}
  burst: 20
`)
	resp, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "shop",
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "key", Value: "k"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := header(resp, server.HeaderLimit)
	r, _ := header(resp, server.HeaderRemaining)
	if l != "20" || r != "19" {
		t.Fatalf("limit %q remaining %q, want 20 and 19", l, r)
	}
	if got, _ := header(resp, server.HeaderRateLimitPolicy); got != `"shop/bursty";q=20;w=1` {
		t.Fatalf("RateLimit-Policy %q", got)
	}
}

// TestShouldRateLimitAllocations: a decided request of one descriptor, on
// a counter the memory store holds, costs two allocations in the RLS
// adapter and none in the service: the response with its status, limit,
// reset and five headers, and the headers' one string (there were seven).
// Counted, not timed; not under -race, which allocates of its own.
func TestShouldRateLimitAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations are not counted under -race")
	}
	rls := rlsOn(t, benchRLSPolicy)
	req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{
		{Key: "user_id", Value: "user-42"}, {Key: "path", Value: "/v1/charges"}}}}}
	ctx := context.Background()
	var resp *rlsv3.RateLimitResponse
	allocs := testing.AllocsPerRun(1000, func() {
		var err error
		if resp, err = rls.ShouldRateLimit(ctx, req); err != nil {
			t.Fatal(err)
		}
	})
	if len(resp.GetStatuses()) != 1 || resp.GetStatuses()[0].GetCurrentLimit() == nil || len(resp.GetResponseHeadersToAdd()) != 5 {
		t.Fatalf("answer %v: want one decided status and five headers", resp)
	}
	if allocs > 2 {
		t.Errorf("%.1f allocations per decided request, want at most 2", allocs)
	}
}

const benchRLSPolicy = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: bench, namespace: default}
spec:
  domain: bench
  descriptors: [{key: user_id}, {key: path, value: /v1/charges}]
  algorithm: TokenBucket
  rate: {limit: 1000000000, period: 1h}
`

// BenchmarkShouldRateLimit is one RLS call in process, without gRPC: the
// mapping to a service.Request, the service's Decide (limiter/service's
// BenchmarkDecide) on a memory store, and the RLS response with headers.
func BenchmarkShouldRateLimit(b *testing.B) {
	rls := rlsOn(b, benchRLSPolicy)
	req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{
		{Key: "user_id", Value: "user-42"}, {Key: "path", Value: "/v1/charges"}}}}}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := rls.ShouldRateLimit(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkShouldRateLimitRedis is BenchmarkShouldRateLimit on the Redis
// store, a real redis-server: 10,000 keys in turn, as `make bench` sends
// them, so that a profile of it (-cpuprofile) shows the limiter's own
// cost of an exact decision in Redis.
func BenchmarkShouldRateLimitRedis(b *testing.B) {
	rs := redistest.Start(b)
	st, err := redisstore.New(redisstore.Options{Addrs: []string{rs.Addr}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	snap, err := config.Parse("inline", []byte(benchRLSPolicy))
	if err != nil {
		b.Fatal(err)
	}
	svc := service.New(st, service.Options{})
	svc.Swap(snap)
	rls := server.NewRLS(svc, -1)
	users := make([]string, 10000)
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i)
	}
	var next atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(16) // 16 per core in flight: the store batches them
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{
				{Key: "user_id", Value: users[next.Add(1)%int64(len(users))]}, {Key: "path", Value: "/v1/charges"}}}}}
			resp, err := rls.ShouldRateLimit(ctx, req)
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				b.Fatalf("%v %v", resp.GetOverallCode(), err)
			}
		}
	})
}

// A fleet's spec.entries.accept (the limiter's --accept-entry) names the
// entry that carries the client's Accept header: a denial gets problem
// details when that entry asks for them, and the default name is then an
// entry like any other. The window is 720h: no window ends between the
// request that spends the limit and the denials.
func TestAcceptEntryNamed(t *testing.T) {
	snap, err := config.Parse("inline", []byte(`
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: one, namespace: shop}
spec: {domain: shop, descriptors: [{key: user}], algorithm: FixedWindow, rate: {limit: 1, period: 720h}}
`))
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New(memory.Options{})
	t.Cleanup(func() { _ = st.Close() })
	svc := service.New(st, service.Options{AcceptEntry: "x_accept"})
	svc.Swap(snap)
	rls := server.NewRLS(svc, -1)
	ask := func(acceptKey string) *rlsv3.RateLimitResponse {
		t.Helper()
		out, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "ann"}, {Key: acceptKey, Value: server.ProblemContentType}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	ask("x_accept")
	if out := ask("accept"); out.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || len(out.RawBody) != 0 {
		t.Fatalf("denied, Accept in the default entry: %v body %q, want OVER_LIMIT with no body", out.OverallCode, out.RawBody)
	}
	if out := ask("x_accept"); out.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || len(out.RawBody) == 0 {
		t.Fatalf("denied, Accept in x_accept: %v body %q, want OVER_LIMIT with problem details", out.OverallCode, out.RawBody)
	}
}
