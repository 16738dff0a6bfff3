package server_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/server"
)

// TestPolicyFeatures runs the sample policies of each policy feature
// (config/samples/policies.yaml) on every store, over RLS and HTTP.
func TestPolicyFeatures(t *testing.T) {
	for _, fs := range storeKinds(t) {
		t.Run(fs.name, func(t *testing.T) {
			t.Run("calendar", func(t *testing.T) { testCalendarQuota(t, fs) })
			t.Run("priority", func(t *testing.T) { testPriorityShedding(t, fs) })
			t.Run("penalty", func(t *testing.T) { testPenalty(t, fs) })
			t.Run("tenancy", func(t *testing.T) { testFeaturesStayInTheirTenant(t, fs) })
			t.Run("hidden penalty", func(t *testing.T) { testHiddenPenalty(t, fs) })
		})
	}
}

// featureEnv is a server on the sample policies, over a store with a
// synthetic clock.
type featureEnv struct {
	*env
	clock *storetest.Clock
}

func startFeatures(t *testing.T, fs storeKind) featureEnv {
	return startFeaturesWith(t, fs, nil)
}

// startFeaturesWith serves snap (nil: the samples).
func startFeaturesWith(t *testing.T, fs storeKind, snap *config.Snapshot) featureEnv {
	clock := storetest.NewClock()
	return featureEnv{env: start(t, envOptions{store: fs.new(t, clock.Now), snapshot: snap}), clock: clock}
}

func (e featureEnv) at(s string) {
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	e.clock.Set(v)
}

// rls sends one descriptor of entries (key, value, ...) costing hits.
func (e featureEnv) rls(t *testing.T, domain string, hits uint32, kv ...string) *rlsv3.RateLimitResponse {
	t.Helper()
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	resp, err := e.env.rls.ShouldRateLimit(ctxT(t), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{d}, HitsAddend: hits})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// check posts one descriptor of entries (key, value, ...) costing hits to
// the HTTP check.
func (e featureEnv) check(t *testing.T, domain string, hits int, kv ...string) (*http.Response, string) {
	t.Helper()
	var entries []string
	for i := 0; i < len(kv); i += 2 {
		entries = append(entries, `{"key":`+strconv.Quote(kv[i])+`,"value":`+strconv.Quote(kv[i+1])+`}`)
	}
	body := `{"domain":` + strconv.Quote(domain) + `,"hitsAddend":` + strconv.Itoa(hits) + `,"descriptors":[{"entries":[` + strings.Join(entries, ",") + `]}]}`
	resp, b := post(t, e.http, "application/json", body)
	return resp, string(b)
}

// wantHeaders fails unless resp carries each header with exactly its
// value ("" for absent).
func wantHeaders(t *testing.T, what string, resp *rlsv3.RateLimitResponse, want map[string]string) {
	t.Helper()
	for name, v := range want {
		got, ok := header(resp, name)
		if got != v || ok != (v != "") {
			t.Errorf("%s: header %s = %q (present %v), want %q", what, name, got, ok, v)
		}
	}
}

// retryAfterWithin fails unless Retry-After is in [lo, lo+10%] seconds (the
// default jitter).
func retryAfterWithin(t *testing.T, what, ra string, lo int) {
	t.Helper()
	n, err := strconv.Atoi(ra)
	if err != nil || n < lo || n > lo+lo/10+1 {
		t.Errorf("%s: Retry-After %q, want %d to %d seconds", what, ra, lo, lo+lo/10+1)
	}
}

