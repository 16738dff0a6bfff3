package server_test

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/service"
)

// startForwardAuth serves testdata/forward-auth.yaml, trusting 127.0.0.1
// as a proxy.
func startForwardAuth(t *testing.T) *env {
	t.Helper()
	snap, err := config.LoadFile("testdata/forward-auth.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return start(t, envOptions{snapshot: snap, trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
}

// forwardAuth calls the forward-auth endpoint of domain with headers, as a
// gateway would, with the given method.
func forwardAuth(t *testing.T, e *env, method, domain string, headers map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), method, e.http+server.ForwardAuthPath+domain, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return do(t, req)
}

func TestForwardAuthLimits(t *testing.T) {
	e := startForwardAuth(t)
	traefik := map[string]string{"X-Api-Key": "k1", "X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/v1/items?page=2", "X-Forwarded-Host": "shop.example"}
	for i := 1; i <= 3; i++ {
		resp, body := forwardAuth(t, e, http.MethodGet, "shop", traefik)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d: %d %s, want 200", i, resp.StatusCode, body)
		}
		if got, want := resp.Header.Get(server.HeaderRemaining), string(rune('0'+3-i)); got != want {
			t.Fatalf("call %d: X-RateLimit-Remaining %q, want %q", i, got, want)
		}
	}
	resp, body := forwardAuth(t, e, http.MethodGet, "shop", traefik)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(server.HeaderRetryAfter) == "" ||
		resp.Header.Get(server.HeaderLimit) != "3" || resp.Header.Get(server.HeaderRateLimit) == "" {
		t.Fatalf("over the limit: %d %v %s, want 429 with Retry-After and the rate-limit headers", resp.StatusCode, resp.Header, body)
	}
	// Another key has its own counter.
	traefik["X-Api-Key"] = "k2"
	if resp, body := forwardAuth(t, e, http.MethodGet, "shop", traefik); resp.StatusCode != http.StatusOK {
		t.Fatalf("another key: %d %s", resp.StatusCode, body)
	}
}

// Method, path and host come from Traefik's X-Forwarded-* or nginx's
// X-Original-* headers, or from the call itself (nginx's subrequest keeps
// the method); the path loses its query.
func TestForwardAuthMethodPathHost(t *testing.T) {
	for _, tc := range []struct {
		name    string
		method  string
		headers map[string]string
	}{
		{"traefik", http.MethodGet, map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/v1/orders?id=1", "X-Forwarded-Host": "a.example"}},
		{"nginx", http.MethodPost, map[string]string{"X-Original-URI": "/v1/orders", "X-Original-Host": "a.example"}},
		{"nginx with Host", http.MethodPost, map[string]string{"X-Original-URI": "/v1/orders?x", "Host": "a.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startForwardAuth(t)
			h := map[string]string{"X-Api-Key": "k"}
			for k, v := range tc.headers {
				h[k] = v
			}
			call := func() int {
				req, err := http.NewRequestWithContext(ctxT(t), tc.method, e.http+server.ForwardAuthPath+"shop", nil)
				if err != nil {
					t.Fatal(err)
				}
				for k, v := range h {
					req.Header.Set(k, v)
				}
				if v, ok := h["Host"]; ok {
					req.Host = v
				}
				resp, _ := do(t, req)
				return resp.StatusCode
			}
			// orders-posts-per-host allows one POST /v1/orders per host.
			if got := call(); got != http.StatusOK {
				t.Fatalf("first: %d", got)
			}
			if got := call(); got != http.StatusTooManyRequests {
				t.Fatalf("second POST /v1/orders on a.example: %d, want 429", got)
			}
		})
	}
}

func TestForwardAuthClientIP(t *testing.T) {
	e := startForwardAuth(t)
	// per-client allows one request from 203.0.113.7. The peer 127.0.0.1
	// is trusted, so the rightmost untrusted X-Forwarded-For address counts;
	// what the client prepended does not.
	h := map[string]string{"X-Api-Key": "ip", "X-Forwarded-Uri": "/", "X-Forwarded-For": "198.51.100.1, 203.0.113.7, 127.0.0.1"}
	if resp, body := forwardAuth(t, e, http.MethodGet, "shop", h); resp.StatusCode != http.StatusOK {
		t.Fatalf("first: %d %s", resp.StatusCode, body)
	}
	if resp, _ := forwardAuth(t, e, http.MethodGet, "shop", h); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second from 203.0.113.7: %d, want 429", resp.StatusCode)
	}
	h["X-Forwarded-For"] = "203.0.113.7, 198.51.100.2"
	if resp, _ := forwardAuth(t, e, http.MethodGet, "shop", h); resp.StatusCode != http.StatusOK {
		t.Fatalf("a spoofed 203.0.113.7 before the real client: %d, want 200", resp.StatusCode)
	}
	delete(h, "X-Forwarded-For")
	h["X-Real-IP"] = "203.0.113.7"
	if resp, _ := forwardAuth(t, e, http.MethodGet, "shop", h); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("X-Real-IP 203.0.113.7 from a trusted proxy: %d, want 429", resp.StatusCode)
	}
	h["X-Forwarded-For"] = "203.0.113.7:4711" // some proxies add the port
	delete(h, "X-Real-IP")
	if resp, _ := forwardAuth(t, e, http.MethodGet, "shop", h); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("X-Forwarded-For 203.0.113.7:4711: %d, want 429", resp.StatusCode)
	}
	h["X-Forwarded-For"] = "not-an-ip"
	resp, body := forwardAuth(t, e, http.MethodGet, "shop", h)
	if reason := resp.Header.Get(server.HeaderReason); resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(reason, `X-Forwarded-For: "not-an-ip" is not an IP address`) {
		t.Fatalf("bad X-Forwarded-For: %d %q %s, want 429 refused", resp.StatusCode, reason, body)
	}
}

