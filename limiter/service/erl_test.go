package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/service"
)

// erlService is a service on a memory store with one ERL file: domain erl,
// user limited to 2 a minute.
func erlService(t *testing.T, opts service.Options) *service.Service {
	t.Helper()
	svc, _ := erlStatsService(t, "  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n", opts)
	return svc
}

func withLimit(d service.Descriptor, rpu uint32, unit int32) service.Descriptor {
	d.LimitOverride, d.Override = true, compiled.UnitRate{RequestsPerUnit: rpu, Unit: unit}
	return d
}

const (
	second, minute, hour = 1, 2, 3
)

// TestAttackLimitOverride: a client (or a gateway passing what a client
// sent) sets a descriptor's own limit to raise it. Without
// --erl-max-override, an override may not pass the ERL limit the
// descriptor matches, nor apply where none matches; with it, not pass it.
// Past the bound the descriptor is denied with a reason (a refusal, never
// an error a gateway would fail open on), and nothing is counted.
func TestAttackLimitOverride(t *testing.T) {
	ctx := context.Background()
	decide := func(svc *service.Service, d service.Descriptor) service.Response {
		t.Helper()
		resp, err := svc.Decide(ctx, &service.Request{Domain: "erl", Descriptors: []service.Descriptor{d}})
		if err != nil {
			t.Fatalf("Decide: %v, want an answer", err)
		}
		return resp
	}
	t.Run("bounded by the matched limit", func(t *testing.T) {
		svc := erlService(t, service.Options{})
		resp := decide(svc, withLimit(desc("user", "mallory"), 1000, second))
		if !resp.OverLimit || !resp.Reported.Refused || !strings.Contains(resp.Reported.Reason, "above 2/minute, the limit erl/erl.user it matches") {
			t.Fatalf("an override above the matched limit: %+v, want a refusal naming the bound", resp.Reported)
		}
		// A lower one is honoured: 1 a minute.
		if r := decide(svc, withLimit(desc("user", "alice"), 1, minute)); r.OverLimit || r.Decisions[0].Result.Remaining != 0 {
			t.Fatalf("an override of 1/minute, first hit: %+v", r.Decisions[0])
		}
		if r := decide(svc, withLimit(desc("user", "alice"), 1, minute)); !r.OverLimit || r.Decisions[0].Refused {
			t.Fatalf("an override of 1/minute, second hit: %+v, want a plain denial", r.Decisions[0])
		}
		// The refused requests spent nothing of mallory's 2 a minute.
		for i := range 2 {
			if r := decide(svc, desc("user", "mallory")); r.OverLimit {
				t.Fatalf("mallory's hit %d after the refused override: denied (%+v)", i+1, r.Reported)
			}
		}
		// Where no limit matches, there is nothing to bound it by.
		r := decide(svc, withLimit(desc("other", "x"), 1, hour))
		if r.OverLimit || r.Decisions[0].Policy != nil {
			t.Fatalf("an override on an unmatched descriptor: %+v, want it unmatched", r.Decisions[0])
		}
	})
	t.Run("bounded by --erl-max-override", func(t *testing.T) {
		svc := erlService(t, service.Options{MaxOwnLimit: compiled.UnitRate{RequestsPerUnit: 10, Unit: minute}})
		for _, tc := range []struct {
			rpu     uint32
			unit    int32
			refused bool
		}{
			{10, minute, false}, {600, hour, false}, {601, hour, true}, {1, second, true}, {11, minute, true}, {0, minute, false},
			{5, 0, true}, {5, 9, true},
		} {
			r := decide(svc, withLimit(desc("user", "u"), tc.rpu, tc.unit))
			if r.Reported.Refused != tc.refused {
				t.Errorf("override %d per unit %d: refused %v (%s), want %v", tc.rpu, tc.unit, r.Reported.Refused, r.Reported.Reason, tc.refused)
			}
		}
		// An unmatched descriptor takes its own limit within the bound.
		if r := decide(svc, withLimit(desc("other", "x"), 3, minute)); r.OverLimit || r.Decisions[0].Result.Remaining != 2 {
			t.Fatalf("an override of 3/minute on an unmatched descriptor: %+v", r.Decisions[0])
		}
	})
	t.Run("not in a RateLimitPolicy domain", func(t *testing.T) {
		// A policy that did not opt in (spec.limit.rate.requestOverride)
		// ignores it: the policy's own limit (5 an hour) decides.
		svc, _ := newService(t, nil)
		allowed := 0
		for range 6 {
			resp, err := svc.Decide(ctx, &service.Request{Domain: "shop",
				Descriptors: []service.Descriptor{withLimit(desc("user", "u"), 1000, second)}})
			if err != nil || resp.Reported.Refused {
				t.Fatalf("an override on a policy that did not opt in: %+v, %v; want it ignored", resp.Reported, err)
			}
			if !resp.OverLimit {
				allowed++
			}
		}
		if allowed != 5 {
			t.Fatalf("an override on a policy that did not opt in: %d of 6 allowed, want the policy's 5", allowed)
		}
	})
}

// TestERLLimitsHaveNoTenantBudget: the limiter's tenant budgets
// (--tenant-store-calls-per-second, --tenant-max-policies-per-request)
// budget namespaces of RateLimitPolicies; an ERL file has no tenant, and
// its limits must not fail open past a budget ERL never had.
func TestERLLimitsHaveNoTenantBudget(t *testing.T) {
	svc := erlService(t, service.Options{Budgets: &compiled.Budgets{Default: compiled.NamespaceBudget{MaxPoliciesPerRequest: 1, StoreCallsPerSecond: 1}}})
	for i := range 3 {
		resp, err := svc.Decide(context.Background(), &service.Request{Domain: "erl",
			Descriptors: []service.Descriptor{desc("user", "a"), desc("user", "b")}})
		if err != nil {
			t.Fatal(err)
		}
		over, remaining := i >= 2, int64(max(0, 1-i)) // 2 a minute each
		for j, d := range resp.Decisions {
			if d.OverLimit != over || d.Policy == nil || d.Result.Remaining != remaining {
				t.Fatalf("request %d, descriptor %d: %+v, want decided by the store: over the limit %v, %d remaining", i+1, j, d, over, remaining)
			}
		}
	}
}

// TestERLQuotaOverKillSwitch: a request whose every quota_mode limit is
// over is denied with a reason (ERL after #1059), and allowed under the
// kill switch, which turns every limit into a shadow one.
func TestERLQuotaOverKillSwitch(t *testing.T) {
	svc, _ := erlStatsService(t, `  - key: q
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
`, service.Options{})
	req := &service.Request{Domain: "erl", Descriptors: []service.Descriptor{desc("q", "x")}}
	for i, want := range []bool{false, true} {
		resp, err := svc.Decide(context.Background(), req)
		if err != nil || resp.OverLimit != want || (want && resp.Reported.Reason != service.QuotaOverReason) {
			t.Fatalf("request %d: over %v (%q), error %v; want over %v with %q", i, resp.OverLimit, resp.Reported.Reason, err, want, service.QuotaOverReason)
		}
	}
	svc.SetEnforcement(false)
	if resp, err := svc.Decide(context.Background(), req); err != nil || resp.OverLimit {
		t.Fatalf("under the kill switch: over %v, error %v; want allowed", resp.OverLimit, err)
	}
}
