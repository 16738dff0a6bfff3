package service_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// downStore is a Redis store whose server has been killed.
func downStore(t testing.TB) *redisstore.Store {
	t.Helper()
	srv := redistest.Start(t)
	st, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	srv.Stop()
	return st
}

const localPolicy = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: local, namespace: modes}
spec:
  domain: modes
  descriptors: [{key: local}]
  algorithm: TokenBucket
  rate: {limit: 10, period: 1h}
  failureMode: Local
`

// failureMode Local enforces limit / ready pods in memory while Redis is
// down, and the policy is reported degraded.
func TestLocalEnforcesTheShareOfReadyPods(t *testing.T) {
	svc, reg := newService(t, downStore(t))
	snap, err := config.Parse("inline", []byte(localPolicy))
	if err != nil {
		t.Fatal(err)
	}
	svc.Swap(snap)
	if d := svc.DegradedDetail(); !strings.HasPrefix(d, "no policy degraded") {
		t.Fatalf("degraded before any fallback: %q", d)
	}
	for _, tc := range []struct {
		pods, want int
	}{{1, 10}, {2, 5}, {3, 3}, {4, 3}, {20, 1}, {0, 10}} {
		svc.SetReadyPods(tc.pods)
		user := "pods-" + string(rune('a'+tc.pods))
		allowed := 0
		for range 30 {
			r := call(t, svc, "modes", 0, desc("local", user))
			if got := r.Reported.Reason; got != service.ReasonLocal {
				t.Fatalf("local decision with reason %q", got)
			}
			if !r.OverLimit {
				allowed++
			}
		}
		if allowed != tc.want {
			t.Errorf("%d ready pods: %d of 30 allowed, want a share of %d", tc.pods, allowed, tc.want)
		}
	}
	if got := decisions(t, reg, "modes/local", "local_fallback"); got != 180 {
		t.Errorf("local_fallback = %v, want 180", got)
	}
	ds := svc.Degraded()
	if len(ds) != 1 || ds[0].Policy != "modes/local" || ds[0].FailureMode != "Local" || ds[0].Fallbacks != 180 {
		t.Fatalf("Degraded() = %+v", ds)
	}
	if d := svc.DegradedDetail(); !strings.Contains(d, "modes/local runs degraded") || !strings.Contains(d, "failureMode Local") {
		t.Errorf("degraded detail %q", d)
	}
}

// Closed says why it denied, and which policy did (the adapters put both
// in a header and in the RLS dynamic metadata).
func TestClosedDenialCarriesTheReason(t *testing.T) {
	svc, reg := newService(t, downStore(t))
	r := call(t, svc, "modes", 0, desc("closed", "x"))
	if !r.OverLimit || !r.Decisions[0].OverLimit || r.Reported != r.Decisions[0] {
		t.Fatalf("Closed with Redis down: %+v", r)
	}
	if r.Reported.Reason != service.ReasonFailedClosed || policyOf(r.Reported) != "modes/closed" {
		t.Errorf("reported %+v", r.Reported)
	}
	if got := decisions(t, reg, "modes/closed", "failed_closed"); got != 1 {
		t.Errorf("failed_closed = %v", got)
	}
}

// The kill switch allows everything without a restart; decisions are still
// made and would-be denials counted as shadow. Either switch turns it on:
// this pod's (SetEnforcement) or the fleet's (the snapshot).
func TestKillSwitch(t *testing.T) {
	svc, reg := newService(t, nil)
	for range 5 {
		call(t, svc, "shop", 0, desc("user", "kim"))
	}
	if r := call(t, svc, "shop", 0, desc("user", "kim")); !r.OverLimit {
		t.Fatalf("6th request with enforcement on: %+v", r)
	}
	svc.SetEnforcement(false)
	if svc.Enforcing() || !strings.Contains(svc.EnforcementDetail(), "--enforcement=disabled") {
		t.Fatalf("after SetEnforcement(false): enforcing %v, %q", svc.Enforcing(), svc.EnforcementDetail())
	}
	for i := range 3 {
		r := call(t, svc, "shop", 0, desc("user", "kim"))
		if r.OverLimit || r.Reported.Policy != nil {
			t.Fatalf("request %d with the kill switch: %+v", i, r)
		}
	}
	if got := decisions(t, reg, "shop/per-user", "shadow_limited"); got != 3 {
		t.Errorf("shadow_limited = %v, want 3", got)
	}
	svc.SetEnforcement(true)
	if r := call(t, svc, "shop", 0, desc("user", "kim")); !r.OverLimit {
		t.Fatalf("enforcement back on: %+v", r)
	}

	// The fleet's switch, in the snapshot.
	doc := config.DocumentOf(load(t))
	doc.Enforcement = config.EnforcementDisabled
	data, _ := config.EncodeDocument(doc)
	off, err := config.ParseDocument(data)
	if err != nil {
		t.Fatal(err)
	}
	svc.Swap(off)
	if r := call(t, svc, "shop", 0, desc("user", "kim")); r.OverLimit {
		t.Fatalf("snapshot disables enforcement: %+v", r)
	}
	if !strings.Contains(svc.EnforcementDetail(), "snapshot") {
		t.Errorf("detail %q", svc.EnforcementDetail())
	}
	svc.Swap(load(t))
	if r := call(t, svc, "shop", 0, desc("user", "kim")); !r.OverLimit {
		t.Fatalf("snapshot enables enforcement again: %+v", r)
	}

	// Switching under load is safe (-race) and takes effect at once.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					_, _ = svc.Decide(context.Background(), &service.Request{Domain: "shop", Descriptors: []service.Descriptor{desc("user", "kim")}})
				}
			}
		}()
	}
	for i := range 200 {
		svc.SetEnforcement(i%2 == 0)
	}
	close(stop)
	wg.Wait()
	svc.SetEnforcement(true)
	if r := call(t, svc, "shop", 0, desc("user", "kim")); !r.OverLimit {
		t.Fatalf("after toggling: %+v", r)
	}
}

const peekPolicy = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: tokens, namespace: peek}
spec:
  domain: peek
  descriptors: [{key: user}]
  algorithm: TokenBucket
  rate: {limit: 1000, period: 1h}
  failureMode: Open
`

