package server_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/service"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// BenchmarkShouldRateLimitRedisCluster is BenchmarkShouldRateLimitRedis
// on a real 3-primary Redis Cluster, with calls of 1 and of 3 descriptors
// (each its own counter, so a call's decisions spread over the shards):
// allocs/op and B/op are the limiter's cost of an exact call on a
// cluster. A call's descriptors are decided one after another, so a call
// of 3 is 3 store round trips in series (docs/development/benchmarks.md).
func BenchmarkShouldRateLimitRedisCluster(b *testing.B) {
	c := redistest.StartCluster(b, 3)
	st, err := redisstore.New(redisstore.Options{Addrs: c.Addrs(), Cluster: true})
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
	users := make([]string, 30000)
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i)
	}
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("descriptors=%d", n), func(b *testing.B) {
			var next atomic.Int64
			ctx := context.Background()
			b.ReportAllocs()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req := &rlsv3.RateLimitRequest{Domain: "bench"}
					for range n {
						user := users[next.Add(1)%int64(len(users))]
						req.Descriptors = append(req.Descriptors, &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{
							{Key: "user_id", Value: user}, {Key: "path", Value: "/v1/charges"}}})
					}
					resp, err := rls.ShouldRateLimit(ctx, req)
					if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.Statuses) != n {
						b.Fatalf("%v, %d statuses, %v", resp.GetOverallCode(), len(resp.GetStatuses()), err)
					}
				}
			})
		})
	}
}
