package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testwait"
	"github.com/sluice-dev/sluice/limiter/config"
)

// limiterBin is the limiter built once for this test binary.
var limiterBin string

// storeErrorSeries matches a series of sluice_store_errors_total above 0.
var storeErrorSeries = regexp.MustCompile(`(?m)^sluice_store_errors_total\{[^}]*\} [1-9]`)

// settle is how long a test waits for another process to do something
// asynchronous: sized for a loaded 2-core machine running -race.
const settle = time.Minute

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "limiter-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	limiterBin = filepath.Join(dir, "limiter")
	build := exec.Command("go", "build", "-o", limiterBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	stopAPIServer()
	os.RemoveAll(dir)
	os.Exit(code)
}

// policy is a one-policy file: limit requests a minute per user in domain
// shop, all at once if they like.
func policy(limit int) string {
	return fmt.Sprintf(`apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-user, namespace: shop}
spec:
  domain: shop
  descriptors: [{key: user}]
  algorithm: TokenBucket
  rate: {limit: %d, period: 1m}
`, limit)
}

// writeAtomic replaces path's content in one rename, as editors and
// Kubernetes do, so the limiter never reads half a file.
func writeAtomic(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// logBuffer collects a process's stderr and finds its listen addresses in
// the JSON log.
type logBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	serving chan [3]string // grpc, http, admin
}

func (l *logBuffer) consume(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		l.mu.Lock()
		l.buf.Write(line)
		l.buf.WriteByte('\n')
		l.mu.Unlock()
		var rec struct{ Msg, GRPC, HTTP, Admin string }
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "Serving" {
			l.serving <- [3]string{rec.GRPC, rec.HTTP, rec.Admin}
		}
	}
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// process is a running limiter.
type process struct {
	cmd      *exec.Cmd
	log      *logBuffer
	http     string // base URL of the data plane
	adminURL string // base URL of the admin plane
	grpc     string // host:port
	exited   chan error
}

// startLimiter runs the limiter on free loopback ports (port 0; the
// addresses come from its log) and stops it with SIGTERM when the test
// ends, expecting a clean exit.
func startLimiter(t *testing.T, args ...string) *process {
	t.Helper()
	return startLimiterEnv(t, nil, args...)
}

// startLimiterEnv is startLimiter with env added to the test's
// environment.
func startLimiterEnv(t *testing.T, env []string, args ...string) *process {
	t.Helper()
	return startLimiterBinary(t, limiterBin, env, args...)
}

// startLimiterBinary is startLimiterEnv with the limiter binary bin, such
// as an earlier release's.
func startLimiterBinary(t *testing.T, bin string, env []string, args ...string) *process {
	t.Helper()
	// No drain delay unless the test asks: nothing routes by readiness here.
	args = append([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--log-format", "json", "--drain-delay", "0s"}, args...)
	p := &process{
		cmd:    exec.Command(bin, args...),
		log:    &logBuffer{serving: make(chan [3]string, 1)},
		exited: make(chan error, 1),
	}
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logDone := make(chan struct{})
	go func() {
		p.log.consume(stderr)
		close(logDone)
	}()
	go func() {
		<-logDone // Wait closes the pipe: read it all first
		p.exited <- p.cmd.Wait()
	}()
	t.Cleanup(func() { p.stop(t) })
	select {
	case addrs := <-p.log.serving:
		p.grpc, p.http, p.adminURL = addrs[0], "http://"+addrs[1], "http://"+addrs[2]
	case err := <-p.exited:
		p.exited <- err
		t.Fatalf("limiter exited before serving: %v\n%s", err, p.log)
	case <-time.After(settle):
		t.Fatalf("limiter did not serve within %v\n%s", settle, p.log)
	}
	return p
}

func (p *process) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		p.exited <- err
		if err != nil {
			t.Errorf("limiter exited with %v after SIGTERM, want 0\n%s", err, p.log)
		}
	case <-time.After(settle):
		_ = p.cmd.Process.Kill()
		t.Errorf("limiter did not exit within %v of SIGTERM\n%s", settle, p.log)
	}
}

// check asks whether user may make one request, returning the HTTP status
// and the X-RateLimit-Limit header.
func (p *process) check(t *testing.T, user string) (int, string) {
	t.Helper()
	body := `{"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"` + user + `"}]}]}`
	resp, err := http.Post(p.http+"/v1/ratelimit/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("check: %d %s", resp.StatusCode, b)
	}
	return resp.StatusCode, resp.Header.Get("X-RateLimit-Limit")
}

