package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/server"
)

// refusalPolicies: tokens per user capped at 100 a request, a per-address
// limit of 2 beside it, a hidden failureMode Closed guard, and a shadow
// policy.
const refusalPolicies = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: tokens, namespace: llm}
spec: {domain: llm, descriptors: [{key: user}], algorithm: TokenBucket, rate: {limit: 1000, period: 1m}, maxCost: 100}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-ip, namespace: llm}
spec: {domain: llm, descriptors: [{key: remote_address}], algorithm: FixedWindow, rate: {limit: 2, period: 1m}}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: guard, namespace: security}
spec: {domain: guarded, descriptors: [{key: user}, {key: route}], algorithm: FixedWindow, rate: {limit: 100, period: 1m}, visibility: Hidden, failureMode: Closed}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: visible, namespace: security}
spec: {domain: guarded, descriptors: [{key: user}], algorithm: FixedWindow, rate: {limit: 50, period: 1m}}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: watching, namespace: security}
spec: {domain: guarded, descriptors: [{key: route}], algorithm: FixedWindow, rate: {limit: 7, period: 1m}, shadow: true}
`

func startRefusals(t *testing.T) *env {
	t.Helper()
	snap, err := config.Parse("refusals", []byte(refusalPolicies))
	if err != nil {
		t.Fatal(err)
	}
	return start(t, envOptions{snapshot: snap})
}

// llmRequest is an RLS request of domain llm: a user's tokens (costing
// hits) and the client's address, as an Envoy route would send them.
func llmRequest(user, addr string, hits uint32) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "llm", HitsAddend: hits, Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}},
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: addr}}},
	}}
}

// wantRefusedRLS fails unless resp is a denial refused for a reason that
// contains want.
func wantRefusedRLS(t *testing.T, what string, resp *rlsv3.RateLimitResponse, err error, want string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: error %v, want OVER_LIMIT (Envoy fails open on errors: every limit of the request would be skipped)", what, err)
	}
	md := resp.GetDynamicMetadata().AsMap()
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || md["refused"] != true || !strings.Contains(md["reason"].(string), want) {
		t.Fatalf("%s: %v, want OVER_LIMIT refused with a reason containing %q", what, resp, want)
	}
	if reason, _ := header(resp, server.HeaderReason); !strings.Contains(reason, want) {
		t.Fatalf("%s: %s %q, want it to contain %q", what, server.HeaderReason, reason, want)
	}
	if ra, ok := header(resp, server.HeaderRetryAfter); ok {
		t.Fatalf("%s: Retry-After %s: the same request would be refused again", what, ra)
	}
}

// A cost above a policy's maxCost (Envoy's hits_addend from a client
// header such as x-max-tokens) is denied, not an error that Envoy with
// failure_mode_deny: false lets through; nothing of the request is spent,
// the per-address limit included.
func TestAttackCostAboveCapSkipsNoLimitOverRLS(t *testing.T) {
	e := startRefusals(t)
	for range 3 {
		resp, err := e.rls.ShouldRateLimit(ctxT(t), llmRequest("a", "192.0.2.1", 500))
		wantRefusedRLS(t, "cost 500", resp, err, "descriptors[0] costs 500, above the maximum cost of 100 of policy llm/tokens (spec.limit.rate.cost.max)")
		if md := resp.GetDynamicMetadata().AsMap(); md["policy"] != "llm/tokens" {
			t.Fatalf("metadata %v, want the policy llm/tokens", md)
		}
	}
	// Refused requests spent nothing: the address still has its 2.
	for i := range 2 {
		if resp, err := e.rls.ShouldRateLimit(ctxT(t), llmRequest("a", "192.0.2.1", 1)); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d within the caps after the refusals: %v %v, want OK", i+1, resp, err)
		}
	}
	if got := decisions(t, e.reg, "refused"); got != 6 {
		t.Fatalf("sluice_decisions_total{result=refused} = %v, want 6 (3 requests, 2 policies each)", got)
	}
}

// A second, over-long value (a 1.1 KiB X-Api-Key) is denied over RLS.
func TestAttackOverlongValueSkipsNoLimitOverRLS(t *testing.T) {
	e := startRefusals(t)
	req := llmRequest("a", "192.0.2.2", 1)
	req.Descriptors[0].Entries[0].Value = strings.Repeat("k", 1126)
	resp, err := e.rls.ShouldRateLimit(ctxT(t), req)
	wantRefusedRLS(t, "a 1126-byte value", resp, err, "descriptors[0].entries[0].value is 1126 bytes long, the maximum is 1024")
}

// The curl: the HTTP check answers 429 with the reason, in
// X-Sluice-Reason and in problem details, not 400.
func TestAttackCostAboveCapSkipsNoLimitOverHTTP(t *testing.T) {
	e := startRefusals(t)
	const body = `{"domain":"llm","descriptors":[{"entries":[{"key":"user","value":"a"}]}],"hitsAddend":500}`
	resp, b := post(t, e.http, "", body)
	want := "descriptors[0] costs 500, above the maximum cost of 100 of policy llm/tokens (spec.limit.rate.cost.max)"
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(server.HeaderReason) != want {
		t.Fatalf("cost 500: %d %s %q %s, want 429 with the reason", resp.StatusCode, server.HeaderReason, resp.Header.Get(server.HeaderReason), b)
	}
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, e.http+server.CheckPath, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", server.ProblemContentType)
	resp, b = do(t, req)
	var p server.Problem
	if err := json.Unmarshal(b, &p); err != nil || resp.StatusCode != http.StatusTooManyRequests || p.Detail != want ||
		len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "llm/tokens" {
		t.Fatalf("problem details: %d %s %v, want 429 with the reason as detail", resp.StatusCode, b, err)
	}
	// A bad Idempotency-Key is the client's too.
	req, err = http.NewRequestWithContext(ctxT(t), http.MethodPost, e.http+server.CheckPath,
		strings.NewReader(`{"domain":"llm","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Add(server.IdempotencyKeyHeader, "one")
	req.Header.Add(server.IdempotencyKeyHeader, "two")
	if resp, b := do(t, req); resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(resp.Header.Get(server.HeaderReason), "2 Idempotency-Key headers") {
		t.Fatalf("two Idempotency-Key headers: %d %v %s, want 429 with the reason", resp.StatusCode, resp.Header, b)
	}
	// Only what selects no policy is a 400.
	if resp, b := post(t, e.http, "", `{"domain":"","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`); resp.StatusCode != http.StatusBadRequest ||
		!strings.Contains(errorMessage(t, resp, b), "domain is empty") {
		t.Fatalf("empty domain: %d %s, want 400", resp.StatusCode, b)
	}
}