// testCalendarQuota: payments/calls-per-account-daily allows 10,000 calls
// per account per calendar day in New York, where March 8, 2026 lasts 23
// hours and November 1, 25.
func testCalendarQuota(t *testing.T, fs storeKind) {
	const policy = `"payments/calls-per-account-daily"`
	e := startFeatures(t, fs)
	acct := []string{"account_id", "acme"}

	e.at("2026-03-08T12:00:00Z") // 08:00 EDT; the day ends at 04:00 UTC
	resp := e.rls(t, "payments-api", 9999, acct...)
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("9999 of 10000: %v", resp)
	}
	st := resp.Statuses[0]
	if st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_DAY || st.CurrentLimit.GetRequestsPerUnit() != 10000 ||
		st.LimitRemaining != 1 || st.DurationUntilReset.AsDuration() != 16*time.Hour {
		t.Fatalf("9999 of 10000: status %v, want 1 remaining of 10000 a DAY, reset in 16h", st)
	}
	wantHeaders(t, "9999 of 10000", resp, map[string]string{
		"RateLimit": policy + ";r=1;t=57600", "X-RateLimit-Reset": "57600", "X-RateLimit-Limit": "10000", "Retry-After": "",
	})
	if pol, _ := header(resp, "RateLimit-Policy"); !strings.HasPrefix(pol, policy+";q=10000;w=") ||
		!strings.Contains("82800 86400 90000", strings.TrimPrefix(pol, policy+";q=10000;w=")) {
		t.Errorf("RateLimit-Policy %q, want w= a day of 23, 24 or 25 hours", pol)
	}

	hresp, body := e.check(t, "payments-api", 2, acct...)
	if hresp.StatusCode != http.StatusTooManyRequests || hresp.Header.Get("RateLimit") != policy+";r=1;t=57600" {
		t.Fatalf("2 more over HTTP: %d %v %s, want 429 with r=1;t=57600", hresp.StatusCode, hresp.Header, body)
	}
	retryAfterWithin(t, "2 more over HTTP", hresp.Header.Get("Retry-After"), 57600)
	if hresp, body = e.check(t, "payments-api", 1, acct...); hresp.StatusCode != http.StatusOK || hresp.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("the last one over HTTP: %d %s", hresp.StatusCode, body)
	}

	e.at("2026-03-09T03:59:59Z") // Mar 8 23:59:59 EDT
	resp = e.rls(t, "payments-api", 1, acct...)
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a second before midnight: %v", resp)
	}
	wantHeaders(t, "a second before midnight", resp, map[string]string{"RateLimit": policy + ";r=0;t=1", "Retry-After": "1"})

	e.at("2026-03-09T04:00:00Z") // Mar 9 00:00 EDT: a 24-hour day
	if resp = e.rls(t, "payments-api", 1, acct...); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("midnight: %v", resp)
	}
	wantHeaders(t, "midnight", resp, map[string]string{"RateLimit": policy + ";r=9999;t=86400"})

	e.at("2026-11-01T04:00:00Z") // Nov 1 00:00 EDT: a 25-hour day
	hresp, body = e.check(t, "payments-api", 10000, acct...)
	if hresp.StatusCode != http.StatusOK || hresp.Header.Get("RateLimit") != policy+";r=0;t=90000" {
		t.Fatalf("Nov 1 over HTTP: %d %v %s, want 200 with r=0;t=90000", hresp.StatusCode, hresp.Header, body)
	}
	e.at("2026-11-02T04:59:59Z") // Nov 1 23:59:59 EST
	if hresp, body = e.check(t, "payments-api", 1, acct...); hresp.StatusCode != http.StatusTooManyRequests || hresp.Header.Get("Retry-After") != "1" {
		t.Fatalf("Nov 1 23:59:59 EST over HTTP: %d %v %s, want 429 with Retry-After 1", hresp.StatusCode, hresp.Header, body)
	}
	// Another account has its own quota.
	if resp = e.rls(t, "payments-api", 10000, "account_id", "globex"); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("another account: %v", resp)
	}
}