// An untrusted peer is the client, whatever X-Forwarded-For says.
func TestForwardAuthUntrustedPeer(t *testing.T) {
	snap, err := config.LoadFile("testdata/forward-auth.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, envOptions{snapshot: snap}) // trusts no proxy
	h := map[string]string{"X-Api-Key": "ip", "X-Forwarded-Uri": "/", "X-Forwarded-For": "203.0.113.7"}
	for i := 0; i < 3; i++ {
		if resp, body := forwardAuth(t, e, http.MethodGet, "shop", h); resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d claiming 203.0.113.7: %d %s, want 200", i, resp.StatusCode, body)
		}
	}
}

func TestForwardAuthDenyStatus(t *testing.T) {
	e := startForwardAuth(t)
	h := map[string]string{"X-Api-Key": "s"}
	if resp, _ := forwardAuth(t, e, http.MethodGet, "shop-strict", h); resp.StatusCode != http.StatusOK {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	resp, _ := forwardAuth(t, e, http.MethodGet, "shop-strict", h)
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(server.HeaderRetryAfter) == "" || resp.Header.Get(server.HeaderRemaining) != "0" {
		t.Fatalf("over the limit: %d %v, want 403 (denyStatus) with the rate-limit headers", resp.StatusCode, resp.Header)
	}
}

func TestForwardAuthMissingHeaderAllowed(t *testing.T) {
	e := startForwardAuth(t)
	for i := 0; i < 5; i++ { // more than per-key's limit: nothing is counted
		resp, body := forwardAuth(t, e, http.MethodGet, "shop", map[string]string{"X-Forwarded-Uri": "/v1/items"})
		if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get(server.HeaderReason), "header X-Api-Key") {
			t.Fatalf("call %d without X-Api-Key: %d %v %s, want 200 (onMissing Allow) naming the header", i, resp.StatusCode, resp.Header, body)
		}
	}
	if got := missingCount(t, e, "shop", "allowed"); got != 5 {
		t.Fatalf("sluice_forward_auth_missing_total{shop,allowed} = %v, want 5", got)
	}
	// Path is needed too: neither X-Forwarded-Uri nor X-Original-URI.
	resp, _ := forwardAuth(t, e, http.MethodGet, "shop", map[string]string{"X-Api-Key": "k"})
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get(server.HeaderReason), "X-Forwarded-Uri or X-Original-URI") {
		t.Fatalf("without a path: %d %q", resp.StatusCode, resp.Header.Get(server.HeaderReason))
	}
}

