package service_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

const benchPolicy = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: bench, namespace: default}
spec:
  domain: bench
  descriptors: [{key: user_id}, {key: path, value: /v1/charges}]
  algorithm: %s
  rate: {limit: 1000000000, period: 1h}
`

func benchService(b *testing.B, algorithm string) *service.Service {
	return benchServiceWith(b, algorithm, service.Options{})
}

func benchServiceWith(b *testing.B, algorithm string, opts service.Options) *service.Service {
	snap, err := config.Parse("bench", []byte(fmt.Sprintf(benchPolicy, algorithm)))
	if err != nil {
		b.Fatal(err)
	}
	st := memory.New(memory.Options{})
	b.Cleanup(func() { _ = st.Close() })
	svc := service.New(st, opts)
	svc.Swap(snap)
	return svc
}

// BenchmarkCheck is one memory-store decision in process, on a known key,
// allowed: the target is under 1µs and no allocations.
func BenchmarkCheck(b *testing.B) {
	for _, a := range []string{"TokenBucket", "GCRA", "SlidingWindow", "FixedWindow"} {
		b.Run(a, func(b *testing.B) {
			svc := benchService(b, a)
			entries := []config.Entry{{Key: "user_id", Value: "user-42"}, {Key: "path", Value: "/v1/charges"}}
			ctx := context.Background()
			svc.Check(ctx, "bench", entries, 1)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if d := svc.Check(ctx, "bench", entries, 1); d.OverLimit || d.Policy == nil {
					b.Fatal("not an allowed match")
				}
			}
		})
	}
}

// BenchmarkCheckCounting is BenchmarkCheck (TokenBucket) with and without
// the per-policy stats of the admin stats endpoint, in one run, so that
// their ratio is what counting costs (the budget is 2%), and with the
// hottest-descriptors sketch on (off by default) for what that costs, on
// the coarse clock limiter/app gives it.
func BenchmarkCheckCounting(b *testing.B) {
	clock := service.NewCoarseClock()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go clock.Run(ctx)
	for _, v := range []struct {
		name string
		opts service.Options
	}{
		{"stats=off", service.Options{DisablePolicyStats: true}},
		{"stats=on", service.Options{}},
		{"stats=on,top=10", service.Options{Top: service.TopOptions{K: 10}, TopClock: clock.Now}},
	} {
		b.Run(v.name, func(b *testing.B) {
			svc := benchServiceWith(b, "TokenBucket", v.opts)
			entries := []config.Entry{{Key: "user_id", Value: "user-42"}, {Key: "path", Value: "/v1/charges"}}
			ctx := context.Background()
			svc.Check(ctx, "bench", entries, 1)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if d := svc.Check(ctx, "bench", entries, 1); d.OverLimit || d.Policy == nil {
					b.Fatal("not an allowed match")
				}
			}
		})
	}
}

// BenchmarkDecide adds request validation and the Response to Check;
// limiter/server's BenchmarkShouldRateLimit adds the RLS mapping.
func BenchmarkDecide(b *testing.B) {
	svc := benchService(b, "TokenBucket")
	req := &service.Request{Domain: "bench", Descriptors: []service.Descriptor{{Entries: []config.Entry{
		{Key: "user_id", Value: "user-42"}, {Key: "path", Value: "/v1/charges"}}}}}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := svc.Decide(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRefused is the answer to a request the service won't count: a
// cost above the cap (1e9 here, so 2e9 is above the limiter's maximum),
// a value over 1 KiB, and 17 or 1,000 descriptors. Its work is bounded
// whatever the client sends: 1,000 descriptors cost what 17 do.
func BenchmarkRefused(b *testing.B) {
	svc := benchService(b, "TokenBucket")
	charge := service.Descriptor{Entries: []config.Entry{{Key: "user_id", Value: "user-42"}, {Key: "path", Value: "/v1/charges"}}}
	many := func(n int) []service.Descriptor {
		out := make([]service.Descriptor, n)
		for i := range out {
			out[i] = charge
		}
		return out
	}
	long := service.Descriptor{Entries: []config.Entry{{Key: "user_id", Value: string(make([]byte, 1100))}, {Key: "path", Value: "/v1/charges"}}}
	for _, tc := range []struct {
		name string
		req  service.Request
	}{
		{"cost", service.Request{Domain: "bench", HitsAddend: 2_000_000_000, Descriptors: many(1)}},
		{"long-value", service.Request{Domain: "bench", Descriptors: []service.Descriptor{long}}},
		{"17-descriptors", service.Request{Domain: "bench", Descriptors: many(17)}},
		{"1000-descriptors", service.Request{Domain: "bench", Descriptors: many(1000)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var resp service.Response
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := svc.DecideInto(ctx, &tc.req, &resp); err != nil || !resp.Reported.Refused {
					b.Fatalf("%+v %v, want refused", resp.Reported, err)
				}
			}
		})
	}
}
