package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/service"
)

// The tests of what clients are told of a decision (problem details,
// hidden limits, soft limits) run on testdata/client-view.yaml, over RLS
// and HTTP, on each store: memory, a real redis-server and a real 3-primary
// Redis Cluster, all on a stopped clock, with Retry-After jitter off.

const viewPolicies = "testdata/client-view.yaml"

// startView serves file on a fresh store of kind vs, on a stopped clock.
func startView(t *testing.T, vs storeKind, file string) *goldenEnv {
	t.Helper()
	snap, err := config.LoadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	clock := storetest.NewClock()
	return startGolden(t, vs.new(t, clock.Now), snap)
}

// viewPost sends an HTTP check with body and headers (name, value, ...).
func viewPost(t *testing.T, e *goldenEnv, body string, hv ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, "http://"+e.http+server.CheckPath, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(hv); i += 2 {
		req.Header.Add(hv[i], hv[i+1])
	}
	return do(t, req)
}

// viewGet sends a GET to path with headers (name, value, ...).
func viewGet(t *testing.T, e *goldenEnv, path string, hv ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, "http://"+e.http+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(hv); i += 2 {
		req.Header.Add(hv[i], hv[i+1])
	}
	return do(t, req)
}

// checkBody is an HTTP check of one descriptor of key, value pairs in
// domain api.
func checkBody(kv ...string) string {
	var b strings.Builder
	b.WriteString(`{"domain":"api","descriptors":[{"entries":[`)
	for i := 0; i < len(kv); i += 2 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"key":"` + kv[i] + `","value":"` + kv[i+1] + `"}`)
	}
	b.WriteString(`]}]}`)
	return b.String()
}

// limitHeaders are the rate-limit headers of an HTTP answer, by name.
func limitHeaders(h http.Header) map[string][]string {
	out := map[string][]string{}
	for _, name := range []string{server.HeaderRateLimit, server.HeaderRateLimitPolicy, server.HeaderLimit,
		server.HeaderRemaining, server.HeaderReset, server.HeaderRetryAfter, server.HeaderReason} {
		if v := h.Values(name); len(v) > 0 {
			out[name] = v
		}
	}
	return out
}

func decodeProblem(t *testing.T, resp *http.Response, body []byte) server.Problem {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != server.ProblemContentType {
		t.Fatalf("Content-Type %q, want %q; body %s", ct, server.ProblemContentType, body)
	}
	var p server.Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("problem body %s: %v", body, err)
	}
	return p
}

const (
	quotaExceeded   = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	abnormalUsage   = "https://iana.org/assignments/http-problem-types#abnormal-usage-detected"
	loginDetail     = "Too many sign-in attempts: wait before trying again."
	acceptProblem   = "application/problem+json"
	perUserPolicy   = "api/per-user"
	loginPolicyName = "api/login"
)

// TestProblemDetails: a denied client that accepts application/problem+json
// gets the draft's problem type with violated-policies, and the same
// rate-limit headers as any client; other clients, and allowed requests,
// get what they always did. Over HTTP (the check and forward-auth) and RLS
// (the body Envoy sends, when the descriptor carries the Accept header).
func TestProblemDetails(t *testing.T) {
	for _, vs := range storeKinds(t) {
		t.Run(vs.name, func(t *testing.T) {
			e := startView(t, vs, viewPolicies)
			ann := checkBody("user_id", "ann")
			for i := 1; i <= 2; i++ {
				resp, body := viewPost(t, e, ann, "Accept", acceptProblem)
				if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
					t.Fatalf("request %d: %d %s %s, want 200 with the JSON RateLimitResponse", i, resp.StatusCode, resp.Header.Get("Content-Type"), body)
				}
			}
			resp, body := viewPost(t, e, ann, "Accept", acceptProblem)
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("third request: %d %s, want 429", resp.StatusCode, body)
			}
			got := decodeProblem(t, resp, body)
			want := server.Problem{Type: quotaExceeded, Title: "Request cannot be satisfied as assigned quota has been exceeded",
				Status: http.StatusTooManyRequests, ViolatedPolicies: []string{perUserPolicy}}
			if !problemEqual(got, want) {
				t.Fatalf("problem %+v, want %+v", got, want)
			}
			if !strings.Contains(string(body), `"violated-policies":["api/per-user"]`) {
				t.Errorf("body %s lacks the draft's member name", body)
			}
			// A client that does not ask gets the JSON RateLimitResponse,
			// with the same headers.
			for _, accept := range []string{"", "application/json", "*/*", "application/json, application/problem+json;q=0.5"} {
				jresp, jbody := viewPost(t, e, ann, "Accept", accept)
				if jresp.StatusCode != http.StatusTooManyRequests || jresp.Header.Get("Content-Type") != "application/json" ||
					!strings.Contains(string(jbody), `"overallCode":"OVER_LIMIT"`) {
					t.Fatalf("Accept %q: %d %s %s, want 429 with the JSON RateLimitResponse", accept, jresp.StatusCode, jresp.Header.Get("Content-Type"), jbody)
				}
				if g, w := limitHeaders(resp.Header), limitHeaders(jresp.Header); !mapsEqual(g, w) {
					t.Errorf("Accept %q: problem details came with headers %v, the JSON answer with %v", accept, g, w)
				}
			}
			if limitHeaders(resp.Header)[server.HeaderRetryAfter] == nil {
				t.Errorf("problem details without Retry-After: %v", resp.Header)
			}

			// The sign-in limit has its own type and detail; once both
			// deny, both are named.
			bob := checkBody("user_id", "bob", "path", "/login")
			if resp, body := viewPost(t, e, bob, "Accept", acceptProblem); resp.StatusCode != http.StatusOK {
				t.Fatalf("first sign-in: %d %s", resp.StatusCode, body)
			}
			resp, body = viewPost(t, e, bob, "Accept", acceptProblem)
			got = decodeProblem(t, resp, body)
			want = server.Problem{Type: abnormalUsage, Title: "Request not satisfied due to detection of abnormal request pattern",
				Status: http.StatusTooManyRequests, Detail: loginDetail, ViolatedPolicies: []string{loginPolicyName}}
			if resp.StatusCode != http.StatusTooManyRequests || !problemEqual(got, want) {
				t.Fatalf("second sign-in: %d %+v, want 429 %+v", resp.StatusCode, got, want)
			}
			resp, body = viewPost(t, e, bob, "Accept", "application/json, application/problem+json")
			if got := decodeProblem(t, resp, body); !slices.Equal(got.ViolatedPolicies, []string{loginPolicyName, perUserPolicy}) {
				t.Fatalf("third sign-in: violated-policies %v, want both", got.ViolatedPolicies)
			}

			// RLS: the Accept header as a descriptor entry.
			rlsAsk := rlsReq("api", 0, rlsDesc("user_id", "bob", "path", "/login", server.AcceptEntry, "application/problem+json"))
			out, err := e.rls.ShouldRateLimit(ctxT(t), rlsAsk)
			if err != nil {
				t.Fatal(err)
			}
			var rp server.Problem
			if err := json.Unmarshal(out.RawBody, &rp); err != nil || out.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT ||
				rp.Status != http.StatusTooManyRequests || len(rp.ViolatedPolicies) != 2 {
				t.Fatalf("RLS with an Accept entry: %v, body %s (%v), want OVER_LIMIT with problem details naming both", out.OverallCode, out.RawBody, err)
			}
			if ct, _ := header(out, "Content-Type"); ct != server.ProblemContentType {
				t.Errorf("RLS with an Accept entry: Content-Type %q, want %q", ct, server.ProblemContentType)
			}
			out, err = e.rls.ShouldRateLimit(ctxT(t), rlsReq("api", 0, rlsDesc("user_id", "bob", "path", "/login")))
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := header(out, "Content-Type"); len(out.RawBody) != 0 || ok || out.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Errorf("RLS without one: %v body %q, want OVER_LIMIT with no body and no Content-Type", out.OverallCode, out.RawBody)
			}
			out, err = e.rls.ShouldRateLimit(ctxT(t), rlsReq("api", 0, rlsDesc("user_id", "eve", server.AcceptEntry, acceptProblem)))
			if err != nil || out.OverallCode != rlsv3.RateLimitResponse_OK || len(out.RawBody) != 0 {
				t.Errorf("RLS allowed with an Accept entry: %v %v body %q, want OK without a body", out, err, out.GetRawBody())
			}

			// Forward-auth answers the mapping's denyStatus, and says so.
			fa := func(accept string) (*http.Response, []byte) {
				return viewGet(t, e, server.ForwardAuthPath+"api", "X-User", "cy", "X-Forwarded-Uri", "/v1/items", "Accept", accept)
			}
			for i := 1; i <= 2; i++ {
				if resp, body := fa(acceptProblem); resp.StatusCode != http.StatusOK {
					t.Fatalf("forward-auth %d: %d %s", i, resp.StatusCode, body)
				}
			}
			resp, body = fa(acceptProblem)
			if got := decodeProblem(t, resp, body); resp.StatusCode != http.StatusForbidden || got.Status != http.StatusForbidden ||
				!slices.Equal(got.ViolatedPolicies, []string{perUserPolicy}) {
				t.Fatalf("forward-auth denied: %d %+v, want 403 naming %s", resp.StatusCode, got, perUserPolicy)
			}
			if resp, body := fa("text/html"); resp.StatusCode != http.StatusForbidden || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("forward-auth denied, HTML client: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
		})
	}
}

func problemEqual(a, b server.Problem) bool {
	return a.Type == b.Type && a.Title == b.Title && a.Status == b.Status && a.Detail == b.Detail &&
		slices.Equal(a.ViolatedPolicies, b.ViolatedPolicies)
}

func mapsEqual(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// TestHiddenLimits: a hidden policy denies, and its denial carries
// Retry-After (until its counter is full again), but no answer names it
// or shows its numbers: not the rate-limit headers, RLS statuses, problem
// details, the status peek, nor a refused cost. Beside a visible policy,
// the visible one is reported.
func TestHiddenLimits(t *testing.T) {
	for _, vs := range storeKinds(t) {
		t.Run(vs.name, func(t *testing.T) {
			e := startView(t, vs, viewPolicies)
			noTrace := func(what string, h http.Header, body []byte) {
				t.Helper()
				for _, s := range append([]string{string(body)}, flatten(h)...) {
					if strings.Contains(s, "per-ip-hidden") || strings.Contains(s, "export-guard") {
						t.Errorf("%s: %q names a hidden policy", what, s)
					}
				}
			}

			// Only a hidden policy matches: no rate-limit headers at all.
			ip := checkBody("ip", "10.0.0.1")
			for i := 1; i <= 2; i++ {
				resp, body := viewPost(t, e, ip)
				if resp.StatusCode != http.StatusOK || len(limitHeaders(resp.Header)) != 0 || strings.Contains(string(body), "currentLimit") {
					t.Fatalf("request %d: %d %v %s, want 200 without rate-limit headers or a current limit", i, resp.StatusCode, resp.Header, body)
				}
				noTrace("allowed", resp.Header, body)
			}
			resp, body := viewPost(t, e, ip, "Accept", acceptProblem)
			// A token bucket of 2 a minute frees a token in 30s; the
			// hidden policy says when it is full again: 60s.
			if g, w := limitHeaders(resp.Header), map[string][]string{server.HeaderRetryAfter: {"60"}}; resp.StatusCode != http.StatusTooManyRequests || !mapsEqual(g, w) {
				t.Fatalf("denied: %d %v, want 429 with only Retry-After: 60", resp.StatusCode, g)
			}
			noTrace("denied", resp.Header, body)
			if p := decodeProblem(t, resp, body); p.Type != quotaExceeded || len(p.ViolatedPolicies) != 0 || !strings.Contains(string(body), `"violated-policies":[]`) {
				t.Fatalf("problem details %s, want quota-exceeded naming no policy", body)
			}
			resp, body = viewPost(t, e, ip)
			if resp.StatusCode != http.StatusTooManyRequests || strings.Contains(string(body), "currentLimit") {
				t.Fatalf("denied, JSON: %d %s", resp.StatusCode, body)
			}
			noTrace("denied, JSON", resp.Header, body)
			out, err := e.rls.ShouldRateLimit(ctxT(t), rlsReq("api", 0, rlsDesc("ip", "10.0.0.2")))
			if err != nil {
				t.Fatal(err)
			}
			if st := out.Statuses[0]; out.OverallCode != rlsv3.RateLimitResponse_OK || len(out.ResponseHeadersToAdd) != 0 ||
				st.CurrentLimit != nil || st.LimitRemaining != 0 || st.DurationUntilReset != nil {
				t.Fatalf("RLS allowed: %v, want OK with no headers and a bare status", out)
			}
			// The status peek leaves it out.
			resp, body = viewGet(t, e, server.StatusPath+"?domain=api&ip=10.0.0.1")
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"policies":[]`) {
				t.Fatalf("status peek: %d %s, want no policy", resp.StatusCode, body)
			}
			// A cost above its maxCost is refused without the cap or the name.
			resp, body = viewPost(t, e, `{"domain":"api","hitsAddend":3,"descriptors":[{"entries":[{"key":"ip","value":"10.0.0.3"}]}]}`)
			if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "above the maximum cost of a hidden policy") || strings.Contains(string(body), " 2") {
				t.Fatalf("cost 3: %d %s, want 429 (refused) saying no cap", resp.StatusCode, body)
			}
			noTrace("cost refused", resp.Header, body)

			// Beside a visible policy: the visible one is reported, the
			// hidden one denies with its own Retry-After.
			dan := checkBody("user_id", "dan", "path", "/v1/export")
			resp, body = viewPost(t, e, dan)
			if resp.StatusCode != http.StatusOK || resp.Header.Get(server.HeaderRateLimit) != `"api/per-user";r=1;t=60` {
				t.Fatalf("first export: %d %v", resp.StatusCode, resp.Header)
			}
			noTrace("first export", resp.Header, body)
			resp, body = viewPost(t, e, dan, "Accept", acceptProblem)
			if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(server.HeaderRateLimit) != `"api/per-user";r=0;t=60` ||
				resp.Header.Get(server.HeaderRetryAfter) != "60" {
				t.Fatalf("second export: %d %v, want 429 reporting api/per-user, with Retry-After 60", resp.StatusCode, resp.Header)
			}
			if p := decodeProblem(t, resp, body); p.Type != abnormalUsage || len(p.ViolatedPolicies) != 0 {
				t.Fatalf("second export: problem %s, want the hidden policy's type and no name", body)
			}
			noTrace("second export", resp.Header, body)
			resp, body = viewPost(t, e, dan, "Accept", acceptProblem)
			if p := decodeProblem(t, resp, body); !slices.Equal(p.ViolatedPolicies, []string{perUserPolicy}) {
				t.Fatalf("third export: problem %s, want only %s named", body, perUserPolicy)
			}
			noTrace("third export", resp.Header, body)
			out, err = e.rls.ShouldRateLimit(ctxT(t), rlsReq("api", 0, rlsDesc("user_id", "dan", "path", "/v1/export")))
			if err != nil {
				t.Fatal(err)
			}
			if out.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || out.Statuses[0].GetCurrentLimit().GetName() != perUserPolicy {
				t.Fatalf("RLS export: %v, want OVER_LIMIT reporting %s", out, perUserPolicy)
			}
		})
	}
}

