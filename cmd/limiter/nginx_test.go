package main_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testnet"
)

const (
	gatewaySamples  = "../../config/samples/gateways"
	gatewayPolicies = gatewaySamples + "/policies.yaml"
	// The sample policy requests-per-api-key: 5 requests a minute per key.
	apiKeyLimit = 5
)

// The addresses in config/samples/gateways/nginx/nginx.conf, which the test
// replaces with its own and nothing else.
const (
	nginxSampleApp     = "127.0.0.1:8000"
	nginxSampleLimiter = "127.0.0.1:8080"
	nginxSampleListen  = "127.0.0.1:8088"
)

// nginxBinary finds Debian's nginx. Without it the test is skipped, unless
// it runs in CI, where hack/install-deps.sh must have installed it.
func nginxBinary(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"nginx", "/usr/sbin/nginx"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("nginx is not installed, and CI is set: hack/install-deps.sh (make test) installs it")
	}
	t.Skip("nginx is not installed: run hack/install-deps.sh (make test does) to run the nginx end-to-end test")
	return ""
}

// nginxProxy is an nginx process running the sample config.
type nginxProxy struct {
	url    string
	stderr *logBuffer
}

// startNginx runs config/samples/gateways/nginx/nginx.conf, with only its
// addresses replaced, in the foreground under a temporary prefix, and stops
// it when the test ends.
func startNginx(t *testing.T, bin, app, limiter string) *nginxProxy {
	t.Helper()
	sample, err := os.ReadFile(filepath.Join(gatewaySamples, "nginx", "nginx.conf"))
	if err != nil {
		t.Fatal(err)
	}
	listen := freeLoopbackAddr(t)
	conf := string(sample)
	for _, r := range [][2]string{{nginxSampleApp, app}, {nginxSampleLimiter, limiter}, {nginxSampleListen, listen}} {
		if !strings.Contains(conf, r[0]) {
			t.Fatalf("nginx.conf no longer holds the address %s that the test replaces", r[0])
		}
		conf = strings.ReplaceAll(conf, r[0], r[1])
	}
	// A world-readable prefix: nginx's workers drop root for nobody.
	prefix, err := os.MkdirTemp("", "sluice-nginx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(prefix) })
	if err := os.Chmod(prefix, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(prefix, "temp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(prefix, "nginx.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", prefix, "-c", "nginx.conf", "-e", "stderr",
		"-g", "daemon off; pid "+filepath.Join(prefix, "nginx.pid")+";")
	n := &nginxProxy{url: "http://" + listen, stderr: &logBuffer{}}
	cmd.Stderr = n.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGQUIT) // graceful shutdown
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("nginx did not exit within 20s of SIGQUIT\n%s", n.stderr)
		}
	})
	deadline := time.Now().Add(settle)
	for {
		c, err := net.DialTimeout("tcp", listen, time.Second)
		if err == nil {
			c.Close()
			return n
		}
		select {
		case err := <-exited:
			t.Fatalf("nginx exited: %v\n%s", err, n.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not listen on %s within %v\n%s", listen, settle, n.stderr)
		}
		time.Sleep(20 * time.Millisecond) // polling another process
	}
}

// freeLoopbackAddr is an address of the test process's loopback /24
// (internal/testnet) with a port that was free a moment ago: no other test
// process binds there meanwhile.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", testnet.IP(1)+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Write lets a logBuffer collect a process's stderr directly.
func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// get sends GET path through nginx with an X-Api-Key (none when empty).
func (n *nginxProxy) get(t *testing.T, apiKey string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, n.url+"/orders?page=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if apiKey != "" {
		req.Header.Set("X-Api-Key", apiKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET through nginx: %v\n%s", err, n.stderr)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// countingApp is the app behind nginx: its address, and how many
// requests it served.
func countingApp(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	served := &atomic.Int64{}
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		_, _ = io.WriteString(w, "orders\n")
	}))
	t.Cleanup(app.Close)
	return strings.TrimPrefix(app.URL, "http://"), served
}

