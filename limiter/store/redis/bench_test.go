package redis_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// BenchmarkTakeParallel is many concurrent decisions on distinct keys
// against a real standalone redis-server, batched into pipelines.
// redis-µs/op is redis-server's CPU per decision, go-µs/op this process's
// (the store and the benchmark's goroutines), decisions/read how many
// decisions each socket read of Redis's carried (a pipeline takes one read
// unless it is large). With 1, 2 (the default) and 4 round trips in flight
// (Options.Workers): fewer send larger batches.
func BenchmarkTakeParallel(b *testing.B) {
	for _, w := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("workers=%d", w), func(b *testing.B) { benchTakeParallel(b, w) })
	}
}

// BenchmarkTakeParallelCluster is BenchmarkTakeParallel on the test's
// 3-primary cluster: no multi script there (a script's keys share a
// slot), so a round trip is one EVALSHA a decision, grouped per shard.
// allocs/op is the store's cost of a decision in cluster mode.
func BenchmarkTakeParallelCluster(b *testing.B) {
	s, err := redisstore.New(redisstore.Options{Addrs: clusterAddrsB(b), Cluster: true, Timeout: time.Second})
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

func benchTakeParallel(b *testing.B, workers int) {
	s, err := redisstore.New(redisstore.Options{Addrs: []string{standaloneAddr(b)}, Timeout: time.Second, Workers: workers})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	c := standalone.Client(b)
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 1 << 40, Period: time.Hour, Burst: 1 << 40}
	var n atomic.Int64
	b.SetParallelism(32)
	b.ReportAllocs()
	redis0, self0, reads0 := cpuTime(b, standalone.Pid()), cpuTime(b, os.Getpid()), reads(b, c)
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
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b, standalone.Pid())-redis0).Microseconds())/float64(b.N), "redis-µs/op")
	b.ReportMetric(float64((cpuTime(b, os.Getpid())-self0).Microseconds())/float64(b.N), "go-µs/op")
	b.ReportMetric(float64(b.N)/float64(reads(b, c)-reads0), "decisions/read")
}

// reads is the number of socket reads Redis has processed (INFO stats
// total_reads_processed).
func reads(b *testing.B, c *goredis.Client) int64 {
	info, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_reads_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("INFO stats has no total_reads_processed")
	return 0
}

// cpuTime is the CPU time (user and system) process pid has used.
func cpuTime(b *testing.B, pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name, which ends with the last ')'.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}
