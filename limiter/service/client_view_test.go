package service_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

// serviceOn is a service deciding policies (YAML documents) on a memory
// store whose clock is stopped.
func serviceOn(t *testing.T, policies string) *service.Service {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(path, []byte(policies), 0o600); err != nil {
		t.Fatal(err)
	}
	snap, err := config.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	clock := storetest.NewClock()
	m := memory.New(memory.Options{Clock: clock.Now, SweepInterval: -1})
	t.Cleanup(func() { _ = m.Close() })
	svc := service.New(m, service.Options{})
	svc.Swap(snap)
	return svc
}

func ids(ps []*config.Policy) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.ID())
	}
	return out
}

// TestReportedWithHiddenPolicies: across descriptors, the client is told
// of the most restrictive visible policy, and of the longest wait of any
// denial: a hidden policy's is until its counter is full again.
func TestReportedWithHiddenPolicies(t *testing.T) {
	svc := serviceOn(t, `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: hidden, namespace: v}
spec: {domain: v, descriptors: [{key: a}], algorithm: TokenBucket, rate: {limit: 1, period: 1m}, visibility: Hidden}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: visible, namespace: v}
spec: {domain: v, descriptors: [{key: b}], algorithm: TokenBucket, rate: {limit: 4, period: 1m}, burst: 2}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: hourly, namespace: v}
spec: {domain: v, descriptors: [{key: c}], algorithm: FixedWindow, rate: {limit: 1, period: 1h}}
`)
	for i, want := range []struct {
		over       bool
		remaining  int64
		retryAfter time.Duration
		denied     string
		violated   []string
	}{
		{false, 1, 0, "", []string{}},
		// The hidden bucket (1 a minute) is empty: the visible one is
		// reported, with the hidden one's wait until full (60s).
		{true, 0, time.Minute, "v/hidden", []string{}},
		// Both deny: the visible bucket frees a unit in 15s, the hidden
		// one is full in 60s.
		{true, 0, time.Minute, "v/hidden", []string{"v/visible"}},
	} {
		resp := call(t, svc, "v", 0, desc("a", "x"), desc("b", "y"))
		r := resp.Reported
		if resp.OverLimit != want.over || r.OverLimit != want.over || policyOf(r) != "v/visible" || r.Result.Remaining != want.remaining ||
			r.RetryAfter != want.retryAfter || (r.Denied != nil) != (want.denied != "") || (r.Denied != nil && r.Denied.ID() != want.denied) ||
			!slices.Equal(ids(resp.Violated), want.violated) {
			t.Fatalf("request %d: over %v, reported %s %+v, wait %v, denied by %v, violated %v; want over %v, v/visible with %d remaining, wait %v, denied by %q, violated %v",
				i+1, resp.OverLimit, policyOf(r), r.Result, r.RetryAfter, r.Denied, ids(resp.Violated),
				want.over, want.remaining, want.retryAfter, want.denied, want.violated)
		}
		if d := resp.Decisions[0]; d.Policy != nil || d.OverLimit != (i > 0) {
			t.Fatalf("request %d: the hidden descriptor reports %s, over %v", i+1, policyOf(d), d.OverLimit)
		}
		if d := resp.Decisions[1]; policyOf(d) != "v/visible" || d.OverLimit != (i == 2) || (i == 2 && d.RetryAfter != 15*time.Second) {
			t.Fatalf("request %d: the visible descriptor: %s over %v wait %v", i+1, policyOf(d), d.OverLimit, d.RetryAfter)
		}
	}
	// A visible denial that waits longer sets the wait, and names itself.
	call(t, svc, "v", 0, desc("c", "z"))
	resp := call(t, svc, "v", 0, desc("a", "x"), desc("c", "z"))
	if r := resp.Reported; r.RetryAfter != time.Hour || r.Denied.ID() != "v/hourly" || policyOf(r) != "v/hourly" ||
		!slices.Equal(ids(resp.Violated), []string{"v/hourly"}) {
		t.Fatalf("hourly: reported %s, wait %v, denied by %v, violated %v", policyOf(r), r.RetryAfter, r.Denied, ids(resp.Violated))
	}
	// The status peek leaves the hidden policy out.
	if ps, err := svc.Peek(t.Context(), "v", []config.Entry{{Key: "a", Value: "x"}, {Key: "b", Value: "y"}}); err != nil || len(ps) != 1 || ps[0].Policy != "v/visible" {
		t.Fatalf("peek: %+v %v, want only v/visible", ps, err)
	}
}