// TestNginxForwardAuth runs the shipped nginx config in front of an app,
// with auth_request to a real limiter loaded with the shipped policies.
func TestNginxForwardAuth(t *testing.T) {
	bin := nginxBinary(t)
	app, served := countingApp(t)
	lim := startLimiter(t, "--policies", gatewayPolicies, "--trusted-proxies", "127.0.0.1")
	proxy := startNginx(t, bin, app, strings.TrimPrefix(lim.http, "http://"))

	t.Run("200 until the limit, then 429 with the headers", func(t *testing.T) {
		for i := 1; i <= apiKeyLimit; i++ {
			resp := proxy.get(t, "key-a")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("request %d: %d, want 200\n%s", i, resp.StatusCode, proxy.stderr)
			}
			requireHeader(t, resp, "X-RateLimit-Limit", strconv.Itoa(apiKeyLimit))
			requireHeader(t, resp, "X-RateLimit-Remaining", strconv.Itoa(apiKeyLimit-i))
			requireHeader(t, resp, "RateLimit-Policy", `"default/requests-per-api-key";q=5;w=60`)
		}
		resp := proxy.get(t, "key-a")
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("request %d: %d, want 429\n%s", apiKeyLimit+1, resp.StatusCode, proxy.stderr)
		}
		requireHeader(t, resp, "X-RateLimit-Limit", strconv.Itoa(apiKeyLimit))
		requireHeader(t, resp, "X-RateLimit-Remaining", "0")
		if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
			t.Fatalf("Retry-After %q: want 1 to 60 seconds", resp.Header.Get("Retry-After"))
		}
		if !strings.HasPrefix(resp.Header.Get("RateLimit"), `"default/requests-per-api-key";r=0;t=`) {
			t.Fatalf("RateLimit %q", resp.Header.Get("RateLimit"))
		}
		if got := served.Load(); got != apiKeyLimit {
			t.Fatalf("the app served %d requests, want %d: a denied one got through", got, apiKeyLimit)
		}
	})

	t.Run("another API key has its own limit", func(t *testing.T) {
		for i := 1; i <= apiKeyLimit; i++ {
			if resp := proxy.get(t, "key-b"); resp.StatusCode != http.StatusOK {
				t.Fatalf("key-b request %d: %d, want 200", i, resp.StatusCode)
			}
		}
		if resp := proxy.get(t, "key-b"); resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("key-b request %d: %d, want 429", apiKeyLimit+1, resp.StatusCode)
		}
		if resp := proxy.get(t, "key-a"); resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("key-a: %d, want still 429", resp.StatusCode)
		}
	})

	t.Run("no API key: onMissing Allow, counted", func(t *testing.T) {
		before := served.Load()
		if resp := proxy.get(t, ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("without X-Api-Key: %d, want 200 (onMissing Allow)", resp.StatusCode)
		}
		if served.Load() != before+1 {
			t.Fatal("the app did not serve the request")
		}
		want := `sluice_forward_auth_missing_total{domain="gateway",result="allowed"} 1`
		if _, m := lim.adminGet(t, "/metrics"); !strings.Contains(m, want) {
			t.Fatalf("metrics lack %q:\n%s", want, m)
		}
	})

	t.Run("limiter stopped: fail open", func(t *testing.T) {
		lim.stop(t)
		before := served.Load()
		resp := proxy.get(t, "key-a") // over its limit, but nobody can say so
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Sluice-Fail-Open") != "true" {
			t.Fatalf("with the limiter stopped: %d, X-Sluice-Fail-Open %q; want 200, true (the sample fails open)\n%s",
				resp.StatusCode, resp.Header.Get("X-Sluice-Fail-Open"), proxy.stderr)
		}
		if served.Load() != before+1 {
			t.Fatal("the app did not serve the request")
		}
	})
}

