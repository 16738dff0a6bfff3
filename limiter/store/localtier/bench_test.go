package localtier_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/localtier"
)

// BenchmarkLocalFastPath is a decision spent from a grant: no store call.
// The grant is large (a limit of 1e9/s, a bound of 1e9 units, a 1m ttl), so
// a grant call comes once in hundreds of thousands of decisions.
func BenchmarkLocalFastPath(b *testing.B) {
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 1_000_000_000, Period: time.Second, Burst: 1_000_000_000}
	tier := newPod(b, newRedis(b, false), localtier.Options{})
	p := policy(tier, lim, v1alpha1.LocalTier{TTL: &metav1.Duration{Duration: time.Minute}, MaxOvershoot: ptr.To(intstr.FromInt32(1_000_000_000))})
	req := store.Request{Key: storetest.KeyFor(b, "hot"), Limit: lim, Cost: 1}
	ctx := context.Background()
	for range 1000 { // warm the rate estimate: grants grow
		if _, err := tier.Take(ctx, p, req); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r, _ := tier.Take(ctx, p, req); !r.Allowed {
				b.Fatal("denied")
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if r, _ := tier.Take(ctx, p, req); !r.Allowed {
					b.Error("denied")
					return
				}
			}
		})
	})
	st := p.Stats()
	b.Logf("local %d, grants %d", st.Local, st.Grants)
}

// BenchmarkColdKeys is two-tier mode where no key is hot (a new key for
// every call, each far below its limit) beside the bare Redis store:
// granting should cost nothing there (the exact script decides each cold
// key's call).
func BenchmarkColdKeys(b *testing.B) {
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 1_000_000_000, Period: time.Second, Burst: 1_000_000_000}
	rs := newRedis(b, false)
	tier := newPod(b, rs, localtier.Options{})
	p := policy(tier, lim, v1alpha1.LocalTier{MaxOvershoot: ptr.To(intstr.FromString("5%"))})
	ctx := context.Background()
	var next atomic.Int64
	run := func(b *testing.B, take func(store.Request) (algo.Result, error)) {
		b.ReportAllocs()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			var kb store.KeyBuilder
			for pb.Next() {
				kb.Reset()
				kb.Add(strconv.FormatInt(next.Add(1), 10))
				if r, err := take(store.Request{Key: kb.Key(), Limit: lim, Cost: 1}); err != nil || !r.Allowed {
					b.Errorf("%+v %v", r, err)
					return
				}
			}
		})
	}
	b.Run("exact", func(b *testing.B) { run(b, func(r store.Request) (algo.Result, error) { return rs.Take(ctx, r) }) })
	b.Run("two-tier", func(b *testing.B) {
		run(b, func(r store.Request) (algo.Result, error) { return tier.Take(ctx, p, r) })
	})
	if st := p.Stats(); st.Grants > 0 {
		b.Errorf("stats %+v: a cold key took a grant", st)
	}
}
