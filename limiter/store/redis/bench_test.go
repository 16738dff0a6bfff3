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
// against a real standalone redis-server, batched into pipelines: each
// batch decided by one script call (batch), or by one call per decision
// (per-key, as on a cluster). redis-µs/op is redis-server's CPU per
// decision, go-µs/op this process's (the store and the benchmark's
// goroutines), decisions/call the decisions per script call.
func BenchmarkTakeParallel(b *testing.B) {
	for _, bc := range []struct {
		name   string
		perKey bool
	}{{"batch", false}, {"per-key", true}} {
		b.Run(bc.name, func(b *testing.B) {
			addr := standaloneAddr(b)
			s, err := redisstore.New(redisstore.Options{Addrs: []string{addr}, Timeout: time.Second, PerKeyScripts: bc.perKey})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 1 << 40, Period: time.Hour, Burst: 1 << 40}
			var n atomic.Int64
			b.SetParallelism(32)
			b.ReportAllocs()
			c := standalone.Client(b)
			cpu0, self0, calls0 := cpuTime(b, standalone.Pid()), cpuTime(b, os.Getpid()), scriptCalls(b, c)
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
			b.ReportMetric(float64((cpuTime(b, standalone.Pid())-cpu0).Microseconds())/float64(b.N), "redis-µs/op")
			b.ReportMetric(float64((cpuTime(b, os.Getpid())-self0).Microseconds())/float64(b.N), "go-µs/op")
			b.ReportMetric(float64(b.N)/float64(scriptCalls(b, c)-calls0), "decisions/call")
		})
	}
}

// scriptCalls is the number of EVALSHA and EVAL calls Redis has run.
func scriptCalls(b *testing.B, c *goredis.Client) int64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\r\n") {
		if calls, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			v, _ := strconv.ParseInt(calls[:strings.IndexByte(calls, ',')], 10, 64)
			n += v
		} else if calls, ok := strings.CutPrefix(line, "cmdstat_eval:calls="); ok {
			v, _ := strconv.ParseInt(calls[:strings.IndexByte(calls, ',')], 10, 64)
			n += v
		}
	}
	return n
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
