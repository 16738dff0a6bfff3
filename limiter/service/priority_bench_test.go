package service_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/memory"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// priorityBenchPolicy is a load shedder like the sample
// payments/load-shedder: one counter per service value, capacity shared by
// three priorities.
const priorityBenchPolicy = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: shedder, namespace: default}
spec:
  domain: bench
  descriptors: [{key: service}]
  algorithm: %s
  rate: {limit: %d, period: 1s}
  %s
  priority:
    key: priority
    levels: [{value: critical, share: 100}, {value: default, share: 80}, {value: batch, share: 50}]
    default: default
`

// priorityMix is the offered load: out of every 10 requests, 2 critical,
// 4 default and 4 batch, interleaved.
var priorityMix = [10]string{"critical", "default", "batch", "default", "batch", "critical", "default", "batch", "default", "batch"}

// priorityCapacity is the policy's capacity per second; the load offers
// twice as much, evenly spaced.
const priorityCapacity = 1000

// BenchmarkPriorityShedding offers twice the capacity of a load shedder
// (1000/s; critical may use 100%, default 80%, batch 50%) in a mix of 20%
// critical, 40% default and 40% batch requests, on a synthetic clock (one
// request every 500µs), through the service, on the memory store, a real
// redis-server and a real 3-primary Redis Cluster. It prints the admitted
// mix, fails unless every critical request is admitted, and reports each
// priority's admitted share of the capacity. ns/op is one decision,
// measured. make bench-priority runs it for 10 simulated seconds.
func BenchmarkPriorityShedding(b *testing.B) {
	// go-redis logs the dials that fail while the servers stop at the end.
	redisstore.LogClientTo(slog.New(slog.DiscardHandler))
	standalone := redistest.Start(b)
	cluster := redistest.StartCluster(b, 3)
	stores := []struct {
		name string
		new  func(b *testing.B, clock store.Clock) store.Store
	}{
		{"memory", func(b *testing.B, clock store.Clock) store.Store {
			m := memory.New(memory.Options{Clock: clock, SweepInterval: -1})
			b.Cleanup(func() { _ = m.Close() })
			return m
		}},
		{"redis", func(b *testing.B, clock store.Clock) store.Store {
			return benchRedis(b, redisstore.Options{Addrs: []string{standalone.Addr}, PinnedClock: clock})
		}},
		{"redis-cluster", func(b *testing.B, clock store.Clock) store.Store {
			return benchRedis(b, redisstore.Options{Addrs: cluster.Addrs(), Cluster: true, PinnedClock: clock})
		}},
	}
	var runs atomic.Int64
	for _, alg := range []struct{ name, burst string }{{"FixedWindow", ""}, {"TokenBucket", "burst: 100"}} {
		for _, st := range stores {
			b.Run(alg.name+"/"+st.name, func(b *testing.B) {
				snap, err := config.Parse("bench", []byte(fmt.Sprintf(priorityBenchPolicy, alg.name, priorityCapacity, alg.burst)))
				if err != nil {
					b.Fatal(err)
				}
				clock := storetest.NewClock()
				svc := service.New(st.new(b, clock.Now), service.Options{})
				svc.Swap(snap)
				// A counter of its own for each run: b.N grows between runs.
				service := fmt.Sprintf("run-%d", runs.Add(1))
				var offered, admitted [len(priorityMix)]int64
				entries := [len(priorityMix)][]config.Entry{}
				for i, p := range priorityMix {
					entries[i] = []config.Entry{{Key: "service", Value: service}, {Key: "priority", Value: p}}
				}
				ctx := context.Background()
				interval := time.Second / (2 * priorityCapacity)
				b.ResetTimer()
				for i := range b.N {
					clock.Set(storetest.Base.Add(time.Duration(i) * interval))
					k := i % len(priorityMix)
					offered[k]++
					if d := svc.Check(ctx, "bench", entries[k], 1); d.Policy == nil || d.Reason != "" {
						b.Fatalf("request %d: no decision of the store: %+v", i, d)
					} else if !d.OverLimit {
						admitted[k]++
					}
				}
				b.StopTimer()
				reportPriorityMix(b, alg.name, st.name, offered, admitted)
			})
		}
	}
}

func benchRedis(b *testing.B, opts redisstore.Options) store.Store {
	opts.Timeout = 2 * time.Second
	s, err := redisstore.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// reportPriorityMix sums the decisions by priority, reports each one's
// admitted share of the capacity, fails unless critical was fully served,
// and prints the mix once the run covers a simulated second or more.
func reportPriorityMix(b *testing.B, alg, storeName string, offered, admitted [len(priorityMix)]int64) {
	byPriority := map[string][2]int64{}
	var total int64
	for i, p := range priorityMix {
		v := byPriority[p]
		v[0] += offered[i]
		v[1] += admitted[i]
		byPriority[p] = v
		total += admitted[i]
	}
	seconds := float64(b.N) / (2 * priorityCapacity)
	capacity := seconds * priorityCapacity
	if c := byPriority["critical"]; c[1] != c[0] {
		b.Errorf("critical: %d of %d admitted, want all", c[1], c[0])
	}
	for _, p := range []string{"critical", "default", "batch"} {
		b.ReportMetric(float64(byPriority[p][1])/capacity, p+"/capacity")
	}
	if seconds < 1 {
		return
	}
	var out strings.Builder
	fmt.Fprintf(&out, "priority shedding: %s %d/s (critical 100%%, default 80%%, batch 50%%), offered 2x for %.0fs (critical 20%%, default 40%%, batch 40%%), store %s:\n",
		alg, priorityCapacity, seconds, storeName)
	for _, p := range []string{"critical", "default", "batch"} {
		v := byPriority[p]
		fmt.Fprintf(&out, "  %-8s offered %6d  admitted %6d  = %5.1f%% of its requests, %5.1f%% of the capacity\n",
			p, v[0], v[1], 100*float64(v[1])/float64(v[0]), 100*float64(v[1])/capacity)
	}
	fmt.Fprintf(&out, "  admitted %d = %.3f x capacity\n", total, float64(total)/capacity)
	fmt.Fprint(os.Stdout, out.String())
}
