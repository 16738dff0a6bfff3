package redis_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// BenchmarkScriptCPU is the Redis CPU of one decision, per algorithm, on
// the exact path (Take) and the grant path (Grant), against a real
// redis-server of its own: redis-µs/call is INFO commandstats' usec per
// EVALSHA call, Redis's own time inside the script, not counting network
// or parsing. "allow" decisions are all admitted and write the counter (a
// limit too large to reach); "deny" decisions are all denied after the
// first (one unit an hour). Grant calls also give 3 units back and ask for
// 10 more, so they write the counter even when denied.
// Decisions are sent one at a time, in chunks of 1000 with the statistics
// reset before each: redis-µs/call is the median of the chunks' means, and
// redis-µs/call-mean the mean of all, which a busy machine inflates (INFO
// commandstats times are wall-clock, and count a redis-server preempted
// mid-script). Run it with a fixed count, so that every variant sees the
// same load:
//
//	go test -run '^$' -bench BenchmarkScriptCPU -benchtime 20000x ./limiter/store/redis/
//
// Times on a shared machine are noisy. With REDIS_CALLGRIND=1 (and valgrind
// installed) the benchmark runs its redis-server under callgrind and
// reports redis-Ir/call instead: the instructions Redis ran per decision,
// script and network handling both, which do not depend on the machine's
// load (use a few thousand decisions: valgrind is slow):
//
//	REDIS_CALLGRIND=1 go test -run '^$' -bench BenchmarkScriptCPU -benchtime 2000x ./limiter/store/redis/
func BenchmarkScriptCPU(b *testing.B) {
	cg := os.Getenv("REDIS_CALLGRIND") != ""
	if cg {
		underCallgrind(b)
	}
	srv := redistest.Start(b)
	s, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	c := srv.Client(b)
	loads := []struct {
		name  string
		limit func(algo.Algorithm) algo.Limit
	}{
		{"allow", func(a algo.Algorithm) algo.Limit {
			return algo.Limit{Algorithm: a, Limit: 1 << 40, Period: time.Hour, Burst: 1 << 40}
		}},
		{"deny", func(a algo.Algorithm) algo.Limit {
			return algo.Limit{Algorithm: a, Limit: 1, Period: time.Hour, Burst: 1}
		}},
	}
	for _, path := range []string{"exact", "grant"} {
		for _, a := range algo.All {
			if path == "grant" && a == algo.SlidingLog {
				continue // not granted
			}
			for _, load := range loads {
				lim := load.limit(a)
				b.Run(path+"/"+a.String()+"/"+load.name, func(b *testing.B) {
					keys := make([]store.Key, 256)
					for i := range keys {
						keys[i] = storetest.KeyFor(b, strconv.Itoa(i))
					}
					var i int64
					decide := func() {
						i++
						k := keys[i%int64(len(keys))]
						var err error
						if path == "exact" {
							_, err = s.Take(context.Background(), store.Request{Key: k, Limit: lim, Cost: 1})
						} else {
							_, err = s.Grant(context.Background(), store.GrantRequest{Key: k, Limit: lim, Cost: 1,
								Want: 10, Credit: 3, CreditWindow: time.Now().UnixMicro() / lim.PeriodMicros(),
								Pod: "p" + strconv.Itoa(int(i%2)), Bound: -1, PodCap: 1000, TTL: time.Second})
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					decide() // loads the script (NOSCRIPT, then EVAL)
					b.ResetTimer()
					if cg {
						callgrind(b, srv.Pid(), "-z")
						for range b.N {
							decide()
						}
						b.ReportMetric(float64(callgrind(b, srv.Pid(), "-d"))/float64(b.N), "redis-Ir/call")
						return
					}
					var perCall []float64
					var calls, usec int64
					for done := 0; done < b.N; done += chunk {
						resetStats(b, c)
						for range min(chunk, b.N-done) {
							decide()
						}
						n, u := evalshaStats(b, c)
						if n < int64(min(chunk, b.N-done)) {
							b.Fatalf("%d EVALSHA calls for %d decisions", n, min(chunk, b.N-done))
						}
						perCall = append(perCall, float64(u)/float64(n))
						calls, usec = calls+n, usec+u
					}
					b.StopTimer()
					slices.Sort(perCall)
					b.ReportMetric(perCall[len(perCall)/2], "redis-µs/call")
					b.ReportMetric(float64(usec)/float64(calls), "redis-µs/call-mean")
				})
			}
		}
	}
}

// underCallgrind makes the redis-server that redistest starts run under
// valgrind's callgrind, through a wrapper that keeps its pid.
func underCallgrind(b *testing.B) {
	dir := b.TempDir()
	server, err := exec.LookPath("redis-server")
	if err != nil {
		b.Fatal(err)
	}
	wrapper := filepath.Join(dir, "redis-server")
	script := "#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=" + dir + "/callgrind.%p " + server + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		b.Fatal(err)
	}
	b.Setenv("REDIS_SERVER", wrapper)
	b.Setenv("CALLGRIND_OUT_DIR", dir)
}

// callgrind zeroes (-z) the counters of the callgrind running as pid, or
// dumps them (-d) and returns the instructions counted since the last zero.
func callgrind(b *testing.B, pid int, op string) int64 {
	dir := os.Getenv("CALLGRIND_OUT_DIR")
	before, _ := filepath.Glob(filepath.Join(dir, "callgrind.*"))
	if out, err := exec.Command("callgrind_control", op, strconv.Itoa(pid)).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control %s: %v\n%s", op, err, out)
	}
	if op != "-d" {
		return 0
	}
	// callgrind_control returns once the dump is asked for; the file
	// follows.
	for range 100 {
		after, _ := filepath.Glob(filepath.Join(dir, "callgrind.*"))
		for _, f := range after {
			if slices.Contains(before, f) {
				continue
			}
			data, err := os.ReadFile(f)
			if err != nil {
				b.Fatal(err)
			}
			for _, line := range strings.Split(string(data), "\n") {
				if v, ok := strings.CutPrefix(line, "totals: "); ok {
					n, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
					if err != nil {
						b.Fatal(err)
					}
					return n
				}
			}
		}
		time.Sleep(50 * time.Millisecond) // waiting for valgrind's dump file
	}
	b.Fatal("callgrind wrote no dump")
	return 0
}

// chunk is how many decisions share one reading of INFO commandstats.
const chunk = 1000

func resetStats(b *testing.B, c *goredis.Client) {
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
}

// evalshaStats reads INFO commandstats' calls and usec for EVALSHA.
func evalshaStats(b *testing.B, c *goredis.Client) (calls, usec int64) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		fields, ok := strings.CutPrefix(line, "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		return calls, usec
	}
	b.Fatal("INFO commandstats has no cmdstat_evalsha")
	return 0, 0
}