// testPriorityShedding: payments/load-shedder shares 500 requests a second
// among every caller; critical may use 100%, default 80%, batch 50%.
func testPriorityShedding(t *testing.T, fs storeKind) {
	e := startFeatures(t, fs)
	svc := func(priority string) []string {
		if priority == "" {
			return []string{"service", "payments"}
		}
		return []string{"service", "payments", "priority", priority}
	}
	rls := func(what string, hits uint32, priority string, want rlsv3.RateLimitResponse_Code, remaining uint32) *rlsv3.RateLimitResponse {
		t.Helper()
		resp := e.rls(t, "payments-api", hits, svc(priority)...)
		if resp.OverallCode != want || resp.Statuses[0].LimitRemaining != remaining {
			t.Fatalf("%s: %v with %d remaining, want %v with %d", what, resp.OverallCode, resp.Statuses[0].LimitRemaining, want, remaining)
		}
		return resp
	}
	const ok, over = rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT

	// Batch fills its half of the second, then is shed; the others are not.
	rls("batch, 250", 250, "batch", ok, 0)
	resp := rls("batch, one more", 1, "batch", over, 0)
	wantHeaders(t, "batch shed", resp, map[string]string{`RateLimit`: `"payments/load-shedder";r=0;t=1`, "Retry-After": "1"})
	rls("no priority: default, 150 (to 400 of 500)", 150, "", ok, 0)
	rls("an unknown priority counts as default", 1, "bulk", over, 0)
	// critical may use what is left: 100.
	rls("critical, 1", 1, "critical", ok, 99)
	hresp, body := e.check(t, "payments-api", 99, svc("critical")...)
	if hresp.StatusCode != http.StatusOK || hresp.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("critical, the last 99, over HTTP: %d %s", hresp.StatusCode, body)
	}
	if hresp, body = e.check(t, "payments-api", 1, svc("critical")...); hresp.StatusCode != http.StatusTooManyRequests || hresp.Header.Get("Retry-After") != "1" {
		t.Fatalf("critical over capacity over HTTP: %d %v %s, want 429 with Retry-After 1", hresp.StatusCode, hresp.Header, body)
	}
	if hresp, body = e.check(t, "payments-api", 1, svc("batch")...); hresp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("batch over HTTP: %d %s, want 429", hresp.StatusCode, body)
	}

	// The next second starts afresh: batch may use 250 again.
	e.clock.Set(storetest.Base.Add(time.Second))
	rls("batch in the next second", 1, "batch", ok, 249)

	for _, c := range []struct {
		priority, result string
		want             float64
	}{
		{"batch", "allowed", 2}, {"batch", "limited", 2}, {"default", "allowed", 1}, {"default", "limited", 1},
		{"critical", "allowed", 2}, {"critical", "limited", 1},
	} {
		if got := metricValue(t, e.reg, "sluice_priority_decisions_total", map[string]string{"policy": "payments/load-shedder", "priority": c.priority, "result": c.result}); got != c.want {
			t.Errorf("sluice_priority_decisions_total{priority=%q,result=%q} = %v, want %v", c.priority, c.result, got, c.want)
		}
	}
}

// metricValue sums the samples of the named metric that carry labels.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metrics
				}
			}
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

