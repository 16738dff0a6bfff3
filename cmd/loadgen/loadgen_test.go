package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

func TestHistogramExactSmallValues(t *testing.T) {
	h := NewHistogram()
	for v := int64(1); v <= 100; v++ { // 1..100ns: below 256, stored exactly
		h.RecordValue(v)
	}
	for _, tc := range []struct {
		q    float64
		want int64
	}{{0.01, 1}, {0.5, 50}, {0.9, 90}, {0.99, 99}, {0.999, 100}, {1, 100}, {0, 1}} {
		if got := int64(h.Quantile(tc.q)); got != tc.want {
			t.Errorf("Quantile(%v) = %d, want %d", tc.q, got, tc.want)
		}
	}
	if h.Count() != 100 || h.Min() != 1 || h.Max() != 100 {
		t.Errorf("count %d min %d max %d, want 100 1 100", h.Count(), h.Min(), h.Max())
	}
	if got := h.Mean(); got != 50 { // 50.5 truncated
		t.Errorf("Mean = %d, want 50", got)
	}
}

func TestHistogramPercentilesWithinPrecision(t *testing.T) {
	// 1µs..100ms in 1µs steps, shuffled: percentile p is p × 100ms.
	h := NewHistogram()
	vals := make([]int64, 100_000)
	for i := range vals {
		vals[i] = int64(i+1) * 1000
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(vals), func(i, j int) { vals[i], vals[j] = vals[j], vals[i] })
	for _, v := range vals {
		h.Record(time.Duration(v))
	}
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := q * 100e6
		got := float64(h.Quantile(q))
		if got < want || got > want*(1+1.0/histSub) {
			t.Errorf("Quantile(%v) = %v, want within [%v, +0.8%%]", q, time.Duration(got), time.Duration(want))
		}
	}
	if h.Max() != 100*time.Millisecond || h.Quantile(1) != 100*time.Millisecond {
		t.Errorf("max = %v / %v, want 100ms", h.Max(), h.Quantile(1))
	}
}

func TestHistogramAgainstSortedSamples(t *testing.T) {
	// Long-tailed data: the histogram's percentiles match the exact ones
	// computed from sorted samples to within the bucket precision.
	r := rand.New(rand.NewPCG(3, 4))
	h := NewHistogram()
	var vals []int64
	for i := 0; i < 50_000; i++ {
		v := int64(math.Exp(r.NormFloat64()*1.5 + 13)) // ~0.4ms median, long tail
		vals = append(vals, v)
		h.RecordValue(v)
	}
	sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
	for _, q := range []float64{0.5, 0.99, 0.999} {
		exact := vals[int(math.Ceil(q*float64(len(vals))))-1]
		got := int64(h.Quantile(q))
		if got < exact || float64(got) > float64(exact)*(1+1.0/histSub)+1 {
			t.Errorf("Quantile(%v) = %d, exact %d", q, got, exact)
		}
	}
}

func TestHistogramMergeAndBounds(t *testing.T) {
	a, b := NewHistogram(), NewHistogram()
	if a.Quantile(0.5) != 0 || a.Max() != 0 {
		t.Fatal("empty histogram should report 0")
	}
	a.Record(time.Millisecond)
	b.Record(3 * time.Millisecond)
	b.Record(time.Hour) // beyond the tracked range: clamped into the top bucket, max stays exact
	b.RecordValue(-5)   // negative: counted as 0
	a.Merge(b)
	if a.Count() != 4 || a.Max() != time.Hour || a.Min() != 0 {
		t.Fatalf("merged count %d max %v min %v", a.Count(), a.Max(), a.Min())
	}
	if got := a.Quantile(0.5); got < time.Millisecond || got > time.Millisecond*1008/1000 {
		t.Errorf("p50 = %v, want ~1ms", got)
	}
	// Every bucket's range round-trips.
	for i := 0; i < histBuckets; i++ {
		lo, hi := bucketRange(i)
		if bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d: range [%d, %d] maps to %d, %d", i, lo, hi, bucketOf(lo), bucketOf(hi))
		}
	}
}

