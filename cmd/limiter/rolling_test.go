package main_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
)

// endpoints plays the Kubernetes endpoints a gateway sends to: it polls
// each limiter's /readyz, as the kubelet's probe does, and drops a limiter
// from the set once it answers not ready or not at all, as the endpoint
// controller does. The delay between a limiter failing readiness and the
// gateway leaving it is the poll period, shorter than the drain delay as
// the endpoint propagation is shorter than the limiter's default (5s).
type endpoints struct {
	mu    sync.Mutex
	ready map[string]bool
	all   []string
}

func watchEndpoints(t *testing.T, every time.Duration, bases ...string) *endpoints {
	e := &endpoints{ready: map[string]bool{}, all: bases}
	for _, b := range bases {
		e.ready[b] = true
	}
	probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for _, b := range bases {
				ok := false
				if resp, err := probe.Get(b + "/readyz"); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					ok = resp.StatusCode == http.StatusOK
				}
				e.mu.Lock()
				e.ready[b] = ok
				e.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return e
}

// pick returns the i-th ready endpoint (round robin), skipping avoid, or ""
// when none is ready.
func (e *endpoints) pick(i int, avoid string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ready []string
	for _, b := range e.all {
		if e.ready[b] && b != avoid {
			ready = append(ready, b)
		}
	}
	if len(ready) == 0 {
		return ""
	}
	return ready[i%len(ready)]
}

// refused reports whether a request failed before anything was sent: the
// connection could not be opened. A client may send it again to another
// endpoint without counting it twice; any other failure (a connection
// reset or closed after the request was written, a timeout, a 5xx) leaves
// it not knowing whether the limiter counted it.
func refused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// Rolling a limiter loses no decision: a gateway-like client keeps a load
// on two limiters sharing Redis, through keep-alive connections, while one
// is sent SIGTERM. The terminating limiter fails readiness first and keeps
// serving through its drain delay, so the client leaves it before its
// listeners close; it then finishes what is in flight and gives back its
// local-tier grants. Every request gets a decision, the only errors are
// refused connections that the client retries on the other limiter, and
// the counters in Redis hold every allowed decision exactly. On main the
// limiter closed its listeners at once: the idle keep-alive connections
// it closed under the client's next request cut decisions off unanswered.
func TestRollingLosesNoDecision(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a load across a limiter's termination")
	}
	rs := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "policies.yaml")
	const limit = 1_000_000
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-user, namespace: shop}
spec:
  domain: shop
  descriptors: [{key: user}]
  algorithm: FixedWindow
  rate: {limit: %d, period: 1h}
  localTier: {enabled: true, ttl: 30s}
`, limit)), 0o644); err != nil {
		t.Fatal(err)
	}
	store := "redis://" + rs.Addr
	args := []string{"--policies", path, "--store", store, "--redis-timeout", "2s", "--drain-delay", "2s"}
	victim := startLimiter(t, args...)
	other := startLimiter(t, args...)
	eps := watchEndpoints(t, 200*time.Millisecond, victim.http, other.http)
	start := time.Now()

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		MaxIdleConns: 64, MaxIdleConnsPerHost: 32, IdleConnTimeout: time.Minute}}
	var (
		decisions, allowed, retried atomic.Int64
		mu                          sync.Mutex
		lost                        []string
	)
	body := `{"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"u1"}]}]}`
	send := func(base string) (int, error) {
		resp, err := client.Post(base+"/v1/ratelimit/check", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, err
	}
	stopLoad := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-stopLoad:
					return
				default:
				}
				base := eps.pick(i, "")
				code, err := send(base)
				if err != nil && refused(err) {
					retried.Add(1)
					if base = eps.pick(i, base); base != "" {
						code, err = send(base)
					}
				}
				switch {
				case err != nil:
					mu.Lock()
					lost = append(lost, fmt.Sprintf("%v after %v: %v", base, time.Since(start).Round(time.Millisecond), err))
					mu.Unlock()
				case code == http.StatusOK:
					decisions.Add(1)
					allowed.Add(1)
				case code == http.StatusTooManyRequests:
					decisions.Add(1)
				default:
					mu.Lock()
					lost = append(lost, fmt.Sprintf("%v: HTTP %d", base, code))
					mu.Unlock()
				}
			}
		})
	}

	// Load before the termination, and after the limiter is gone: waited
	// for by count, not by time, so a slow machine still sends it.
	eventually(t, "50 decisions before SIGTERM", func() (bool, string) {
		n := decisions.Load()
		return n >= 50, fmt.Sprintf("%d decisions", n)
	})
	before := decisions.Load()
	if err := victim.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var exitErr error
	select {
	case exitErr = <-victim.exited:
		victim.exited <- exitErr
	case <-time.After(settle):
		t.Fatalf("the limiter did not exit within %v of SIGTERM", settle)
	}
	exited := time.Since(start)
	atExit := decisions.Load()
	eventually(t, "50 decisions after the limiter exited", func() (bool, string) {
		n := decisions.Load() - atExit
		return n >= 50, fmt.Sprintf("%d decisions", n)
	})
	close(stopLoad)
	wg.Wait()

	if exitErr != nil {
		t.Fatalf("the terminated limiter exited with %v\n%s", exitErr, victim.log)
	}
	t.Logf("%d decisions (%d before SIGTERM), the limiter exited at %v, %d refused connections retried on the other limiter",
		decisions.Load(), before, exited.Round(time.Millisecond), retried.Load())
	if len(lost) > 0 {
		t.Fatalf("%d requests lost their decision (first: %s)", len(lost), lost[0])
	}
	if !strings.Contains(victim.log.String(), "Draining") {
		t.Errorf("the limiter's log says nothing of draining:\n%s", victim.log)
	}

	// Every allowed decision is counted in Redis once the survivor gives
	// its grants back too: the terminated one gave back what it held.
	other.stop(t)
	if time.Now().Truncate(time.Hour) != start.Truncate(time.Hour) {
		t.Skip("the run crossed an hour boundary: the window reset") // once an hour at most
	}
	peek := startLimiter(t, "--policies", path, "--store", store, "--redis-timeout", "2s", "--drain-delay", "0s")
	code, text := peek.get(t, "/v1/ratelimit/status?"+url.Values{"domain": {"shop"}, "user": {"u1"}}.Encode())
	var st struct {
		Policies []struct{ Remaining int64 }
	}
	if err := json.Unmarshal([]byte(text), &st); code != http.StatusOK || err != nil || len(st.Policies) != 1 {
		t.Fatalf("status peek: %d %s (%v)", code, text, err)
	}
	if used := limit - st.Policies[0].Remaining; used != allowed.Load() {
		t.Fatalf("Redis counted %d units, the limiters allowed %d: grants were not given back", used, allowed.Load())
	}
}