func requireHeader(t *testing.T, resp *http.Response, name, want string) {
	t.Helper()
	if got := resp.Header.Get(name); got != want {
		t.Fatalf("%s: %q, want %q (headers %v)", name, got, want, resp.Header)
	}
}

// getKeys sends GET through nginx with one X-Api-Key line per key.
func (n *nginxProxy) getKeys(t *testing.T, keys ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, n.url+"/orders?page=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		req.Header.Add("X-Api-Key", k)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET through nginx: %v\n%s", err, n.stderr)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// Through the shipped nginx sample: once key-a is over its limit, neither
// a second X-Api-Key line nor an over-long X-Api-Key gets a request to
// the app. Before, the limiter answered the over-long header 400, which
// auth_request turns into a 500 that @fail_open serves, and counted the
// two lines on the joined value "key-a, x", a fresh counter. (Forward-auth
// carries no cost, so an inflated cost can't come through nginx; the RLS
// and HTTP tests in limiter/server cover it.)
func TestAttackNginxForwardAuthHeaders(t *testing.T) {
	bin := nginxBinary(t)
	var served atomic.Int64
	var seen atomic.Value // the X-Api-Key lines the app saw last
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		seen.Store(strings.Join(r.Header.Values("X-Api-Key"), "|"))
		_, _ = io.WriteString(w, "orders\n")
	}))
	t.Cleanup(app.Close)
	lim := startLimiter(t, "--policies", gatewayPolicies, "--trusted-proxies", "127.0.0.1")
	proxy := startNginx(t, bin, strings.TrimPrefix(app.URL, "http://"), strings.TrimPrefix(lim.http, "http://"))

	for i := 1; i <= apiKeyLimit; i++ {
		if resp := proxy.getKeys(t, "key-a"); resp.StatusCode != http.StatusOK {
			t.Fatalf("key-a request %d: %d, want 200\n%s", i, resp.StatusCode, proxy.stderr)
		}
	}
	for _, tc := range []struct {
		name string
		keys []string
	}{
		{"key-a over its limit", []string{"key-a"}},
		{"key-a and a second X-Api-Key line", []string{"key-a", "x"}},
		{"a second line first", []string{"x", "key-a"}},
		{"an over-long X-Api-Key", []string{strings.Repeat("k", 1126)}},
		{"key-a and an over-long second line", []string{"key-a", strings.Repeat("k", 1126)}},
	} {
		resp := proxy.getKeys(t, tc.keys...)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Sluice-Fail-Open") != "" {
			t.Errorf("%s: %d (X-Sluice-Fail-Open %q), want 429: the app saw X-Api-Key %.60q\n%s", tc.name, resp.StatusCode,
				resp.Header.Get("X-Sluice-Fail-Open"), seen.Load(), proxy.stderr)
		}
	}
	if got := served.Load(); got != apiKeyLimit {
		t.Fatalf("the app served %d requests, want %d: a request over key-a's limit got through", got, apiKeyLimit)
	}
	want := `sluice_decisions_total{domain="gateway",policy="default/requests-per-api-key",result="refused"} 4`
	if _, m := lim.adminGet(t, "/metrics"); !strings.Contains(m, want) {
		t.Fatalf("metrics lack %q:\n%s", want, m)
	}
}