// onMissing Allow leaves out the missing entry, not the descriptor: the
// policies on the entries present still apply.
func TestForwardAuthMissingEntryOnly(t *testing.T) {
	e := startForwardAuth(t)
	post := map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/v1//orders/", "X-Forwarded-Host": "b.example"}
	resp, body := forwardAuth(t, e, http.MethodGet, "shop", post)
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get(server.HeaderReason), "header X-Api-Key") ||
		resp.Header.Get(server.HeaderLimit) != "1" {
		t.Fatalf("POST /v1/orders without X-Api-Key: %d %v %s, want 200 from orders-posts-per-host, the missing header named", resp.StatusCode, resp.Header, body)
	}
	if resp, body := forwardAuth(t, e, http.MethodGet, "shop", post); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the second POST /v1/orders on b.example without X-Api-Key: %d %s, want 429", resp.StatusCode, body)
	}
	if got := missingCount(t, e, "shop", "allowed"); got != 2 {
		t.Fatalf("sluice_forward_auth_missing_total{shop,allowed} = %v, want 2", got)
	}
}

func TestForwardAuthMissingHeaderDenied(t *testing.T) {
	e := startForwardAuth(t)
	resp, body := forwardAuth(t, e, http.MethodGet, "shop-strict", map[string]string{"X-Api-Key": "  "})
	if msg := errorMessage(t, resp, body); resp.StatusCode != http.StatusForbidden || !strings.Contains(msg, "header X-Api-Key") || !strings.Contains(msg, "onMissing Deny") {
		t.Fatalf("blank X-Api-Key: %d %q, want 403 (onMissing Deny) naming the header", resp.StatusCode, msg)
	}
	if got := missingCount(t, e, "shop-strict", "denied"); got != 1 {
		t.Fatalf("sluice_forward_auth_missing_total{shop-strict,denied} = %v, want 1", got)
	}
}

func TestForwardAuthHeaderTooLong(t *testing.T) {
	e := startForwardAuth(t)
	for _, name := range []string{"X-Api-Key", "X-Forwarded-For"} {
		h := map[string]string{"X-Api-Key": "k", "X-Forwarded-Uri": "/", name: strings.Repeat("1", server.MaxForwardAuthHeader+1)}
		resp, body := forwardAuth(t, e, http.MethodGet, "shop", h)
		if reason := resp.Header.Get(server.HeaderReason); resp.StatusCode != http.StatusTooManyRequests || reason != "header "+name+" is 1025 bytes long, the maximum is 1024" {
			t.Fatalf("%s of 1025 bytes: %d %q %s, want 429 (refused) naming it", name, resp.StatusCode, reason, body)
		}
	}
	// 1024 bytes is fine, and so is a long query: the path is counted.
	h := map[string]string{"X-Api-Key": strings.Repeat("k", server.MaxForwardAuthHeader), "X-Forwarded-Uri": "/?q=" + strings.Repeat("q", 2000)}
	if resp, body := forwardAuth(t, e, http.MethodGet, "shop", h); resp.StatusCode != http.StatusOK {
		t.Fatalf("X-Api-Key of 1024 bytes: %d %s", resp.StatusCode, body)
	}
}

func TestForwardAuthUnknownDomain(t *testing.T) {
	e := startForwardAuth(t)
	resp, body := forwardAuth(t, e, http.MethodGet, "nope", nil)
	if msg := errorMessage(t, resp, body); resp.StatusCode != http.StatusNotFound || !strings.Contains(msg, `no forwardAuth mapping for domain "nope"`) {
		t.Fatalf("unknown domain: %d %q", resp.StatusCode, msg)
	}
}

func missingCount(t *testing.T, e *env, domain, result string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_forward_auth_missing_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["domain"] == domain && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no sluice_forward_auth_missing_total{domain=%q,result=%q}", domain, result)
	return 0
}

// peek peeks at GET /v1/ratelimit/status with query.
func peek(t *testing.T, e *env, query string) (int, server.StatusResponse, string) {
	t.Helper()
	resp, body := get(t, e.http+server.StatusPath+"?"+query)
	var out server.StatusResponse
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatalf("status body %s: %v", body, err)
		}
		return resp.StatusCode, out, ""
	}
	return resp.StatusCode, out, errorMessage(t, resp, body)
}

