package service_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/service"
)

// The compiled model's Behaviours are general: these tests give them to
// hand-compiled policies of an ordinary domain (matched as
// RateLimitPolicies are), none compiled from ERL configuration.

// prop is a policy of namespace team in domain d, limit an hour per value
// of its keys, with behaviours b.
func prop(name string, limit int64, b compiled.Behaviours, keys ...string) *compiled.Policy {
	ds := make([]compiled.Descriptor, len(keys))
	for i, k := range keys {
		ds[i] = compiled.Descriptor{Key: k}
	}
	return &compiled.Policy{Namespace: "team", Name: name, Domain: "d", Descriptors: ds,
		Limit:   algo.Limit{Algorithm: algo.FixedWindow, Limit: limit, Burst: limit, Period: time.Hour},
		MaxCost: math.MaxInt64, MaxCostSet: true, FailureMode: compiled.FailOpen, Behaviours: b}
}

func propService(t *testing.T, budgets *compiled.Budgets, ps ...*compiled.Policy) *service.Service {
	t.Helper()
	snap := compiled.New(ps)
	snap.Version, snap.Budgets = "test", budgets
	svc := service.New(memoryStore(t), service.Options{Registerer: prometheus.NewRegistry()})
	svc.Swap(snap)
	return svc
}

func propDecide(t *testing.T, svc *service.Service, ds ...service.Descriptor) service.Response {
	t.Helper()
	resp, err := svc.Decide(context.Background(), &service.Request{Domain: "d", Descriptors: ds})
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return resp
}

// TestUnlimitedProperty: an Unlimited policy allows all, counts nothing,
// and reports UnlimitedRemaining.
func TestUnlimitedProperty(t *testing.T) {
	svc := propService(t, nil, prop("free", 0, compiled.Behaviours{Unlimited: true}, "user"))
	for i := range 3 {
		r := propDecide(t, svc, desc("user", "u"))
		if r.OverLimit || r.Decisions[0].Policy == nil || r.Decisions[0].Result.Remaining != compiled.UnlimitedRemaining {
			t.Fatalf("request %d: %+v, want allowed with %d remaining", i, r.Decisions[0], compiled.UnlimitedRemaining)
		}
	}
}

// TestReplacesProperty: a policy that Replaces another by Name drops
// it from any request that matches both, whichever descriptor matched
// which and in whatever order.
func TestReplacesProperty(t *testing.T) {
	svc := propService(t, nil, prop("closed", 0, compiled.Behaviours{Replacement: &compiled.Replacement{Name: "closed"}}, "user"),
		prop("open", 100, compiled.Behaviours{Replacement: &compiled.Replacement{Replaces: []string{"closed"}}}, "route"))
	if r := propDecide(t, svc, desc("user", "u")); !r.OverLimit {
		t.Fatalf("closed alone: %+v, want denied", r.Reported)
	}
	for name, ds := range map[string][]service.Descriptor{
		"replacer after":  {desc("user", "u"), desc("route", "r")},
		"replacer first":  {desc("route", "r"), desc("user", "u")},
		"one descriptor":  {desc("user", "u", "route", "r")},
		"replacer thrice": {desc("route", "r"), desc("user", "u"), desc("route", "s"), desc("user", "v", "route", "t")},
	} {
		if r := propDecide(t, svc, ds...); r.OverLimit {
			t.Errorf("%s: %+v, want closed replaced and the request allowed", name, r.Reported)
		}
	}
}

// TestQuotaProperty: quotas never deny alone; a request is denied when
// every quota it matched is over, with QuotaOverReason; a DryRun quota is
// never over.
func TestQuotaProperty(t *testing.T) {
	quota := compiled.Behaviours{Quota: true}
	q := func(name string, b compiled.Behaviours) *compiled.Policy {
		p := prop(name, 1, b, name)
		p.Shadow = true
		return p
	}
	svc := propService(t, nil, q("a", quota), q("b", quota), q("c", compiled.Behaviours{Quota: true, DryRun: true}))
	if r := propDecide(t, svc, desc("a", "1"), desc("b", "1")); r.OverLimit {
		t.Fatalf("both within: %+v", r.Reported)
	}
	if r := propDecide(t, svc, desc("a", "1"), desc("b", "2")); r.OverLimit {
		t.Fatalf("a over, b within: %+v, want allowed", r.Reported)
	}
	r := propDecide(t, svc, desc("a", "1"), desc("b", "1"))
	if !r.OverLimit || r.Reported.Reason != service.QuotaOverReason {
		t.Fatalf("both over: %+v, want denied with %q", r.Reported, service.QuotaOverReason)
	}
	if r := propDecide(t, svc, desc("a", "1")); !r.OverLimit {
		t.Fatalf("the one quota over: %+v, want denied", r.Reported)
	}
	propDecide(t, svc, desc("c", "1"))
	if r := propDecide(t, svc, desc("a", "1"), desc("c", "1")); r.OverLimit {
		t.Fatalf("a over, c over but DryRun: %+v, want allowed", r.Reported)
	}
}

// TestReportShadowProperty: a shadow policy's figures are reported with
// ReportShadow (as an allowance), and invisible without it.
func TestReportShadowProperty(t *testing.T) {
	for _, report := range []bool{false, true} {
		p := prop("s", 1, compiled.Behaviours{ReportShadow: report}, "user")
		p.Shadow = true
		svc := propService(t, nil, p)
		propDecide(t, svc, desc("user", "u"))
		d := propDecide(t, svc, desc("user", "u")).Decisions[0]
		if d.OverLimit || (d.Policy != nil) != report || (report && d.Result.Allowed) {
			t.Errorf("ReportShadow %v, over the limit: %+v", report, d)
		}
	}
}

// TestUntenantedProperty: an Untenanted policy's matches count against no
// namespace's maxPoliciesPerRequest.
func TestUntenantedProperty(t *testing.T) {
	budgets := &compiled.Budgets{Default: compiled.NamespaceBudget{MaxPoliciesPerRequest: 1, StoreCallsPerSecond: 1 << 30}}
	for _, untenanted := range []bool{false, true} {
		b := compiled.Behaviours{Untenanted: untenanted}
		svc := propService(t, budgets, prop("one", 100, b, "user"), prop("two", 100, b, "user"))
		if r := propDecide(t, svc, desc("user", "u")); r.OverLimit == untenanted {
			t.Errorf("Untenanted %v, two matches under a budget of one: %+v", untenanted, r.Reported)
		}
	}
}

// TestHitStatsProperty: a policy with HitStats counts hits under its
// HitStatsKey, its name outside ERL domains.
func TestHitStatsProperty(t *testing.T) {
	svc := propService(t, nil, prop("counted", 2, compiled.Behaviours{HitStats: true}, "user"), prop("plain", 100, compiled.Behaviours{}, "user"))
	for range 3 {
		propDecide(t, svc, desc("user", "u"))
	}
	got := map[string]service.HitCounts{}
	svc.EachHitStats(func(domain, key string, c service.HitCounts) {
		if domain != "d" {
			t.Errorf("key %s of domain %s, want d", key, domain)
		}
		got[key] = c
	})
	want := map[string]service.HitCounts{"counted": {Total: 3, Over: 1, Within: 2, Near: 1}}
	if len(got) != len(want) || got["counted"] != want["counted"] {
		t.Fatalf("hit statistics %+v, want %+v: only policy counted keeps them, under its name", got, want)
	}
}