// flatten lists a header as "Name: value" lines.
func flatten(h http.Header) []string {
	var out []string
	for k, vs := range h {
		for _, v := range vs {
			out = append(out, k+": "+v)
		}
	}
	return out
}

// hiddenPolicies writes a policy file for domain sec: a hidden policy of
// algorithm a allowing limit a day per user, a visible one of 10 a day
// on the free tier, and a forward-auth mapping of X-User.
// The periods are a day long, so that nothing refills or rolls over while
// a probe runs on a loaded machine (a minute's GCRA at 3 refilled within
// one slow run and decided one call differently).
func hiddenPolicies(t *testing.T, a v1alpha1.Algorithm, limit int) string {
	t.Helper()
	doc := fmt.Sprintf(`apiVersion: ratelimit.sluice.dev/v1alpha1
kind: LimiterFleet
metadata: {name: edge, namespace: sluice-system}
spec:
  forwardAuth:
    - domain: sec
      descriptors: [{key: user_id, from: Header, header: X-User}]
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: guard, namespace: sec}
spec:
  domain: sec
  descriptors: [{key: user_id}]
  algorithm: %s
  rate: {limit: %d, period: 24h}
  visibility: Hidden
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: free-tier, namespace: sec}
spec:
  domain: sec
  descriptors: [{key: user_id}, {key: tier, value: free}]
  algorithm: FixedWindow
  rate: {limit: 10, period: 24h}
`, a, limit)
	path := filepath.Join(t.TempDir(), "hidden.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// answer is what a client saw of one call: the kind of decision, and the
// whole answer as text.
type answer struct {
	step, kind, text string
}

// probeHidden sends e every call a client can make about the users of
// prefix: each sequence goes past both thresholds of
// TestAttackReadHiddenThreshold.
func probeHidden(t *testing.T, e *goldenEnv, prefix string) []answer {
	t.Helper()
	var out []answer
	httpAnswer := func(step string, resp *http.Response, body []byte) {
		kind := map[int]string{http.StatusOK: "allowed", http.StatusTooManyRequests: "denied", http.StatusForbidden: "denied",
			http.StatusBadRequest: "refused"}[resp.StatusCode]
		h := resp.Header.Clone()
		h.Del("Date")
		h.Del("Content-Length")
		text := resp.Status + "\n" + strings.Join(sorted(flatten(h)), "\n") + "\n" + string(body)
		if snap := e.svc.Snapshot(); snap != nil {
			// /readyz shows the version of the whole snapshot, a 64-bit
			// hash of every policy of the fleet: not a figure one can
			// read a threshold from.
			text = strings.ReplaceAll(text, snap.Version, "VERSION")
		}
		out = append(out, answer{step, kind, text})
	}
	rlsAnswer := func(step string, req *rlsv3.RateLimitRequest) {
		resp, err := e.rls.ShouldRateLimit(ctxT(t), req)
		if err != nil {
			t.Fatal(err)
		}
		js, err := protojson.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		kind := map[rlsv3.RateLimitResponse_Code]string{rlsv3.RateLimitResponse_OK: "allowed", rlsv3.RateLimitResponse_OVER_LIMIT: "denied"}[resp.OverallCode]
		out = append(out, answer{step, kind, compactJSON(t, js)})
	}
	for i := range 7 {
		n := fmt.Sprint(i + 1)
		resp, body := viewPost(t, e, `{"domain":"sec","descriptors":[{"entries":[{"key":"user_id","value":"`+prefix+`-json"}]}]}`)
		httpAnswer("check "+n, resp, body)
		resp, body = viewPost(t, e, `{"domain":"sec","descriptors":[{"entries":[{"key":"user_id","value":"`+prefix+`-problem"}]}]}`, "Accept", acceptProblem)
		httpAnswer("check, problem details "+n, resp, body)
		rlsAnswer("rls "+n, rlsReq("sec", 0, rlsDesc("user_id", prefix+"-rls", server.AcceptEntry, acceptProblem)))
		resp, body = viewGet(t, e, server.ForwardAuthPath+"sec", "X-User", prefix+"-fa", "Accept", acceptProblem)
		httpAnswer("forward-auth "+n, resp, body)
		resp, body = viewPost(t, e, `{"domain":"sec","descriptors":[{"entries":[{"key":"user_id","value":"`+prefix+`-free"},{"key":"tier","value":"free"}]}]}`)
		httpAnswer("check, free tier "+n, resp, body)
		rlsAnswer("rls, free tier "+n, rlsReq("sec", 0, rlsDesc("user_id", prefix+"-rls-free", "tier", "free")))
		resp, body = viewGet(t, e, server.StatusPath+"?domain=sec&user_id="+prefix+"-json")
		httpAnswer("status peek "+n, resp, body)
		resp, body = viewGet(t, e, server.StatusPath+"?domain=sec&tier=free&user_id="+prefix+"-free")
		httpAnswer("status peek, free tier "+n, resp, body)
	}
	for _, cost := range []string{"2", "4", "6"} {
		resp, body := viewPost(t, e, `{"domain":"sec","hitsAddend":`+cost+`,"descriptors":[{"entries":[{"key":"user_id","value":"`+prefix+`-cost`+cost+`"}]}]}`)
		httpAnswer("cost "+cost, resp, body)
	}
	for _, path := range []string{"/readyz", "/healthz"} {
		resp, body := viewGet(t, e, path)
		httpAnswer(path, resp, body)
	}
	return out
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}

// TestAttackReadHiddenThreshold: a client probes a hidden limit through
// every answer of the data plane (the check as JSON and as problem
// details, RLS, forward-auth, the status peek, /readyz and /healthz), on
// two limiters whose hidden policy differs only in its threshold: 3 or 5 a
// minute. Wherever both decide alike, their answers are the same byte for
// byte, and a client can't tell the thresholds apart from them; only the
// decisions differ (the 4th and 5th request, and a cost of 4, refused
// above one's maxCost). For every algorithm, on every store. Answers that
// differ fail the test with both.
func TestAttackReadHiddenThreshold(t *testing.T) {
	stores := storeKinds(t)
	for _, a := range v1alpha1.Algorithms {
		if a == v1alpha1.Concurrency {
			continue // counts requests in flight, not a rate: its policies have no spec.rate (not covered here yet)
		}
		for _, vs := range stores {
			t.Run(string(a)+"/"+vs.name, func(t *testing.T) {
				// The users differ: on Redis, every limiter of the test
				// shares one server, and the free tier's counters the
				// same keys.
				three := probeHidden(t, startView(t, vs, hiddenPolicies(t, a, 3)), string(a)+"-three")
				five := probeHidden(t, startView(t, vs, hiddenPolicies(t, a, 5)), string(a)+"-five")
				if len(three) != len(five) {
					t.Fatalf("%d answers and %d", len(three), len(five))
				}
				compared, differ := 0, 0
				var differing []string // step: three's kind / five's, for the log
				for i := range three {
					x, y := three[i], five[i]
					if x.kind == "" || y.kind == "" {
						t.Fatalf("%s: an unexpected answer:\n%s\n%s", x.step, x.text, y.text)
					}
					if x.kind != y.kind {
						differ++
						differing = append(differing, fmt.Sprintf("%s: %s / %s", x.step, x.kind, y.kind))
						continue
					}
					compared++
					if x.text != y.text {
						t.Errorf("%s: the answers of thresholds 3 and 5 differ:\n%s\n---\n%s", x.step, x.text, y.text)
					}
				}
				// Requests 4 and 5 of six sequences, and the cost of 4.
				if differ != 6*2+1 {
					t.Errorf("%d calls decided differently, want 13 (thresholds 3 / 5): %s", differ, strings.Join(differing, "; "))
				}
				t.Logf("%d answers alike, %d decided differently", compared, differ)
			})
		}
	}
}

// softPolicies writes a policy file for domain api: a soft policy of
// algorithm a at 2 a minute per user and the hard limit of the same
// requests at 4, with the same descriptors.
func softPolicies(t *testing.T, a v1alpha1.Algorithm) string {
	t.Helper()
	doc := fmt.Sprintf(`apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: warn, namespace: api}
spec:
  domain: api
  descriptors: [{key: user_id}]
  algorithm: %s
  rate: {limit: 2, period: 1m}
  soft: true
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: hard, namespace: api}
spec:
  domain: api
  descriptors: [{key: user_id}]
  algorithm: %[1]s
  rate: {limit: 4, period: 1m}
`, a)
	path := filepath.Join(t.TempDir(), "soft.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// softMark is what an answer says of soft limits: the response header,
// and over RLS the request header and the dynamic metadata.
type softMark struct {
	response, request string
	metadata          []string
}

func rlsSoftMark(out *rlsv3.RateLimitResponse) softMark {
	var m softMark
	m.response, _ = header(out, server.HeaderSoftLimit)
	for _, h := range out.RequestHeadersToAdd {
		if h.Key == server.HeaderSoftLimit {
			m.request = h.Value
		}
	}
	for _, v := range out.GetDynamicMetadata().GetFields()["softLimits"].GetListValue().GetValues() {
		m.metadata = append(m.metadata, v.GetStringValue())
	}
	return m
}

// TestSoftLimits: over a soft policy, requests are allowed and marked (a
// response header; over RLS also a request header for the upstream and
// the dynamic metadata) and counted; the hard limit of the same requests
// still denies, and is what the rate-limit headers report. For every
// algorithm, on every store, over HTTP and RLS.
func TestSoftLimits(t *testing.T) {
	stores := storeKinds(t)
	for _, a := range v1alpha1.Algorithms {
		if a == v1alpha1.Concurrency {
			continue // counts requests in flight, not a rate: its policies have no spec.rate (not covered here yet)
		}
		for _, vs := range stores {
			t.Run(string(a)+"/"+vs.name, func(t *testing.T) {
				snap, err := config.LoadFile(softPolicies(t, a))
				if err != nil {
					t.Fatal(err)
				}
				clock := storetest.NewClock()
				e := start(t, envOptions{store: vs.new(t, clock.Now), snapshot: snap})
				user := string(a) // on Redis, every subtest shares the server
				const mark = `"api/warn"`
				check := func(i int, user string, hits int) (code int, m softMark, rateLimit string) {
					t.Helper()
					if i%2 == 1 {
						resp, body := softPost(t, e, fmt.Sprintf(`{"domain":"api","hitsAddend":%d,"descriptors":[{"entries":[{"key":"user_id","value":%q}]}]}`, hits, user))
						var out rlsv3.RateLimitResponse
						if err := protojson.Unmarshal(body, &out); err != nil && resp.StatusCode != http.StatusBadRequest {
							t.Fatalf("request %d: %s: %v", i, body, err)
						}
						m = rlsSoftMark(&out)
						if got := resp.Header.Get(server.HeaderSoftLimit); got != m.response {
							t.Errorf("request %d: header %q, body's %q", i, got, m.response)
						}
						return resp.StatusCode, m, resp.Header.Get(server.HeaderRateLimit)
					}
					out, err := e.rls.ShouldRateLimit(ctxT(t), rlsReq("api", uint32(hits), rlsDesc("user_id", user)))
					if err != nil {
						t.Fatal(err)
					}
					code = http.StatusOK
					if out.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
						code = http.StatusTooManyRequests
					}
					rl, _ := header(out, server.HeaderRateLimit)
					return code, rlsSoftMark(out), rl
				}
				for i, want := range []struct {
					code   int
					marked bool
				}{
					{http.StatusOK, false}, {http.StatusOK, false},
					{http.StatusOK, true}, {http.StatusOK, true},
					{http.StatusTooManyRequests, true},
				} {
					code, m, rl := check(i+1, user, 1)
					wantMark := softMark{}
					if want.marked {
						wantMark = softMark{mark, "", []string{"api/warn"}}
						if code == http.StatusOK && i%2 == 1 {
							wantMark.request = mark // Envoy forwards it upstream
						}
						if i%2 == 0 {
							wantMark.request = mark // in the HTTP check's body too
						}
					}
					if code != want.code || m.response != wantMark.response || m.request != wantMark.request || !slices.Equal(m.metadata, wantMark.metadata) {
						t.Fatalf("request %d: %d %+v, want %d %+v", i+1, code, m, want.code, wantMark)
					}
					if !strings.HasPrefix(rl, `"api/hard";`) {
						t.Fatalf("request %d: RateLimit %q, want the hard limit's", i+1, rl)
					}
				}
				// A soft policy refuses no cost: 3 is above its capacity.
				if code, m, _ := check(2, user+"-cost", 3); code != http.StatusOK || m.response != mark {
					t.Fatalf("cost 3: %d %+v, want allowed and marked", code, m)
				}
				stats := map[string]service.PolicyStats{}
				for _, p := range e.svc.PolicyStats() {
					stats[p.Namespace+"/"+p.Name] = p
				}
				if w, h := stats["api/warn"], stats["api/hard"]; w.Allowed != 2 || w.SoftLimited != 4 || w.Limited != 0 ||
					h.Allowed != 5 || h.Limited != 1 || h.SoftLimited != 0 {
					t.Errorf("counts: warn %+v, hard %+v; want warn allowed 2, softLimited 4; hard allowed 5, limited 1", w, h)
				}
				if n := decisionsOf(t, e, "api/warn", service.ResultSoftLimited); n != 4 {
					t.Errorf(`sluice_decisions_total{policy="api/warn",result="soft_limited"} = %v, want 4`, n)
				}
				// The status peek says which policy is soft.
				_, body := softGet(t, e, server.StatusPath+"?domain=api&user_id="+user)
				if !strings.Contains(string(body), `"policy":"api/warn"`) || !strings.Contains(string(body), `"soft":true`) {
					t.Errorf("status peek %s: want api/warn marked soft", body)
				}
				// The kill switch makes a soft policy a shadow one: no mark.
				e.svc.SetEnforcement(false)
				if code, m, _ := check(1, user, 1); code != http.StatusOK || m.response != "" || len(m.metadata) != 0 {
					t.Errorf("kill switch: %d %+v, want allowed, unmarked", code, m)
				}
			})
		}
	}
}

func softPost(t *testing.T, e *env, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, e.http+server.CheckPath, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return do(t, req)
}

func softGet(t *testing.T, e *env, path string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, e.http+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, req)
}

// decisionsOf is sluice_decisions_total of policy and result.
func decisionsOf(t *testing.T, e *env, policy, result string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["policy"] == policy && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
