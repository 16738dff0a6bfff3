package memory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

// BenchmarkTake measures one allowed decision on a known key.
func BenchmarkTake(b *testing.B) {
	for _, a := range algo.All {
		b.Run(a.String(), func(b *testing.B) {
			s := memory.New(memory.Options{SweepInterval: -1})
			defer s.Close()
			lim := algo.Limit{Algorithm: a, Limit: 1 << 40, Period: time.Hour, Burst: 1 << 40}
			if a == algo.SlidingLog {
				lim.Limit = 1 << 20 // one entry per request: keep the log small
			}
			var kb store.KeyBuilder
			kb.Add("bench")
			req := store.Request{Key: kb.Key(), Limit: lim, Cost: 1}
			ctx := context.Background()
			_, _ = s.Take(ctx, req)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if a == algo.SlidingLog && i%(1<<19) == 0 {
					req.Key[1]++ // a fresh log now and then
				}
				if r, _ := s.Take(ctx, req); !r.Allowed {
					b.Fatal("denied")
				}
			}
		})
	}
}

// BenchmarkTakeFull measures a decision on a new key in a full store: each
// one evicts a counter.
func BenchmarkTakeFull(b *testing.B) {
	const maxKeys = 64 * 256
	s := memory.New(memory.Options{MaxKeys: maxKeys, SweepInterval: -1})
	defer s.Close()
	lim := algo.Limit{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Hour}
	keys := make([]store.Key, 4*maxKeys)
	var kb store.KeyBuilder
	for i := range keys {
		kb.Reset()
		kb.Add(fmt.Sprint("bench", i))
		keys[i] = kb.Key()
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r, _ := s.Take(ctx, store.Request{Key: keys[i%len(keys)], Limit: lim, Cost: 1}); !r.Allowed {
			b.Fatal("denied")
		}
	}
}

// BenchmarkTakeFullTenants is BenchmarkTakeFull with the keys spread over
// 8 tenants, one of which writes half of them.
func BenchmarkTakeFullTenants(b *testing.B) {
	const maxKeys = 64 * 256
	s := memory.New(memory.Options{MaxKeys: maxKeys, SweepInterval: -1})
	defer s.Close()
	lim := algo.Limit{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Hour}
	reqs := make([]store.Request, 4*maxKeys)
	var kb store.KeyBuilder
	for i := range reqs {
		kb.Reset()
		kb.Add(fmt.Sprint("bench", i))
		tenant := "big"
		if i%2 == 1 {
			tenant = fmt.Sprint("ns-", i%7)
		}
		reqs[i] = store.Request{Key: kb.Key(), Limit: lim, Cost: 1, Tenant: tenant}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r, _ := s.Take(ctx, reqs[i%len(reqs)]); !r.Allowed {
			b.Fatal("denied")
		}
	}
}