func TestLoopbackOnly(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:8081", "localhost:1", "[::1]:8081", "127.8.9.10:80"} {
		if _, err := loopbackHostPort("--addr", ok); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"10.0.0.1:8081", "192.168.1.1:80", "example.com:80", "0.0.0.0:8081", "8.8.8.8:53", "127.0.0.1", "127.0.0.1:0"} {
		if _, err := loopbackHostPort("--addr", bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	// Without --allow-remote, neither a list nor a DNS name may leave the
	// machine.
	for _, bad := range []string{"127.0.0.1:8081,10.0.0.1:8081", "dns:///localhost:8081", "dns:///limiter.default.svc:8081"} {
		if _, err := parseTarget(bad, false); err == nil {
			t.Errorf("%s accepted without --allow-remote", bad)
		}
	}
	if _, err := loopbackURL("--metrics-url", "http://10.1.2.3:8080/metrics"); err == nil {
		t.Error("non-loopback metrics URL accepted")
	}
	if u, err := loopbackURL("--metrics-url", "http://localhost:8080/metrics"); err != nil || u != "http://127.0.0.1:8080/metrics" {
		t.Errorf("localhost URL: %q, %v", u, err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"--addr", "10.0.0.1:8081", "--duration", "1s"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "loopback") ||
		!strings.Contains(errb.String(), "--allow-remote") {
		t.Errorf("non-loopback target: exit %d, stderr %q: want a refusal that names --allow-remote", code, errb.String())
	}
}

// TestAllowRemoteTargets: --allow-remote takes any host, a list and a
// dns:/// name (a Service from a pod), and still refuses what is no
// server's address.
func TestAllowRemoteTargets(t *testing.T) {
	for _, tc := range []struct {
		addr, name string
		balanced   bool
	}{
		{"10.0.0.1:8081", "10.0.0.1:8081", false},
		{"shared-limiter.default.svc:8081", "shared-limiter.default.svc:8081", false},
		{"10.0.0.1:8081,10.0.0.2:8081", "10.0.0.1:8081,10.0.0.2:8081", true},
		{"dns:///shared-limiter-headless.default.svc:8081", "dns:///shared-limiter-headless.default.svc:8081", true},
	} {
		got, err := parseTarget(tc.addr, true)
		if err != nil || got.name != tc.name || got.balanced != tc.balanced {
			t.Errorf("%s: target %+v, %v; want name %s, balanced %t", tc.addr, got, err, tc.name, tc.balanced)
		}
	}
	for _, bad := range []string{"0.0.0.0:8081", "[::]:8081", ":8081", "10.0.0.1", "dns:///limiter", "10.0.0.1:8081,", "10.0.0.1:0"} {
		if _, err := parseTarget(bad, true); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if u, err := checkURL("--metrics-url", "http://shared-limiter.default.svc:8080/metrics", true); err != nil || u != "http://shared-limiter.default.svc:8080/metrics" {
		t.Errorf("remote metrics URL: %q, %v", u, err)
	}
}

// TestBalancedTarget sends load to a list of two real RLS servers (on two
// loopback addresses, as a headless Service's DNS answer lists two pods)
// over 2 connections: round robin gives each server about half the calls,
// where one connection per server (kube-proxy's balancing) can leave one
// idle. The result counts answers per server. A dns:/// target resolves
// through gRPC's DNS resolver.
func TestBalancedTarget(t *testing.T) {
	var servers []*noopServer
	for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		s, err := startNoop(ip+":0", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Stop()
		servers = append(servers, s)
	}
	var out, errb bytes.Buffer
	list := servers[0].GRPCAddr() + "," + servers[1].GRPCAddr()
	// Loopback addresses need no --allow-remote, even in a list.
	code := run([]string{"--addr", list, "--conns", "2", "--concurrency", "8", "--duration", "300ms", "--warmup", "0s",
		"--max-requests", "4000", "--domain", "bench", "--descriptor", "user_id=%d", "--json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var res Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Backends) != 2 {
		t.Fatalf("answers by server %v: want both servers", res.Backends)
	}
	var sum uint64
	for _, s := range servers {
		n := res.Backends[s.GRPCAddr()]
		if n < res.Decisions/4 {
			t.Errorf("server %s answered %d of %d decisions: round robin gives each about half", s.GRPCAddr(), n, res.Decisions)
		}
		sum += n
	}
	if sum != res.Decisions {
		t.Errorf("answers by server sum to %d, decisions %d", sum, res.Decisions)
	}
	t.Logf("round robin over %s: %v of %d decisions", list, res.Backends, res.Decisions)

	// dns:/// needs --allow-remote; localhost resolves through the
	// system's resolver to the first server.
	_, port, _ := strings.Cut(servers[0].GRPCAddr(), ":")
	local, err := startNoop("127.0.0.1:"+port, "", 0)
	if err != nil {
		t.Fatalf("a server on 127.0.0.1:%s for dns:///localhost: %v", port, err)
	}
	defer local.Stop()
	out.Reset()
	if code := run([]string{"--addr", "dns:///localhost:" + port, "--allow-remote", "--probe"}, &out, &errb); code != 0 {
		t.Fatalf("dns:///localhost:%s: exit %d: %s", port, code, errb.String())
	}
}

func TestTemplate(t *testing.T) {
	tmpl, err := parseTemplate("user_id=u%d,path=/v1/charges;ip=10.0.%d.1")
	if err != nil {
		t.Fatal(err)
	}
	req := newRequestBuilder(tmpl, "d", 2).build(42)
	if len(req.Descriptors) != 2 || req.HitsAddend != 2 || req.Domain != "d" {
		t.Fatalf("request %v", req)
	}
	e := req.Descriptors[0].Entries
	if e[0].Key != "user_id" || e[0].Value != "u42" || e[1].Value != "/v1/charges" || req.Descriptors[1].Entries[0].Value != "10.0.42.1" {
		t.Fatalf("entries %v %v", e, req.Descriptors[1].Entries)
	}
	for _, bad := range []string{"", "user_id", "=x", "a=1,a=2", "a="} {
		if _, err := parseTemplate(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// testProc is a /proc with process 1234 and a /proc/stat.
func testProc(t *testing.T) procfs.FS {
	t.Helper()
	fs, err := procfs.NewFS("testdata/proc")
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestParseProcStatAndMetrics(t *testing.T) {
	comm, s, err := readProcStat(testProc(t), 1234)
	if err != nil || comm != "my (odd) proc" || s != 3.0 {
		t.Fatalf("readProcStat = %q %v %v", comm, s, err)
	}
	if _, _, err := readProcStat(testProc(t), 999); err == nil {
		t.Fatal("read a process that is not there")
	}
	text := "# HELP process_cpu_seconds_total x\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total_other 9\nprocess_cpu_seconds_total 12.5\n"
	v, ok, err := parseCPUMetric(strings.NewReader(text))
	if err != nil || !ok || v != 12.5 {
		t.Fatalf("parseCPUMetric = %v %v %v", v, ok, err)
	}
	if _, ok, _ := parseCPUMetric(strings.NewReader("go_goroutines 3\n")); ok {
		t.Fatal("found a metric that is not there")
	}
}

// TestRunAgainstNoop is a short real run over loopback against the
// in-process do-nothing server, measuring its CPU through its /metrics. It
// asserts counts, not timings.
func TestRunAgainstNoop(t *testing.T) {
	s, err := startNoop("127.0.0.1:0", "127.0.0.1:0", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	cpu, err := metricsSource("http://"+s.MetricsAddr()+"/metrics", false)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := pidSource(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// On a loaded machine the connections may not be up within a short
	// run's window: run again, twice as long, until decisions are counted.
	var res *Result
	for d := 300 * time.Millisecond; ; d *= 2 {
		var err error
		res, err = Run(ctx, Config{
			Addr: s.GRPCAddr(), Conns: 2, Concurrency: 8, Keys: 100,
			Duration: d, Warmup: 50 * time.Millisecond,
			Domain: "bench", Descriptor: "user_id=%d", Hits: 1,
			MaxRequests: 1_000_000, Timeout: 5 * time.Second,
			CPU: []cpuSource{cpu, pid},
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Decisions > 0 || d > 20*time.Second {
			break
		}
		t.Logf("a %v run counted no decision (first error %q): again, longer", d, res.FirstError)
	}
	if res.Decisions == 0 || res.OK != res.Decisions || res.Errors != 0 || res.OverLimit != 0 {
		t.Fatalf("decisions %d ok %d over %d errors %d (%s)", res.Decisions, res.OK, res.OverLimit, res.Errors, res.FirstError)
	}
	if res.Latency.Count != res.Decisions || res.Latency.P50 <= 0 || res.Latency.Max < res.Latency.P99 {
		t.Fatalf("latency %+v", res.Latency)
	}
	if res.ServerCPU == nil || res.ServerCPU.Error != "" || len(res.ServerCPU.Processes) != 2 {
		t.Fatalf("server CPU %+v", res.ServerCPU)
	}
	if res.StoppedBy != "duration" {
		t.Errorf("stopped by %q", res.StoppedBy)
	}
}

// TestRunMaxRequestsAndReport bounds a run by count through the command
// line, writes its JSON, and reads it back with the report subcommand.
func TestRunMaxRequestsAndReport(t *testing.T) {
	s, err := startNoop("127.0.0.1:0", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	dir := t.TempDir()
	file := filepath.Join(dir, "noop.json")
	var out, errb bytes.Buffer
	code := run([]string{"--addr", s.GRPCAddr(), "--concurrency", "4", "--conns", "1", "--keys", "10",
		"--duration", "30s", "--warmup", "0s", "--max-requests", "500", "--domain", "bench",
		"--descriptor", "user_id=%d", "--server-pid", strconv.Itoa(os.Getpid()), "--json-file", file, "--label", "noop"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var res Result
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	if res.StoppedBy != "max-requests" || res.Sent != 500 || res.Decisions == 0 || res.Decisions > 500 || res.Errors != 0 {
		t.Fatalf("result %+v", res)
	}
	if !strings.Contains(out.String(), "== noop") || !strings.Contains(out.String(), "decisions/s") {
		t.Fatalf("text output:\n%s", out.String())
	}
	out.Reset()
	if code := run([]string{"report", "noop=" + file, "memory=" + file, "redis=" + filepath.Join(dir, "none.json")}, &out, &errb); code != 0 {
		t.Fatalf("report exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"noop", "memory", "1.00x", "no result"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestMachineBusy(t *testing.T) {
	// testdata/proc/stat: cpu user nice system idle iowait irq softirq
	// steal guest guest_nice = 100 20 30 1000 50 5 5 10 7 0 ticks.
	busy, err := machineBusyIn(testProc(t))
	if err != nil || math.Abs(busy-1.7) > 1e-9 {
		t.Fatalf("machineBusyIn = %v, %v; want 1.7", busy, err)
	}
	if _, err := machineBusy(); err != nil {
		t.Fatalf("this machine's /proc/stat: %v", err)
	}
}

// TestRounds compares each run with its own round's baseline and prints
// the ranges over the rounds.
func TestRounds(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, perSec, us, p99 float64) string {
		r := Result{DecisionsPerSec: perSec, Latency: Latency{P99: p99}, ServerCPU: &CPUResult{UsPerDecision: us}}
		data, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, name+".json")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return file
	}
	// Round 1: redis at 0.5 of noop, twice its CPU; round 2: 0.8, 1.5x.
	args := []string{
		"rounds",
		"noop=" + write("n1", 1000, 20, 1000),
		"redis=" + write("r1", 500, 40, 5000),
		"noop=" + write("n2", 2000, 20, 1000),
		"redis=" + write("r2", 1600, 30, 3000),
		"memory=" + filepath.Join(dir, "none.json"),
	}
	var out, errb bytes.Buffer
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("rounds exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"0.50–0.80", "1.50–2.00", "30.0–40.0", "500–1,600", "3.00–5.00", "0 (1 failed)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("rounds lacks %q:\n%s", want, out.String())
		}
	}
}

// TestNoopWait: with --noop-wait the do-nothing server holds every call at
// least that long (a lower bound: a loaded machine only adds to it), and the
// flag is refused when negative or without --serve-noop.
func TestNoopWait(t *testing.T) {
	const wait = 40 * time.Millisecond
	s, err := startNoop("127.0.0.1:0", "", wait)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{
		Addr: s.GRPCAddr(), Conns: 1, Concurrency: 4, Keys: 10,
		Duration: 30 * time.Second, Warmup: 0, MaxRequests: 40,
		Domain: "bench", Descriptor: "user_id=%d", Hits: 1, Timeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Decisions == 0 || res.Errors != 0 {
		t.Fatalf("decisions %d errors %d (%s)", res.Decisions, res.Errors, res.FirstError)
	}
	if floor := float64(wait.Microseconds()); res.Latency.Mean < floor {
		t.Fatalf("mean latency %.0fµs, want at least the wait, %.0fµs", res.Latency.Mean, floor)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--serve-noop", "127.0.0.1:0", "--noop-wait", "-1ms"}, "--noop-wait -1ms: want 0 or more"},
		{[]string{"--noop-wait", "1ms"}, "--noop-wait 1ms: only with --serve-noop"},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q, want exit 2 naming %q", tc.args, code, errb.String(), tc.want)
		}
	}
}