// testPenalty: identity/password-resets-per-ip allows 5 a minute per
// address; over that 3 times within 10 minutes, the address is denied for
// 15 minutes with 403 and its own reason.
func testPenalty(t *testing.T, fs storeKind) {
	const (
		policy = "identity/password-resets-per-ip"
		reason = "too many password resets from this address: blocked for 15 minutes"
	)
	e := startFeatures(t, fs)
	addr := func(ip string) []string { return []string{"remote_address", ip, "path", "/v1/password/reset"} }
	const ok, over = rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT

	if resp := e.rls(t, "identity-api", 5, addr("203.0.113.9")...); resp.OverallCode != ok {
		t.Fatalf("5 resets: %v", resp)
	}
	// Two denials: over the limit, not penalized yet.
	resp := e.rls(t, "identity-api", 1, addr("203.0.113.9")...)
	if resp.OverallCode != over || resp.DynamicMetadata != nil {
		t.Fatalf("a 6th reset: %v, want OVER_LIMIT without a reason", resp)
	}
	wantHeaders(t, "a 6th reset", resp, map[string]string{"X-Sluice-Reason": "", "RateLimit": `"` + policy + `";r=0;t=60`})
	if hresp, body := e.check(t, "identity-api", 1, addr("203.0.113.9")...); hresp.StatusCode != http.StatusTooManyRequests || hresp.Header.Get("X-Sluice-Reason") != "" {
		t.Fatalf("a 7th reset over HTTP: %d %v %s, want 429 without a reason", hresp.StatusCode, hresp.Header, body)
	}

	// The third denial within 10 minutes starts the penalty.
	e.clock.Set(storetest.Base.Add(10 * time.Second))
	resp = e.rls(t, "identity-api", 1, addr("203.0.113.9")...)
	if resp.OverallCode != over || resp.Statuses[0].DurationUntilReset.AsDuration() != 15*time.Minute {
		t.Fatalf("the third denial: %v, want OVER_LIMIT for 15 minutes", resp)
	}
	wantHeaders(t, "the third denial", resp, map[string]string{"X-Sluice-Reason": reason, "RateLimit": `"` + policy + `";r=0;t=900`})
	ra, _ := header(resp, "Retry-After")
	retryAfterWithin(t, "the third denial", ra, 900)
	md := resp.DynamicMetadata.AsMap()
	if md["reason"] != reason || md["policy"] != policy || md["penalized"] != true || md["status"] != float64(403) {
		t.Errorf("the third denial: dynamic metadata %v, want the penalty's reason, policy, penalized and status 403", md)
	}

	// Two minutes on, the counter's window would allow it: the penalty
	// still denies, with its own status, whatever it costs.
	e.clock.Set(storetest.Base.Add(2 * time.Minute))
	hresp, body := e.check(t, "identity-api", 1, addr("203.0.113.9")...)
	if hresp.StatusCode != http.StatusForbidden || hresp.Header.Get("X-Sluice-Reason") != reason {
		t.Fatalf("penalized over HTTP: %d %v %s, want 403 with the penalty's reason", hresp.StatusCode, hresp.Header, body)
	}
	retryAfterWithin(t, "penalized over HTTP", hresp.Header.Get("Retry-After"), 790)
	sresp, sbody := get(t, e.http+server.StatusPath+"?domain=identity-api&remote_address=203.0.113.9&path=/v1/password/reset")
	if sresp.StatusCode != http.StatusOK || !strings.Contains(string(sbody), `"penalized":true`) || !strings.Contains(string(sbody), `"resetSeconds":790`) {
		t.Errorf("status peek while penalized: %d %s", sresp.StatusCode, sbody)
	}
	// Another address is not penalized.
	if hresp, body = e.check(t, "identity-api", 1, addr("198.51.100.4")...); hresp.StatusCode != http.StatusOK {
		t.Fatalf("another address: %d %s", hresp.StatusCode, body)
	}

	// The penalty ends by itself, 15 minutes after it started.
	e.clock.Set(storetest.Base.Add(10*time.Second + 15*time.Minute - time.Millisecond))
	if resp = e.rls(t, "identity-api", 1, addr("203.0.113.9")...); resp.OverallCode != over {
		t.Fatalf("a millisecond before the end: %v", resp)
	}
	e.clock.Set(storetest.Base.Add(10*time.Second + 15*time.Minute))
	if resp = e.rls(t, "identity-api", 1, addr("203.0.113.9")...); resp.OverallCode != ok {
		t.Fatalf("the penalty's end: %v, want OK", resp)
	}

	// Counted apart: 2 limited, 3 penalized (the peek is not a decision),
	// 3 allowed (the 5, the other address, the end).
	for result, want := range map[string]float64{"limited": 2, "penalized": 3, "allowed": 3} {
		if got := metricValue(t, e.reg, "sluice_decisions_total", map[string]string{"policy": policy, "result": result}); got != want {
			t.Errorf("sluice_decisions_total{result=%q} = %v, want %v", result, got, want)
		}
	}
	for _, p := range e.srv.AdminStats().Policies {
		if p.Namespace+"/"+p.Name == policy && (p.Penalized != 3 || p.Limited != 2) {
			t.Errorf("admin stats: %+v, want 3 penalized and 2 limited", p)
		}
	}
}

