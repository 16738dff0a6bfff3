package observe

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// reading is one pod's stats answer with one policy, uid-1.
func reading(boot string, started time.Time, allowed, limited int64) *limiterwire.Stats {
	st := &limiterwire.Stats{BootID: boot, StartedAt: started}
	st.Policies = append(st.Policies, limiterwire.PolicyStats{UID: "uid-1", Allowed: allowed, Limited: limited})
	return st
}

// The collector turns monotonic counts into window sums: a new process
// counts from zero, an old one seen first is a baseline, a restart adds
// without subtracting, counts leave after the window, and a policy is
// written at most once per MinWrite. (Writing through the API server is
// TestStatusWritersOwnTheirFields'.)
func TestCollectorWindow(t *testing.T) {
	pols := []v1beta1.RateLimitPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1"}}}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	c := &Collector{Window: 5 * time.Minute, MinWrite: 10 * time.Second, now: func() time.Time { return now }}
	c.defaults()
	c.unread = map[types.NamespacedName][]string{}
	ctx := context.Background()
	step := func(d time.Duration, readings map[string]*limiterwire.Stats) *v1beta1.EnforcementStatus {
		t.Helper()
		now = now.Add(d)
		for addr, st := range readings {
			c.record(now, addr, st, map[string]string{"uid-1": "ns/p"})
		}
		err := c.writeEach(ctx, now, pols, func(_ context.Context, pol *v1beta1.RateLimitPolicy, e *v1beta1.EnforcementStatus) error {
			pol.Status.Enforcement = e.DeepCopy()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return pols[0].Status.Enforcement.DeepCopy()
	}
	want := func(e *v1beta1.EnforcementStatus, allowed, limited int64) {
		t.Helper()
		if e == nil || ptr.Deref(e.Allowed, -1) != allowed || ptr.Deref(e.Limited, -1) != limited {
			t.Fatalf("status.enforcement %+v, want allowed %d limited %d", e, allowed, limited)
		}
	}

	// a started a minute ago: all new; b started an hour ago: a baseline.
	e := step(0, map[string]*limiterwire.Stats{"a": reading("a1", now.Add(-time.Minute), 10, 2), "b": reading("b1", now.Add(-time.Hour), 500, 7)})
	want(e, 10, 2)
	// 5s later, both counted more: written only after MinWrite.
	want(step(5*time.Second, map[string]*limiterwire.Stats{"a": reading("a1", now, 15, 2), "b": reading("b1", now, 503, 7)}), 10, 2)
	want(step(5*time.Second, nil), 18, 2)
	// a restarts: its new process counted 4; the totals only grow.
	e = step(10*time.Second, map[string]*limiterwire.Stats{"a": reading("a2", now.Add(10*time.Second), 4, 1)})
	want(e, 22, 3)
	// Nothing new: no write.
	if e2 := step(30*time.Second, map[string]*limiterwire.Stats{"a": reading("a2", now, 4, 1), "b": reading("b1", now, 503, 7)}); !e2.UpdatedAt.Equal(e.UpdatedAt) {
		t.Fatalf("written again without a change: updatedAt %v, was %v", e2.UpdatedAt, e.UpdatedAt)
	}
	// At 12:05:05 the deltas of 12:00:00 and 12:00:05 have left the
	// window; the restart's (12:00:20) remains, until 12:05:20.
	want(step(4*time.Minute+15*time.Second, nil), 4, 1)
	want(step(30*time.Second, nil), 0, 0)

	// A new leader takes up the status it finds: the processes that
	// started before it count on from their first reading, and a newer
	// one counts in full.
	want(step(time.Minute, map[string]*limiterwire.Stats{"a": reading("a2", now, 9, 1)}), 5, 0)
	written := now
	c = &Collector{Window: 5 * time.Minute, MinWrite: 10 * time.Second, now: func() time.Time { return now }}
	c.defaults()
	c.unread = map[types.NamespacedName][]string{}
	c.seedFrom(now, pols)
	e = step(20*time.Second, map[string]*limiterwire.Stats{"a": reading("a2", written.Add(-time.Hour), 9, 1), "b": reading("b1", written.Add(-2*time.Hour), 503, 7)})
	want(e, 5, 0)
	if !e.UpdatedAt.Time.Equal(written) {
		t.Errorf("the new leader rewrote an unchanged status at %v", e.UpdatedAt)
	}
	want(step(20*time.Second, map[string]*limiterwire.Stats{"a": reading("a2", now, 10, 1), "c": reading("c1", now.Add(-time.Second), 3, 0)}), 9, 0)
}

// A process that started after the collector did is counted in full
// however late its first reading comes (its first answers timed out, or it
// was tracked late): no earlier leader can have counted it. One that
// started before the collector, longer than the window ago, is a baseline.
func TestCollectorCountsAProcessYoungerThanItself(t *testing.T) {
	pols := []v1beta1.RateLimitPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1"}}}
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	now := start
	c := &Collector{Window: 20 * time.Second, now: func() time.Time { return now }}
	c.defaults()
	c.unread = map[types.NamespacedName][]string{}
	now = start.Add(time.Minute)
	served := map[string]string{"uid-1": "ns/p"}
	c.record(now, "new", reading("n1", start.Add(time.Second), 3, 1), served)
	c.record(now, "old", reading("o1", start.Add(-time.Minute), 500, 7), served)
	err := c.writeEach(context.Background(), now, pols, func(_ context.Context, pol *v1beta1.RateLimitPolicy, e *v1beta1.EnforcementStatus) error {
		pol.Status.Enforcement = e.DeepCopy()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if e := pols[0].Status.Enforcement; e == nil || ptr.Deref(e.Allowed, -1) != 3 || ptr.Deref(e.Limited, -1) != 1 {
		t.Fatalf("status.enforcement %+v, want allowed 3 limited 1 (the new process in full, the old one a baseline)", e)
	}
}

// Pods' hottest lists are summed per value when they cover the same
// interval; a pod still reporting an older interval is left out, and the
// newest interval replaces older sums.
func TestHotSum(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	hv := func(v string, req, lim int64) limiterwire.HotValue {
		return limiterwire.HotValue{Value: v, Requests: req, Limited: lim, Error: 1}
	}
	hd := func(v string, req, lim int64) v1beta1.HotDescriptor {
		return v1beta1.HotDescriptor{Value: v, Requests: req, Limited: lim}
	}
	var h hotSum
	h.add(t0, []limiterwire.HotValue{hv("user=a", 9, 1), hv("user=b", 4, 0)})
	h.add(t0.Add(time.Minute), []limiterwire.HotValue{hv("user=a", 2, 0), hv("user=c", 5, 0)})
	h.add(t0, []limiterwire.HotValue{hv("user=z", 100, 0)}) // behind: left out
	h.add(t0.Add(time.Minute), []limiterwire.HotValue{hv("user=c", 1, 1), hv("user=a", 4, 2), hv("user=d", 1, 0)})
	want := []v1beta1.HotDescriptor{hd("user=a", 6, 2), hd("user=c", 6, 1), hd("user=d", 1, 0)}
	if got := h.top(); fmt.Sprint(got) != fmt.Sprint(want) || !h.since.Equal(t0.Add(time.Minute)) {
		t.Fatalf("top %+v since %v, want %+v since %v", got, h.since, want, t0.Add(time.Minute))
	}
}

// The write budget is MaxWritesPerSecond with ten seconds of burst, spent
// on the least recently written policies first, so that every policy is
// written in turn when more change than the budget allows.
func TestCollectorWriteBudget(t *testing.T) {
	const n = 25
	var pols []v1beta1.RateLimitPolicy
	for i := range n {
		pols = append(pols, v1beta1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprint(i), UID: types.UID(fmt.Sprint(i))}})
	}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	c := &Collector{MaxWritesPerSecond: 1, MinWrite: time.Millisecond, now: func() time.Time { return now }}
	c.defaults()
	written := map[string]int{}
	step := func(d time.Duration, allowed int64) []string {
		t.Helper()
		now = now.Add(d)
		st := &limiterwire.Stats{BootID: "a", StartedAt: now.Add(-time.Second)}
		for i := range n {
			st.Policies = append(st.Policies, limiterwire.PolicyStats{UID: fmt.Sprint(i), Allowed: allowed})
		}
		served := map[string]string{}
		for i := range n {
			served[fmt.Sprint(i)] = "ns/" + fmt.Sprint(i)
		}
		c.record(now, "a", st, served)
		var names []string
		err := c.writeEach(context.Background(), now, pols, func(_ context.Context, pol *v1beta1.RateLimitPolicy, e *v1beta1.EnforcementStatus) error {
			pol.Status.Enforcement = e.DeepCopy()
			names = append(names, pol.Name)
			written[pol.Name]++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	if got := step(0, 1); len(got) != 10 {
		t.Fatalf("first collection wrote %d policies, want the burst of 10", len(got))
	}
	// One second later every policy changed again: one write, to a policy
	// never written yet.
	got := step(time.Second, 2)
	if len(got) != 1 || written[got[0]] != 1 {
		t.Fatalf("a second later: wrote %v (written before: %v), want one policy not written before", got, written)
	}
	// Fourteen seconds later the budget holds ten writes again, and the
	// 14 never written come first.
	if got := step(14*time.Second, 3); len(got) != 10 {
		t.Fatalf("after refilling: wrote %d policies, want 10", len(got))
	}
	for name, w := range written {
		if w != 1 {
			t.Errorf("policy %s written %d times while others waited for their first write", name, w)
		}
	}
}

// A policy that holds reports, beside allowed (holdings taken), the
// holdings ended in the window (released) and those taken in it and not
// ended (inFlight); other policies report neither.
func TestCollectorInFlight(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	pols := []v1beta1.RateLimitPolicy{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "slots", UID: "uid-1"}, Spec: v1beta1.RateLimitPolicySpec{
			Limit: v1beta1.Limit{Type: v1beta1.LimitConcurrency, Concurrency: &v1beta1.ConcurrencyLimit{MaxInFlight: 10}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tokens", UID: "uid-2"}, Spec: v1beta1.RateLimitPolicySpec{
			Limit: v1beta1.Limit{Type: v1beta1.LimitRate, Rate: &v1beta1.RateLimit{Limit: 100, Cost: &v1beta1.Cost{Reserve: &v1beta1.Reserve{}}}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "plain", UID: "uid-3"}},
	}
	served := map[string]string{"uid-1": "ns/slots", "uid-2": "ns/tokens", "uid-3": "ns/plain"}
	c := &Collector{Window: 5 * time.Minute, MinWrite: time.Second, now: func() time.Time { return now }}
	c.defaults()
	c.unread = map[types.NamespacedName][]string{}
	// Two pods: a takes 5 slots and 3 reservations, b ends 2 of the slots
	// (Envoy's stream-done call went to the other pod) and 3
	// reservations; the plain policy allows 7.
	read := func(boot string, slots, slotsEnded, res, resEnded, plain int64) *limiterwire.Stats {
		return &limiterwire.Stats{BootID: boot, StartedAt: now.Add(-time.Minute), Policies: []limiterwire.PolicyStats{
			{UID: "uid-1", Allowed: slots, Released: slotsEnded},
			{UID: "uid-2", Allowed: res, Released: resEnded},
			{UID: "uid-3", Allowed: plain},
		}}
	}
	c.record(now, "a", read("a1", 5, 0, 3, 0, 7), served)
	c.record(now, "b", read("b1", 0, 2, 0, 3, 0), served)
	if err := c.writeEach(context.Background(), now, pols, func(_ context.Context, pol *v1beta1.RateLimitPolicy, e *v1beta1.EnforcementStatus) error {
		pol.Status.Enforcement = e.DeepCopy()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct{ allowed, released, inFlight int64 }{{5, 2, 3}, {3, 3, 0}} {
		e := pols[i].Status.Enforcement
		if ptr.Deref(e.Allowed, -1) != want.allowed || ptr.Deref(e.Released, -1) != want.released || ptr.Deref(e.InFlight, -1) != want.inFlight {
			t.Errorf("%s: allowed %d released %d inFlight %d, want %+v", pols[i].Name, ptr.Deref(e.Allowed, -1), ptr.Deref(e.Released, -1), ptr.Deref(e.InFlight, -1), want)
		}
	}
	if e := pols[2].Status.Enforcement; ptr.Deref(e.Allowed, -1) != 7 || e.Released != nil || e.InFlight != nil {
		t.Errorf("plain: %+v, want allowed 7 and no released or inFlight", e)
	}
}
