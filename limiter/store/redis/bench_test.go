package redis_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// BenchmarkTakeParallel is many concurrent decisions on distinct keys
// against a real standalone redis-server, batched into pipelines.
func BenchmarkTakeParallel(b *testing.B) {
	s, err := redisstore.New(redisstore.Options{Addrs: []string{standaloneAddr(b)}, Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 1 << 40, Period: time.Hour, Burst: 1 << 40}
	var n atomic.Int64
	b.SetParallelism(32)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var kb store.KeyBuilder
		for pb.Next() {
			kb.Reset()
			kb.Add(string(rune(n.Add(1) % 10000)))
			if _, err := s.Take(context.Background(), store.Request{Key: kb.Key(), Limit: lim, Cost: 1}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