// tenantPolicies are two tenants' policies on the same descriptor keys:
// tenant-a sheds all of its batch traffic and penalizes a user for an hour
// at the second denial; tenant-b does neither.
const tenantPolicies = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: strict, namespace: tenant-a}
spec:
  domain: a-api
  descriptors: [{key: user_id}]
  algorithm: FixedWindow
  rate: {limit: 1, period: 1m}
  priority:
    key: priority
    levels: [{value: critical, share: 100}, {value: batch, share: 0}]
    default: critical
  penalty: {duration: 1h, after: 2}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: relaxed, namespace: tenant-b}
spec:
  domain: b-api
  descriptors: [{key: user_id}]
  algorithm: FixedWindow
  rate: {limit: 5, period: 1m}
`

// A tenant's policy sheds and penalizes its own keys only: counters, and
// the penalties stored beside them, are keyed by policy within the
// policy's domain, so the same user in another tenant's domain, with the
// same entries, is neither shed nor penalized.
func testFeaturesStayInTheirTenant(t *testing.T, fs storeKind) {
	snap, err := config.Parse("tenants", []byte(tenantPolicies))
	if err != nil {
		t.Fatal(err)
	}
	e := startFeaturesWith(t, fs, snap)
	const ok, over = rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	batch := []string{"user_id", "mallory", "priority", "batch"}
	critical := []string{"user_id", "mallory", "priority", "critical"}

	if resp := e.rls(t, "a-api", 1, batch...); resp.OverallCode != over || resp.DynamicMetadata != nil {
		t.Fatalf("tenant-a sheds its batch traffic: %v", resp)
	}
	if resp := e.rls(t, "a-api", 1, critical...); resp.OverallCode != ok {
		t.Fatalf("tenant-a, critical: %v", resp)
	}
	// The shed batch request was no strike (a priority share's denial):
	// the first strike is this denial, the second penalizes.
	if resp := e.rls(t, "a-api", 1, critical...); resp.OverallCode != over || resp.DynamicMetadata.AsMap()["penalized"] == true {
		t.Fatalf("tenant-a, the first strike: %v, want OVER_LIMIT, not penalized", resp)
	}
	resp := e.rls(t, "a-api", 1, critical...)
	if md := resp.DynamicMetadata.AsMap(); resp.OverallCode != over || md["penalized"] != true {
		t.Fatalf("tenant-a penalizes mallory: %v", resp)
	}
	for i := range 5 {
		kv := [][]string{batch, critical}[i%2]
		resp := e.rls(t, "b-api", 1, kv...)
		if resp.OverallCode != ok || resp.DynamicMetadata != nil {
			t.Fatalf("tenant-b, request %d (%v): %v, want OK: tenant-a's priorities and penalty are not tenant-b's", i, kv, resp)
		}
	}
	if hresp, body := e.check(t, "b-api", 1, critical...); hresp.StatusCode != http.StatusTooManyRequests || hresp.Header.Get("X-Sluice-Reason") != "" {
		t.Fatalf("tenant-b's own limit: %d %v %s, want a plain 429", hresp.StatusCode, hresp.Header, body)
	}
	// tenant-a's penalty holds meanwhile.
	if hresp, body := e.check(t, "a-api", 1, critical...); hresp.StatusCode != http.StatusForbidden {
		t.Fatalf("tenant-a, still penalized: %d %s", hresp.StatusCode, body)
	}
}

// hiddenPenaltyPolicies: a hidden security limit that penalizes an address
// at its first denial, beside a visible limit of the same requests.
const hiddenPenaltyPolicies = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: login-guard, namespace: security}
spec:
  domain: auth
  descriptors: [{key: remote_address}]
  algorithm: FixedWindow
  rate: {limit: 3, period: 1m}
  visibility: Hidden
  penalty: {duration: 10m, after: 1}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: logins, namespace: security}
spec:
  domain: auth
  descriptors: [{key: remote_address}, {key: path, value: /login}]
  algorithm: FixedWindow
  rate: {limit: 100, period: 1m}
`

