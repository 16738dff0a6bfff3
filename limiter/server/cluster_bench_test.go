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
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// BenchmarkShouldRateLimitRedisCluster is BenchmarkShouldRateLimitRedis
// on a real 3-primary Redis Cluster, with calls of 1 and of 3 descriptors
// (each its own counter, so a call's decisions spread over the shards):
// allocs/op and B/op are the limiter's cost of an exact call on a
// cluster. A call's descriptors are decided concurrently, their store
// calls in one round trip; serial=true decides them one after another
// (the store hidden from the service's gathering), as before issue 42
// (docs/development/benchmarks.md).
func BenchmarkShouldRateLimitRedisCluster(b *testing.B) {
	c := redistest.StartCluster(b, 3)
	st, err := redisstore.New(redisstore.Options{Addrs: c.Addrs(), Cluster: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	benchDescriptors(b, st, 30000)
}

// BenchmarkShouldRateLimitRedisDescriptors is
// BenchmarkShouldRateLimitRedisCluster on a standalone Redis.
func BenchmarkShouldRateLimitRedisDescriptors(b *testing.B) {
	rs := redistest.Start(b)
	st, err := redisstore.New(redisstore.Options{Addrs: []string{rs.Addr}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	benchDescriptors(b, st, 30000)
}

// serialStore hides that a store gathers a request's calls: the service
// decides its descriptors one after another.
type serialStore struct{ store.Store }

// benchDescriptors runs RLS calls of 1 and of 3 descriptors on st, each
// descriptor a user's counter of nUsers, 16 calls per core in flight;
// those of 3 also with the descriptors decided serially.
func benchDescriptors(b *testing.B, st store.Store, nUsers int) {
	snap, err := config.Parse("inline", []byte(benchRLSPolicy))
	if err != nil {
		b.Fatal(err)
	}
	users := make([]string, nUsers)
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i)
	}
	for _, n := range []int{1, 3} {
		for _, serial := range []bool{false, true} {
			if serial && n == 1 {
				continue
			}
			name := fmt.Sprintf("descriptors=%d", n)
			var s store.Store = st
			if serial {
				name, s = name+"/serial=true", serialStore{st}
			}
			svc := service.New(s, service.Options{})
			svc.Swap(snap)
			rls := server.NewRLS(svc, -1)
			b.Run(name, func(b *testing.B) { benchCalls(b, rls, users, n) })
		}
	}
}

func benchCalls(b *testing.B, rls *server.RLS, users []string, n int) {
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
}
