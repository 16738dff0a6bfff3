package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// BenchmarkTakeBreakerOpen is a decision on a shard whose breaker is open
// (its server was killed): it fails with store.ErrUnavailable without
// touching Redis. The target is microseconds, not a timeout.
func BenchmarkTakeBreakerOpen(b *testing.B) {
	srv := redistest.Start(b)
	s, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 20 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	srv.Stop()
	req := store.Request{Key: storetest.KeyFor(b, "k"), Limit: algo.Limit{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second, Burst: 10}, Cost: 1}
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := s.Take(ctx, req); errors.Is(err, store.ErrUnavailable) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the breaker did not open within 10s of the kill")
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Take(ctx, req); !errors.Is(err, store.ErrUnavailable) {
				b.Fatal(err)
			}
		}
	})
}
