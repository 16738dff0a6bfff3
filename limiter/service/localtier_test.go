package service_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policytest"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/localtier"
	"github.com/sluice-dev/sluice/limiter/store/memory"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// tierSnapshot compiles one policy per algorithm that can be granted, on keys
// "a" to "d", 20 per period, with localTier as given (nil: off).
func tierSnapshot(t testing.TB, period time.Duration, lt *v1alpha1.LocalTier) *config.Snapshot {
	t.Helper()
	var ps []v1alpha1.RateLimitPolicy
	for i, a := range []v1alpha1.Algorithm{v1alpha1.TokenBucket, v1alpha1.GCRA, v1alpha1.SlidingWindow, v1alpha1.FixedWindow} {
		ps = append(ps, v1alpha1.RateLimitPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "p-" + string(rune('a'+i)), Namespace: "ns"},
			Spec: v1alpha1.RateLimitPolicySpec{
				Domain:      "tier",
				Descriptors: []v1alpha1.Descriptor{{Key: string(rune('a' + i))}},
				Algorithm:   ptr.To(a),
				Rate:        v1alpha1.Rate{Limit: 20, Period: metav1.Duration{Duration: period}},
				LocalTier:   lt.DeepCopy(),
			},
		})
	}
	snap, err := policytest.Compile(ps)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func tierRequest(key string, hits uint64) *service.Request {
	return &service.Request{Domain: "tier", Descriptors: []service.Descriptor{desc(key, "u1")}, HitsAddend: hits}
}

// tierService is a service on st with a local tier in front of it, whose
// metrics go to reg (nil: none).
func tierService(t testing.TB, st store.Store, reg *prometheus.Registry) *service.Service {
	t.Helper()
	tier := localtier.New(st, localtier.Options{})
	t.Cleanup(func() { _ = tier.Close() })
	opts := service.Options{LocalTier: tier}
	if reg != nil {
		reg.MustRegister(localtier.NewCollector(tier))
		opts.Registerer = reg
	}
	return service.New(st, opts)
}

// summary is what a response says, policy by name.
func summary(r service.Response) string {
	out := fmt.Sprintf("over %v replayed %v reported %s %+v", r.OverLimit, r.Replayed, policyOf(r.Reported), r.Reported.Result)
	for _, d := range r.Decisions {
		out += fmt.Sprintf("; %s %+v over %v reason %q", policyOf(d), d.Result, d.OverLimit, d.Reason)
	}
	return out
}

// On the memory store, which is exact, localTier changes nothing: the
// same requests at the same times get the same answers as without it.
func TestLocalTierOnMemoryIsExact(t *testing.T) {
	clock := storetest.NewClock()
	newSvc := func(lt *v1alpha1.LocalTier) *service.Service {
		m := memory.New(memory.Options{Clock: clock.Now, SweepInterval: -1})
		t.Cleanup(func() { _ = m.Close() })
		svc := tierService(t, m, nil)
		svc.Swap(tierSnapshot(t, 10*time.Second, lt))
		return svc
	}
	exact := newSvc(nil)
	tiered := newSvc(&v1alpha1.LocalTier{Enabled: ptr.To(true), MaxOvershoot: ptr.To(intstr.FromString("50%"))})
	now := storetest.Base
	for i := range 300 {
		now = now.Add(time.Duration(i%5) * 173 * time.Millisecond)
		clock.Set(now)
		req := tierRequest(string(rune('a'+i%4)), uint64(1+i%3))
		want, err1 := exact.Decide(context.Background(), req)
		got, err2 := tiered.Decide(context.Background(), req)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if summary(got) != summary(want) {
			t.Fatalf("step %d: with localTier\n%v\nwithout\n%v", i, summary(got), summary(want))
		}
	}
	for id, st := range tiered.LocalTierStats() {
		if st.Exact == 0 || st.Local != 0 || st.Grants != 0 || st.OvershootBound != 0 {
			t.Errorf("%s: %+v: want every decision passed through", id, st)
		}
	}
}

// On Redis, a hot key's decisions are mostly local (its first, cold,
// call alone exact), and the policy's
// bound is reported in the stats and as a metric.
func TestLocalTierOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	reg := prometheus.NewRegistry()
	svc := tierService(t, rs, reg)
	// An hour's period: refill while the test runs is a unit per 3 minutes.
	snap := tierSnapshot(t, time.Hour, &v1alpha1.LocalTier{Enabled: ptr.To(true), MaxOvershoot: ptr.To(intstr.FromInt32(3))})
	svc.Swap(snap)
	allowed := 0
	for range 30 {
		resp, err := svc.Decide(context.Background(), tierRequest("a", 1))
		if err != nil {
			t.Fatal(err)
		}
		if !resp.OverLimit {
			allowed++
		}
	}
	// TokenBucket 20 per hour, burst 20, within 3 units of overshoot.
	if allowed < 20 || allowed > 23 {
		t.Fatalf("allowed %d of 30 against 20 per hour with a bound of 3", allowed)
	}
	st := svc.LocalTierStats()["ns/p-a"]
	if st.OvershootBound != 3 || st.Local == 0 || st.Exact > 1 || st.Grants+st.Local+st.CachedDenials+st.Exact != 30 {
		t.Fatalf("stats %+v: want bound 3 and local decisions", st)
	}
	if w := svc.LocalTierStats()["ns/p-c"].OvershootBound; w != 0 {
		t.Fatalf("SlidingWindow bound %d, want 0", w)
	}
	if got := gauge(t, reg, "sluice_local_tier_overshoot_bound", "ns/p-a"); got != 3 {
		t.Fatalf("sluice_local_tier_overshoot_bound = %v, want 3", got)
	}
	// A peek goes to Redis exactly and consumes nothing.
	peek := tierRequest("a", 0)
	peek.Descriptors[0].HasHitsAddend = true
	resp, err := svc.Decide(context.Background(), peek)
	if err != nil || resp.Decisions[0].Result.Remaining > 3 {
		t.Fatalf("peek: %+v %v", resp, err)
	}
}

func gauge(t *testing.T, reg *prometheus.Registry, name, policy string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "policy" && l.GetValue() == policy {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{policy=%q}", name, policy)
	return 0
}