// A penalty on a hidden policy (issue 19's response half and store half
// together) denies with its status and a reason that names no policy; the
// headers and problem details show the visible policy only, and the RLS
// dynamic metadata has no policy name.
func testHiddenPenalty(t *testing.T, fs storeKind) {
	snap, err := config.Parse("hidden-penalty", []byte(hiddenPenaltyPolicies))
	if err != nil {
		t.Fatal(err)
	}
	e := startFeaturesWith(t, fs, snap)
	const reason = "penalized for 10m0s"
	login := []string{"remote_address", "192.0.2.7", "path", "/login"}
	if resp := e.rls(t, "auth", 3, login...); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("3 logins: %v", resp)
	}
	// The 4th: over the hidden limit, which penalizes at once.
	resp := e.rls(t, "auth", 1, login...)
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a 4th login: %v, want OVER_LIMIT", resp)
	}
	wantHeaders(t, "a 4th login", resp, map[string]string{"X-Sluice-Reason": reason, "RateLimit": `"security/logins";r=96;t=60`})
	ra, _ := header(resp, "Retry-After")
	retryAfterWithin(t, "a 4th login", ra, 600)
	md := resp.DynamicMetadata.AsMap()
	if md["reason"] != reason || md["penalized"] != true || md["status"] != float64(http.StatusForbidden) {
		t.Errorf("a 4th login: dynamic metadata %v, want the penalty's reason, penalized and status 403", md)
	}
	if _, ok := md["policy"]; ok {
		t.Errorf("a 4th login: dynamic metadata %v names the hidden policy", md)
	}

	// Over HTTP, with problem details: the penalty's status in the answer
	// and the body, and no violated policy (the only one is hidden).
	e.clock.Set(storetest.Base.Add(time.Minute))
	body := `{"domain":"auth","descriptors":[{"entries":[{"key":"remote_address","value":"192.0.2.7"},{"key":"path","value":"/login"}]}]}`
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, e.http+server.CheckPath, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", server.ProblemContentType)
	hresp, hbody := do(t, req)
	var pd server.Problem
	if err := json.Unmarshal(hbody, &pd); err != nil || hresp.StatusCode != http.StatusForbidden || pd.Status != http.StatusForbidden || len(pd.ViolatedPolicies) != 0 {
		t.Fatalf("penalized, problem details: %d %s (%v), want 403 with status 403 and no violated policy", hresp.StatusCode, hbody, err)
	}
	if got := hresp.Header.Get("X-Sluice-Reason"); got != reason {
		t.Errorf("penalized, problem details: X-Sluice-Reason %q, want %q", got, reason)
	}
	retryAfterWithin(t, "penalized, problem details", hresp.Header.Get("Retry-After"), 540)
	if strings.Contains(string(hbody), "login-guard") || strings.Contains(hresp.Header.Get("RateLimit-Policy"), "login-guard") {
		t.Errorf("penalized, problem details: %v %s names the hidden policy", hresp.Header, hbody)
	}
	if got := metricValue(t, e.reg, "sluice_decisions_total", map[string]string{"policy": "security/login-guard", "result": "penalized"}); got != 2 {
		t.Errorf("sluice_decisions_total{result=penalized} = %v, want 2", got)
	}
}