// Forward-auth: an over-long header is denied with the mapping's
// denyStatus, not answered 400 (nginx's auth_request turns that into a
// 500, which the sample serves from @fail_open).
func TestAttackForwardAuthOverlongHeaderSkipsNoLimit(t *testing.T) {
	e := startForwardAuth(t)
	for _, tc := range []struct{ name, value, want string }{
		{"X-Api-Key", strings.Repeat("k", server.MaxForwardAuthHeader+1), "header X-Api-Key is 1025 bytes long, the maximum is 1024"},
		{"X-Forwarded-For", strings.Repeat("1", server.MaxForwardAuthHeader+1), "header X-Forwarded-For is 1025 bytes long, the maximum is 1024"},
		{"X-Forwarded-For", "not-an-address", `header X-Forwarded-For: "not-an-address" is not an IP address`},
		{"X-Forwarded-Uri", "/" + strings.Repeat("p", server.MaxForwardAuthHeader), "the path value is 1025 bytes long, the maximum is 1024"},
	} {
		h := map[string]string{"X-Api-Key": "k", "X-Forwarded-Uri": "/", tc.name: tc.value}
		resp, body := forwardAuth(t, e, http.MethodGet, "shop", h)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(server.HeaderReason) != tc.want {
			t.Fatalf("%s %.20q...: %d %s %q %s, want 429 with the reason %q", tc.name, tc.value, resp.StatusCode,
				server.HeaderReason, resp.Header.Get(server.HeaderReason), body, tc.want)
		}
	}
	// The mapping's denyStatus applies.
	resp, body := forwardAuth(t, e, http.MethodGet, "shop-strict", map[string]string{"X-Api-Key": strings.Repeat("k", 1100)})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("shop-strict: %d %s, want 403", resp.StatusCode, body)
	}
}

// Forward-auth: a repeated header is not a new identity. key-a is over its
// limit; a second X-Api-Key line must not make "key-a, x" a fresh counter
// while the app reads key-a.
func TestAttackForwardAuthRepeatedHeaderIsNoNewIdentity(t *testing.T) {
	e := startForwardAuth(t)
	send := func(keys ...string) *http.Response {
		req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, e.http+server.ForwardAuthPath+"shop-strict", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			req.Header.Add("X-Api-Key", k)
		}
		resp, _ := do(t, req)
		return resp
	}
	if resp := send("key-a"); resp.StatusCode != http.StatusOK {
		t.Fatalf("key-a's first request: %d", resp.StatusCode)
	}
	if resp := send("key-a"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("key-a over its limit: %d, want 403", resp.StatusCode)
	}
	resp := send("key-a", "x")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(resp.Header.Get(server.HeaderReason), "header X-Api-Key comes on 2 lines") {
		t.Fatalf("key-a and x on two lines: %d %q, want 403 with the reason", resp.StatusCode, resp.Header.Get(server.HeaderReason))
	}
	// A fresh key on two lines is refused too: the app may read either.
	if resp := send("key-c", "key-d"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("key-c and key-d on two lines: %d, want 403", resp.StatusCode)
	}
}

// A hidden policy is hidden on every data-plane path: the HTTP check's
// Sluice-Failure-Mode does not tell its failure mode.
func TestAttackFailureModeHeaderRevealsNoHiddenPolicy(t *testing.T) {
	e := startRefusals(t)
	resp, b := post(t, e.http, "", `{"domain":"guarded","descriptors":[{"entries":[{"key":"user","value":"a"},{"key":"route","value":"/x"}]}]}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if got := resp.Header.Get(server.HeaderFailureMode); got != "Open" {
		t.Fatalf("%s %q, want Open, the visible policy's: a hidden policy's Closed is not told", server.HeaderFailureMode, got)
	}
}

// The status peek shows neither hidden nor shadow policies.
func TestAttackStatusPeekRevealsNoShadowPolicy(t *testing.T) {
	e := startRefusals(t)
	code, st, raw := peek(t, e, "domain=guarded&user=a&route=/x")
	if code != http.StatusOK || len(st.Policies) != 1 || st.Policies[0].Policy != "security/visible" {
		t.Fatalf("peek: %d %+v %s, want security/visible alone", code, st.Policies, raw)
	}
}

// /readyz, on the data plane, counts no hidden policy.
func TestAttackReadyzRevealsNoHiddenPolicy(t *testing.T) {
	e := startRefusals(t)
	rd := readyz(t, e, http.StatusOK)
	if d := rd.Checks["snapshot"].Detail; !strings.HasSuffix(d, ", 4 policies") {
		t.Fatalf("snapshot check %q, want 4 policies: the hidden one is not counted", d)
	}
}