func TestStatusPeek(t *testing.T) {
	e := start(t, envOptions{})
	q := url.Values{"domain": {chargesDomain}, "user_id": {"dora"}, "path": {"/v1/charges"}}.Encode()
	for i := 0; i < 3; i++ { // peeks consume nothing
		code, st, msg := peek(t, e, q)
		if code != http.StatusOK || len(st.Policies) != 1 {
			t.Fatalf("peek %d: %d %+v %s", i, code, st, msg)
		}
		p := st.Policies[0]
		if p.Policy != chargesPolicy || p.Algorithm != "TokenBucket" || p.Limit != chargesLimit || p.Remaining != chargesLimit ||
			p.PeriodSeconds != 60 || p.ResetSeconds != 0 || p.Shadow {
			t.Fatalf("peek %d: %+v", i, p)
		}
	}
	for i := 0; i < 2; i++ {
		post(t, e.http, "", chargeBody("dora"))
	}
	_, st, _ := peek(t, e, q)
	if p := st.Policies[0]; p.Remaining != chargesLimit-2 || p.ResetSeconds < 1 || p.ResetSeconds > 24 {
		t.Fatalf("after 2 checks: %+v, want 3 remaining, back to full within 24s", p)
	}
	if got := decisions(t, e.reg, ""); got != 2 {
		t.Fatalf("%v decisions counted, want the 2 checks only", got)
	}
	// Every matching policy is listed, but a shadow one: it is invisible
	// to clients.
	_, st, _ = peek(t, e, "domain=payments-api&user_id=dora&path=/v1/refunds&api_key=k1")
	var ids []string
	for _, p := range st.Policies {
		ids = append(ids, p.Policy)
	}
	if got := strings.Join(ids, " "); got != "payments/requests-per-api-key" {
		t.Fatalf("policies %q", got)
	}
	if st.Policies[0].Algorithm != "GCRA" || st.Policies[0].Burst != 20 {
		t.Fatalf("%+v", st.Policies)
	}
}

func TestStatusUnknownDomain(t *testing.T) {
	e := start(t, envOptions{})
	resp, body := get(t, e.http+server.StatusPath+"?domain=nope&user_id=x")
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != `{"domain":"nope","policies":[]}` {
		t.Fatalf("unknown domain: %d %s, want 200 with an empty list", resp.StatusCode, body)
	}
}

// A descriptor key named domain is given as entry.domain.
func TestStatusEntryPrefix(t *testing.T) {
	snap, err := config.Parse("inline", []byte(`apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-domain, namespace: dns}
spec:
  domain: dns
  descriptors: [{key: domain}]
  rate: {limit: 7, period: 1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, envOptions{snapshot: snap})
	code, st, msg := peek(t, e, "domain=dns&entry.domain=example.com")
	if code != http.StatusOK || len(st.Policies) != 1 || st.Policies[0].Limit != 7 {
		t.Fatalf("%d %+v %s", code, st, msg)
	}
}

func TestStatusBadQuery(t *testing.T) {
	e := start(t, envOptions{})
	for _, tc := range []struct{ query, want string }{
		{"user_id=x", "the domain query parameter is required"},
		{"domain=a&domain=b&user_id=x", "2 domain query parameters: give one"},
		{"domain=payments-api", "no descriptor entries: add key=value query parameters"},
		{"domain=payments-api&user_id=a&user_id=b", `descriptor key "user_id" is given 2 times`},
		{"domain=payments-api&user_id=a&entry.user_id=b", `descriptor key "user_id" is given twice`},
		{"domain=payments-api&entry.=b", "has an empty descriptor key"},
		{"domain=payments-api&user_id=%zz", "invalid query"},
		{"domain=payments-api&user_id=" + strings.Repeat("v", service.MaxEntryLength+1), "value is 1025 bytes long, the maximum is 1024"},
	} {
		code, _, msg := peek(t, e, tc.query)
		if code != http.StatusBadRequest || !strings.Contains(msg, tc.want) {
			t.Errorf("%.60s: %d %q, want 400 with %q", tc.query, code, msg, tc.want)
		}
	}
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, e.http+server.StatusPath+"?domain=payments-api&user_id=x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, body := do(t, req); resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(errorMessage(t, resp, body), "use GET, HEAD") {
		t.Errorf("POST to the status peek: %d %s, want 405", resp.StatusCode, body)
	}
}
