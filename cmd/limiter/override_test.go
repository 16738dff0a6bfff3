package main_test

import (
	"context"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// overridePolicies: tenant a's plan limit opted in to a request's own
// limit, at most 20 a minute; tenant b's, in the same domain, did not.
const overridePolicies = `apiVersion: ratelimit.sluice.dev/v1beta1
kind: RateLimitPolicy
metadata: {name: plan, namespace: a}
spec:
  domain: plans
  descriptors: [{key: tenant}]
  limit:
    type: Rate
    rate: {algorithm: FixedWindow, limit: 2, period: 1h, requestOverride: {maximum: 20}}
---
apiVersion: ratelimit.sluice.dev/v1beta1
kind: RateLimitPolicy
metadata: {name: per-user, namespace: b}
spec:
  domain: plans
  descriptors: [{key: user}]
  limit:
    type: Rate
    rate: {algorithm: FixedWindow, limit: 2, period: 1h}
`

// TestAttackRequestOverrideOverRLS: a real limiter on a real redis-server,
// answering RLS: a descriptor's own limit replaces an opted-in policy's
// (current_limit says so, in the policy's period), is clamped to its
// maximum whatever the unit, is a denial with a reason when it allows
// nothing, and is ignored by a policy that did not opt in.
func TestAttackRequestOverrideOverRLS(t *testing.T) {
	_, rls, _ := budgetLimiter(t, overridePolicies)
	send := func(key, value string, rpu uint32, unit typev3.RateLimitUnit) *rlsv3.RateLimitResponse {
		t.Helper()
		d := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
			Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}}
		resp, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "plans", Descriptors: []*rlv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v, want an answer (Envoy fails open on errors)", err)
		}
		return resp
	}
	ok := func(r *rlsv3.RateLimitResponse) bool { return r.GetOverallCode() == rlsv3.RateLimitResponse_OK }

	// 10 a minute on a one-hour policy: 600 an hour, clamped to 20.
	r := send("tenant", "t1", 10, typev3.RateLimitUnit_MINUTE)
	if cl := r.GetStatuses()[0].GetCurrentLimit(); !ok(r) || cl.GetRequestsPerUnit() != 20 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
		t.Fatalf("10/minute on a 2/hour policy with maximum 20: %v, want OK with current_limit 20/HOUR", r)
	}
	allowed := 1
	for range 25 {
		if ok(send("tenant", "t1", 1_000_000, typev3.RateLimitUnit_SECOND)) {
			allowed++
		}
	}
	if allowed != 20 {
		t.Fatalf("a huge own limit: %d allowed, want the maximum, 20", allowed)
	}
	// 5 an hour: the same counter, already past 5.
	if ok(send("tenant", "t1", 5, typev3.RateLimitUnit_HOUR)) {
		t.Fatal("5/hour after 20 spent: allowed, want the same window, denied")
	}
	// Zero: a denial with a reason, counting nothing.
	r = send("tenant", "t2", 0, typev3.RateLimitUnit_MINUTE)
	if ok(r) || !strings.Contains(metadataReason(r), "allows nothing") {
		t.Fatalf("an own limit of 0: %v, want OVER_LIMIT with a reason", r)
	}
	if r := send("tenant", "t2", 3, typev3.RateLimitUnit_HOUR); !ok(r) || r.GetStatuses()[0].GetLimitRemaining() != 2 {
		t.Fatalf("3/hour after the denied 0: %v, want OK with 2 remaining (the 0 spent nothing)", r)
	}
	// Tenant b's policy did not opt in: its own 2 an hour.
	allowed = 0
	for range 4 {
		if ok(send("user", "u", 100, typev3.RateLimitUnit_SECOND)) {
			allowed++
		}
	}
	if allowed != 2 {
		t.Fatalf("an own limit on a policy that did not opt in: %d of 4 allowed, want its 2", allowed)
	}
}
