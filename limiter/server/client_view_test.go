package server_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/memory"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// The tests of what clients are told of a decision (problem details,
// hidden limits, soft limits) run on testdata/client-view.yaml, over RLS
// and HTTP, on each store: memory, a real redis-server and a real 3-primary
// Redis Cluster, all on a stopped clock, with Retry-After jitter off.

const viewPolicies = "testdata/client-view.yaml"

// viewStore makes one kind of store on a clock.
type viewStore struct {
	name string
	new  func(t *testing.T, clock store.Clock) store.Store
}

// viewStores starts a redis-server and a Redis Cluster for the test, and
// returns the three kinds of store.
func viewStores(t *testing.T) []viewStore {
	t.Helper()
	rs := redistest.Start(t)
	cl := redistest.StartCluster(t, 3)
	redisOn := func(opts redisstore.Options) func(t *testing.T, clock store.Clock) store.Store {
		return func(t *testing.T, clock store.Clock) store.Store {
			opts.PinnedClock, opts.Timeout = clock, 2*time.Second
			st, err := redisstore.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st
		}
	}
	return []viewStore{
		{"memory", func(t *testing.T, clock store.Clock) store.Store {
			m := memory.New(memory.Options{Clock: clock, SweepInterval: -1})
			t.Cleanup(func() { _ = m.Close() })
			return m
		}},
		{"redis", redisOn(redisstore.Options{Addrs: []string{rs.Addr}})},
		{"redis-cluster", redisOn(redisstore.Options{Addrs: cl.Addrs(), Cluster: true})},
	}
}

// startView serves file on a fresh store of kind vs, on a stopped clock.
func startView(t *testing.T, vs viewStore, file string) *goldenEnv {
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
	for _, vs := range viewStores(t) {
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