// expectLimit checks that user gets exactly limit requests, then a 429.
func (p *process) expectLimit(t *testing.T, user string, limit int) {
	t.Helper()
	for i := 1; i <= limit+1; i++ {
		code, lim := p.check(t, user)
		want := http.StatusOK
		if i > limit {
			want = http.StatusTooManyRequests
		}
		if code != want || lim != fmt.Sprint(limit) {
			t.Fatalf("user %s request %d: %d with X-RateLimit-Limit %q, want %d with %d", user, i, code, lim, want, limit)
		}
	}
}

// get GETs path on the data plane.
func (p *process) get(t *testing.T, path string) (int, string) {
	t.Helper()
	return getURL(t, p.http+path)
}

// adminGet GETs path on the admin plane.
func (p *process) adminGet(t *testing.T, path string) (int, string) {
	t.Helper()
	return getURL(t, p.adminURL+path)
}

func getURL(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// metrics parses the limiter's /metrics.
func (p *process) metrics(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	_, text := p.adminGet(t, "/metrics")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return mfs
}

// sampleValue is the value of a counter, gauge or untyped sample.
func sampleValue(m *dto.Metric) float64 {
	return m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
}

type readiness struct {
	Ready           bool
	SnapshotVersion string
	Checks          map[string]struct {
		OK     bool
		Detail string
	}
}

func (p *process) readyz(t *testing.T) (int, readiness) {
	t.Helper()
	code, body := p.get(t, "/readyz")
	var r readiness
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("/readyz body %q: %v", body, err)
	}
	return code, r
}

// eventually polls cond until it says done, failing the test after settle
// (extended on a loaded machine: internal/testwait) with what cond saw last.
func eventually(t *testing.T, what string, cond func() (done bool, saw string)) {
	t.Helper()
	deadline := testwait.New(settle)
	for {
		done, saw := cond()
		if done {
			return
		}
		if deadline.Passed(func(format string, args ...any) { t.Logf("%s: "+format, append([]any{what}, args...)...) }) {
			t.Fatalf("%s: not within %v; last seen: %s", what, deadline.Waited(), saw)
		}
		time.Sleep(20 * time.Millisecond) // polling another process
	}
}

func versionOf(t *testing.T, data string) string {
	t.Helper()
	snap, err := config.Parse("test", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return snap.Version
}

func TestInvalidPolicyFileExits(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, data string
		want       []string // in stderr
	}{
		{"rate-limit-zero.yaml", strings.Replace(policy(1), "limit: 1,", "limit: 0,", 1),
			[]string{"document 1", "shop/per-user", "spec.limit.rate.limit", "greater than or equal to 1"}},
		{"unknown-field.yaml", strings.Replace(policy(5), "algorithm:", "algorithim:", 1),
			[]string{"document 1", "shop/per-user", `unknown field "spec.algorithim"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			if err := os.WriteFile(path, []byte(tc.data), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, limiterBin, "--policies", path, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() == 0 {
				t.Fatalf("limiter with %s: %v, want a non-zero exit\n%s", tc.name, err, stderr.String())
			}
			for _, w := range append([]string{path}, tc.want...) {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr does not name %q:\n%s", w, stderr.String())
				}
			}
		})
	}

	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{
			{},
			{"--policies", filepath.Join(dir, "missing.yaml")},
			{"--policies", "../../config/samples/policies.yaml", "--store", "postgres://x"},
			{"--policies", "../../config/samples/policies.yaml", "--store", "redis://no-port"},
			{"--policies", "../../config/samples/policies.yaml", "--log-format", "xml"},
			{"--policies", "../../config/samples/policies.yaml", "--enforcement", "off"},
			{"--policies", "../../config/samples/policies.yaml", "--idempotency-ttl", "0s"},
			{"--policies", "../../config/samples/policies.yaml", "--idempotency-ttl", "25h"},
			{"--policies", "../../config/samples/policies.yaml", "--idempotency-max-records", "0"},
			{"--policies", "../../config/samples/policies.yaml", "--idempotency-max-records", "100001"},
			{"--policies", "../../config/samples/policies.yaml", "--idempotency-entry", ""},
			{"--policies", "../../config/samples/policies.yaml", "--local-fallback-pods", "0"},
			{"--policies", "../../config/samples/policies.yaml", "--top-descriptors", "21"},
			{"--policies", "../../config/samples/policies.yaml", "--top-descriptors", "5", "--top-descriptor-values", "plain"},
			{"--policies", "../../config/samples/policies.yaml", "--top-descriptors", "5", "--top-descriptor-truncate", "0"},
			{"--policies", "../../config/samples/policies.yaml", "--top-descriptors", "5", "--top-descriptor-interval", "500ms"},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			cmd := exec.CommandContext(ctx, limiterBin, append(args, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")...)
			out, err := cmd.CombinedOutput()
			cancel()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() == 0 || !strings.Contains(string(out), "limiter: ") {
				t.Errorf("limiter %q: %v, want a non-zero exit with a message\n%s", args, err, out)
			}
			// A bad flag is named with its value.
			if i := slices.IndexFunc(args, func(a string) bool {
				return strings.HasPrefix(a, "--top-") || strings.HasPrefix(a, "--idempotency-max-records") || a == "--idempotency-ttl"
			}); i >= 0 {
				bad := args[len(args)-2] + " " + args[len(args)-1]
				if !strings.Contains(strings.ReplaceAll(string(out), `"`, ""), bad) {
					t.Errorf("limiter %q: the message does not name %q:\n%s", args, bad, out)
				}
			}
		}
	})
}

func TestHotReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	writeAtomic(t, path, policy(5))
	p := startLimiter(t, "--policies", path)

	code, rd := p.readyz(t)
	if code != http.StatusOK || rd.SnapshotVersion != versionOf(t, policy(5)) {
		t.Fatalf("/readyz at start: %d %+v", code, rd)
	}
	p.expectLimit(t, "ann", 5)

	// A lower limit is enforced without a restart.
	writeAtomic(t, path, policy(2))
	v2 := versionOf(t, policy(2))
	eventually(t, "new policies loaded", func() (bool, string) {
		_, rd := p.readyz(t)
		return rd.SnapshotVersion == v2, "snapshot version " + rd.SnapshotVersion
	})
	p.expectLimit(t, "bea", 2)
	if code, _ := p.check(t, "ann"); code != http.StatusTooManyRequests {
		t.Errorf("ann after the reload: %d, want still limited", code)
	}
	_, metrics := p.adminGet(t, "/metrics")
	for _, want := range []string{
		`sluice_config_info{version="` + v2 + `"} 1`,
		"sluice_config_reload_errors_total 0",
		"sluice_config_last_reload_successful 1",
		"sluice_config_last_reload_success_timestamp_seconds ",
		`sluice_decisions_total{domain="shop",policy="shop/per-user",result="limited"} `,
		"go_goroutines ",
		"process_cpu_seconds_total ",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if v1 := versionOf(t, policy(5)); strings.Contains(metrics, v1) {
		t.Errorf("/metrics still shows the old version %s", v1)
	}
	if !strings.Contains(p.log.String(), `"msg":"Loaded policies"`) || !strings.Contains(p.log.String(), `"version":"`+v2+`"`) {
		t.Errorf("log lacks Loaded policies with version %s:\n%s", v2, p.log)
	}

	// A broken file is reported and ignored: the limit of 2 stays.
	writeAtomic(t, path, policy(0))
	eventually(t, "reload error counted", func() (bool, string) {
		_, m := p.adminGet(t, "/metrics")
		return strings.Contains(m, "sluice_config_reload_errors_total 1\n"), "sluice_config_reload_errors_total " + p.metric(t, "sluice_config_reload_errors_total")
	})
	p.expectLimit(t, "cid", 2)
	code, rd = p.readyz(t)
	if code != http.StatusOK || rd.SnapshotVersion != v2 || !strings.Contains(rd.Checks["config"].Detail, "spec.limit.rate.limit") {
		t.Errorf("/readyz after a bad reload: %d %+v, want ready on %s with the error in config's detail", code, rd, v2)
	}
	_, metrics = p.adminGet(t, "/metrics")
	for _, want := range []string{
		"sluice_config_reload_errors_total 1\n",
		"sluice_config_last_reload_successful 0",
		`sluice_config_info{version="` + v2 + `"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics after a bad reload lacks %q", want)
		}
	}
	if log := p.log.String(); !strings.Contains(log, "Policy file not reloaded") || !strings.Contains(log, "spec.limit.rate.limit") {
		t.Errorf("log lacks the reload error:\n%s", log)
	}

	// Fixed again: the new limit applies and the error clears.
	writeAtomic(t, path, policy(3))
	v3 := versionOf(t, policy(3))
	eventually(t, "fixed policies loaded", func() (bool, string) {
		_, rd := p.readyz(t)
		return rd.SnapshotVersion == v3, "snapshot version " + rd.SnapshotVersion
	})
	p.expectLimit(t, "dan", 3)
	if _, rd := p.readyz(t); strings.Contains(rd.Checks["config"].Detail, "failed") {
		t.Errorf("/readyz still reports the old error: %+v", rd)
	}
}

// TestSharedRedis runs two limiters on one redis-server: a user's requests
// are counted once, whichever limiter answers.
func TestSharedRedis(t *testing.T) {
	rs := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "policies.yaml")
	writeAtomic(t, path, policy(4))
	store := "redis://" + rs.Addr
	// A generous deadline: -race and a busy machine must not fail open.
	a := startLimiter(t, "--policies", path, "--store", store, "--redis-timeout", "2s")
	b := startLimiter(t, "--policies", path, "--store", store, "--redis-timeout", "2s")

	for _, p := range []*process{a, b} {
		awaitStoreReady(t, p)
	}
	for i := 1; i <= 5; i++ {
		p := []*process{a, b}[i%2]
		code, _ := p.check(t, "eve")
		if want := map[bool]int{true: http.StatusOK, false: http.StatusTooManyRequests}[i <= 4]; code != want {
			t.Fatalf("request %d: %d, want %d", i, code, want)
		}
	}
	if code, _ := a.check(t, "eve"); code != http.StatusTooManyRequests {
		t.Fatalf("the other limiter: %d, want 429", code)
	}
	for _, p := range []*process{a, b} {
		_, m := p.adminGet(t, "/metrics")
		if strings.Contains(m, `result="failed_open"} 1`) || storeErrorSeries.MatchString(m) {
			t.Errorf("a decision failed open; Redis should have answered all:\n%s", m)
		}
	}

	// Without Redis the limiter still answers, by each policy's failure
	// mode: it stays ready, and /readyz says what runs degraded.
	rs.Stop()
	if code, _ := a.check(t, "fay"); code != http.StatusOK {
		t.Fatalf("failureMode Open with Redis down: %d, want 200", code)
	}
	eventually(t, "/readyz reports the store and the policy degraded", func() (bool, string) {
		code, rd := a.readyz(t)
		return code == http.StatusOK && rd.Ready && rd.Checks["store"].OK &&
			strings.Contains(rd.Checks["store"].Detail, "degraded") &&
			strings.Contains(rd.Checks["degraded"].Detail, "shop/per-user runs degraded"), fmt.Sprintf("%d %+v", code, rd)
	})
	// The store errors say why: refused connections, then the open
	// breaker; none waited to be sent.
	_, m := a.adminGet(t, "/metrics")
	if !regexp.MustCompile(`(?m)^sluice_store_errors_total\{cause="(error|unavailable)"\} [1-9]`).MatchString(m) ||
		!strings.Contains(m, `sluice_store_errors_total{cause="queued"} 0`) {
		t.Errorf("store errors with Redis down, want some of cause error or unavailable and none queued:\n%s", grepLines(m, "sluice_store_errors_total"))
	}
}

// TestRedisOverTLS: two limiter processes share a TLS Redis that requires a
// password, which they take from $SLUICE_REDIS_PASSWORD (as the operator
// hands it over from a Secret), and count together.
// awaitStoreReady waits until p's /readyz says it is ready with its Redis
// store pinged: once the store has warmed up (a connection to Redis and
// its scripts loaded there, moments after start).
func awaitStoreReady(t *testing.T, p *process) {
	t.Helper()
	eventually(t, "/readyz ready with the store pinged", func() (bool, string) {
		code, rd := p.readyz(t)
		return code == http.StatusOK && rd.Checks["store"].OK, fmt.Sprintf("%d %+v", code, rd)
	})
}

func TestRedisOverTLS(t *testing.T) {
	const pw = "s3cret@with/odd%chars"
	rs := redistest.StartTLS(t, "requirepass "+pw)
	t.Setenv(limiterwire.RedisPasswordEnv, pw)
	path := filepath.Join(t.TempDir(), "policies.yaml")
	writeAtomic(t, path, policy(3))
	args := []string{"--policies", path, "--store", "rediss://" + rs.TLSAddr, "--redis-ca-file", rs.CAFile, "--redis-timeout", "2s"}
	a, b := startLimiter(t, args...), startLimiter(t, args...)
	for _, p := range []*process{a, b} {
		awaitStoreReady(t, p)
	}
	for i := 1; i <= 4; i++ {
		code, _ := []*process{a, b}[i%2].check(t, "tls")
		if want := map[bool]int{true: http.StatusOK, false: http.StatusTooManyRequests}[i <= 3]; code != want {
			t.Fatalf("request %d: %d, want %d\n%s", i, code, want, a.log)
		}
	}
	if strings.Contains(a.log.String(), pw) || strings.Contains(b.log.String(), pw) {
		t.Error("a limiter logged the password")
	}
}

// post POSTs body to path on the data plane with the headers given as
// name, value pairs, returning the status, the headers and the body.
func (p *process) post(t *testing.T, path, body string, headers ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, p.http+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// grepLines is the lines of text that start with prefix.
func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