// rawGet sends GET /orders through nginx with header lines written by
// hand, so that they may hold any byte (Go's client refuses control
// bytes), and reads the answer.
func (n *nginxProxy) rawGet(t *testing.T, lines ...string) *http.Response {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(n.url, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	raw := "GET /orders?page=1 HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n" + strings.Join(lines, "\r\n")
	if len(lines) > 0 {
		raw += "\r\n"
	}
	if _, err := io.WriteString(c, raw+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading nginx's answer: %v\n%s", err, n.stderr)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// Through the shipped nginx sample: a control byte in any client header
// (nginx passes 0x01-0x1f and 0x7f to the auth subrequest) no longer gets
// Go's 400, which auth_request turned into a 500 that @fail_open served:
// 5 of 5 admitted past the limit before. An unread header changes
// nothing; X-Api-Key with one is refused. And a 4xx of the limiter (here a
// 431, from a limiter whose --max-header-bytes is below what nginx passes)
// is a denial in the sample, never failed open.
func TestAttackNginxControlByteSkipsNoLimit(t *testing.T) {
	bin := nginxBinary(t)
	app, served := countingApp(t)
	lim := startLimiter(t, "--policies", gatewayPolicies, "--trusted-proxies", "127.0.0.1")
	proxy := startNginx(t, bin, app, strings.TrimPrefix(lim.http, "http://"))
	for i := 1; i <= apiKeyLimit; i++ {
		if resp := proxy.rawGet(t, "X-Api-Key: key-a"); resp.StatusCode != http.StatusOK {
			t.Fatalf("key-a request %d: %d, want 200\n%s", i, resp.StatusCode, proxy.stderr)
		}
	}
	for _, tc := range []struct {
		name  string
		lines []string
	}{
		{"X-Junk: a\\x01b", []string{"X-Api-Key: key-a", "X-Junk: a\x01b"}},
		{"X-Junk: DEL", []string{"X-Api-Key: key-a", "X-Junk: \x7f"}},
		{"X-Junk: ESC", []string{"X-Junk: \x1b[0m", "X-Api-Key: key-a"}},
		{"X-Api-Key: key-a\\x01", []string{"X-Api-Key: key-a\x01"}},
		{"X-Api-Key: \\x1f", []string{"X-Api-Key: \x1f"}},
		{"X-Api-Key of obs-text", []string{"X-Api-Key: k\xe9y"}},
	} {
		for range 5 {
			resp := proxy.rawGet(t, tc.lines...)
			if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Sluice-Fail-Open") != "" {
				t.Fatalf("%s: %d (X-Sluice-Fail-Open %q), want 429\n%s", tc.name, resp.StatusCode, resp.Header.Get("X-Sluice-Fail-Open"), proxy.stderr)
			}
		}
	}
	if got := served.Load(); got != apiKeyLimit {
		t.Fatalf("the app served %d requests, want %d: a request over key-a's limit got through", got, apiKeyLimit)
	}
	// A fresh key with junk beside it is decided as it is, and counted
	// (the app, a Go server too, then answers the junk 400 itself).
	for i := 1; i <= apiKeyLimit; i++ {
		if resp := proxy.rawGet(t, "X-Api-Key: key-j", "X-Junk: a\x01b"); resp.StatusCode == http.StatusTooManyRequests {
			t.Fatalf("key-j request %d with a junk header: 429, want it admitted", i)
		}
	}
	if resp := proxy.rawGet(t, "X-Api-Key: key-j"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("key-j after %d requests with a junk header: %d, want 429: they were counted", apiKeyLimit, resp.StatusCode)
	}

	// The sample's side: a 4xx of the limiter is a denial.
	small := startLimiter(t, "--policies", gatewayPolicies, "--trusted-proxies", "127.0.0.1", "--max-header-bytes", "4096")
	proxy = startNginx(t, bin, app, strings.TrimPrefix(small.http, "http://"))
	before := served.Load()
	for range 3 {
		resp := proxy.rawGet(t, "X-Api-Key: key-b", "X-Junk: "+strings.Repeat("j", 6000), "X-Junk-2: "+strings.Repeat("j", 6000))
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Sluice-Fail-Open") != "" {
			t.Fatalf("a head over the limiter's 4+4 KiB: %d (X-Sluice-Fail-Open %q), want 429 (the limiter's 431 is a denial)\n%s",
				resp.StatusCode, resp.Header.Get("X-Sluice-Fail-Open"), proxy.stderr)
		}
	}
	if served.Load() != before {
		t.Fatal("the app served a request the limiter answered 431")
	}
}