// A status peek that could not read the store says so and reports no
// quota: before, failureMode Open's made-up figures told a caller who had
// spent 800 of 1000 that 1000 were left (seen once under load, when the
// peek's store call timed out). Against a real redis-server, paused.
func TestPeekWithoutTheStoreTellsNoFullQuota(t *testing.T) {
	srv := redistest.Start(t)
	st, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	svc, _ := newService(t, st)
	snap, err := config.Parse("inline", []byte(peekPolicy))
	if err != nil {
		t.Fatal(err)
	}
	svc.Swap(snap)
	if r := call(t, svc, "peek", 800, desc("user", "ann")); r.OverLimit || r.Reported.Reason != "" {
		t.Fatalf("take 800: %+v", r.Reported)
	}
	ps, err := svc.Peek(t.Context(), "peek", desc("user", "ann").Entries)
	if err != nil || len(ps) != 1 || ps[0].Remaining != 200 || ps[0].Unknown || ps[0].Reason != "" {
		t.Fatalf("peek with the store up: %+v %v, want 200 left", ps, err)
	}
	srv.Pause(t)
	defer srv.Resume(t)
	ps, err = svc.Peek(t.Context(), "peek", desc("user", "ann").Entries)
	if err != nil || len(ps) != 1 {
		t.Fatalf("peek with the store paused: %+v %v", ps, err)
	}
	if p := ps[0]; !p.Unknown || p.Remaining != 0 || p.ResetSeconds != 0 || p.Reason != service.ReasonFailedOpen {
		t.Fatalf("peek with the store paused: %+v, want unknown, 0 remaining and the reason %q", p, service.ReasonFailedOpen)
	}
}
