package service_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
)

// BenchmarkCheckStoreDown is a decision while the store's breaker is open:
// the failure mode decides in process, without a round trip.
func BenchmarkCheckStoreDown(b *testing.B) {
	st := downStore(b)
	for _, mode := range []string{"Open", "Closed", "Local"} {
		b.Run(mode, func(b *testing.B) {
			snap, err := config.Parse("bench", []byte(fmt.Sprintf(`
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: bench, namespace: default}
spec:
  domain: bench
  descriptors: [{key: user_id}]
  rate: {limit: 1000000000, period: 1h}
  failureMode: %s
`, mode)))
			if err != nil {
				b.Fatal(err)
			}
			svc := service.New(st, service.Options{Fallback: memoryStore(b)})
			svc.Swap(snap)
			entries := []config.Entry{{Key: "user_id", Value: "user-42"}}
			ctx := context.Background()
			for range 100 { // trip the breaker
				svc.Check(ctx, "bench", entries, 1)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if d := svc.Check(ctx, "bench", entries, 1); d.Reason == "" {
					b.Fatal("decided by the store, which is down")
				}
			}
		})
	}
}
