package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/localtier"
	"github.com/sluice-dev/sluice/limiter/store/memory"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

const samplePolicies = "../../config/samples/policies.yaml"

// The sample policy charges-per-user: 5 charges a minute per user_id on
// path /v1/charges in domain payments-api, token bucket with burst 5.
const (
	chargesDomain = "payments-api"
	chargesPolicy = "payments/charges-per-user"
	chargesLimit  = 5
)

func loadSample(t testing.TB) *config.Snapshot {
	t.Helper()
	snap, err := config.LoadFile(samplePolicies)
	if err != nil {
		t.Fatal(err)
	}
	p := findPolicy(snap, chargesPolicy)
	if p == nil || p.Domain != chargesDomain || p.Limit.Limit != chargesLimit || p.Limit.Burst != chargesLimit {
		t.Fatalf("%s: policy %s is not the one these tests expect (domain %s, limit and burst %d): %+v", samplePolicies, chargesPolicy, chargesDomain, chargesLimit, p)
	}
	return snap
}

func findPolicy(snap *config.Snapshot, id string) *config.Policy {
	for _, p := range snap.Policies {
		if p.ID() == id {
			return p
		}
	}
	return nil
}

// env is a running server on loopback.
type env struct {
	srv  *server.Server
	svc  *service.Service
	reg  *prometheus.Registry
	http string // base URL
	rls  rlsv3.RateLimitServiceClient
	conn *grpc.ClientConn
}

type envOptions struct {
	store     store.Store // nil: a memory store
	noSwap    bool        // start without a snapshot
	readiness map[string]server.ReadinessChecker
	snapshot  *config.Snapshot // nil: the sample policies
	trusted   []netip.Prefix   // Options.TrustedProxies
}

// newService is a service on st as limiter/app wires it: with a local tier
// and a memory store for failureMode Local, closed at the end of the test.
func newService(tb testing.TB, st store.Store, opts service.Options) *service.Service {
	tb.Helper()
	tier := localtier.New(st, localtier.Options{})
	fallback := memory.New(memory.Options{})
	tb.Cleanup(func() {
		_ = tier.Close()
		_ = fallback.Close()
	})
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(localtier.NewCollector(tier))
	}
	opts.LocalTier, opts.Fallback = tier, fallback
	return service.New(st, opts)
}

func start(t *testing.T, o envOptions) *env {
	t.Helper()
	st := o.store
	if st == nil {
		m := memory.New(memory.Options{})
		t.Cleanup(func() { _ = m.Close() })
		st = m
	}
	reg := prometheus.NewRegistry()
	svc := newService(t, st, service.Options{Registerer: reg})
	srv, err := server.New(svc, server.Options{
		GRPCAddr:  "127.0.0.1:0",
		HTTPAddr:  "127.0.0.1:0",
		Metrics:   reg,
		Readiness: o.readiness,
		Logger:    slog.New(slog.DiscardHandler),

		TrustedProxies: o.trusted,
	})
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case o.snapshot != nil:
		srv.Swap(o.snapshot)
	case !o.noSwap:
		srv.Swap(loadSample(t))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	})
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &env{
		srv:  srv,
		svc:  svc,
		reg:  reg,
		http: "http://" + srv.HTTPAddr(),
		rls:  rlsv3.NewRateLimitServiceClient(conn),
		conn: conn,
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func chargeRequest(user string, hits uint32) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{
		Domain: chargesDomain,
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{
			{Key: "user_id", Value: user},
			{Key: "path", Value: "/v1/charges"},
		}}},
		HitsAddend: hits,
	}
}

func chargeBody(user string) string {
	return `{"domain":"payments-api","descriptors":[{"entries":[{"key":"user_id","value":"` + user + `"},{"key":"path","value":"/v1/charges"}]}]}`
}

func header(resp *rlsv3.RateLimitResponse, name string) (string, bool) {
	for _, h := range resp.ResponseHeadersToAdd {
		if strings.EqualFold(h.Key, name) {
			return h.Value, true
		}
	}
	return "", false
}

func TestGRPCShouldRateLimit(t *testing.T) {
	e := start(t, envOptions{})
	ctx := ctxT(t)
	for i := 1; i <= chargesLimit; i++ {
		resp, err := e.rls.ShouldRateLimit(ctx, chargeRequest("alice", 0))
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d: %v, want OK", i, resp.OverallCode)
		}
		st := resp.Statuses[0]
		if st.CurrentLimit.GetRequestsPerUnit() != chargesLimit || st.CurrentLimit.GetName() != chargesPolicy ||
			st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
			t.Errorf("request %d: current limit %v, want %d per MINUTE named %s", i, st.CurrentLimit, chargesLimit, chargesPolicy)
		}
		if want := uint32(chargesLimit - i); st.LimitRemaining != want {
			t.Errorf("request %d: remaining %d, want %d", i, st.LimitRemaining, want)
		}
		if got, _ := header(resp, "X-RateLimit-Remaining"); got != strconv.Itoa(chargesLimit-i) {
			t.Errorf("request %d: X-RateLimit-Remaining %q, want %d", i, got, chargesLimit-i)
		}
		if _, ok := header(resp, "Retry-After"); ok {
			t.Errorf("request %d: Retry-After on an allowed request", i)
		}
	}
	resp, err := e.rls.ShouldRateLimit(ctx, chargeRequest("alice", 0))
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("request %d: %v, want OVER_LIMIT", chargesLimit+1, resp)
	}
	for name, want := range map[string]string{
		"RateLimit-Policy":      `"payments/charges-per-user";q=5;w=60`,
		"RateLimit":             `"payments/charges-per-user";r=0;t=`,
		"X-RateLimit-Limit":     "5",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     "",
		"Retry-After":           "",
	} {
		got, ok := header(resp, name)
		if !ok || !strings.HasPrefix(got, want) {
			t.Errorf("over limit: header %s = %q (present %v), want it to start with %q", name, got, ok, want)
		}
	}
	if ra, _ := header(resp, "Retry-After"); mustAtoi(t, ra) < 1 {
		t.Errorf("Retry-After %q, want at least 1 second", ra)
	}

	// Another user has their own counter.
	resp, err = e.rls.ShouldRateLimit(ctx, chargeRequest("bob", chargesLimit))
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("bob spending %d at once: %v, %v; want OK", chargesLimit, resp, err)
	}

	// Bad requests are InvalidArgument with a message.
	_, err = e.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Descriptors: chargeRequest("x", 0).Descriptors})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "domain") {
		t.Fatalf("empty domain: %v, want InvalidArgument naming the domain", err)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q is not an integer", s)
	}
	return n
}

// post sends body to the check endpoint and returns the response and its
// body.
func post(t *testing.T, url, contentType, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, url+server.CheckPath, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, req)
}

func TestHTTPCheck(t *testing.T) {
	e := start(t, envOptions{})
	for i := 1; i <= chargesLimit; i++ {
		resp, body := post(t, e.http, "application/json", chargeBody("carol"))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s, want 200", i, resp.StatusCode, body)
		}
		if got := resp.Header.Get("X-RateLimit-Remaining"); got != strconv.Itoa(chargesLimit-i) {
			t.Errorf("request %d: X-RateLimit-Remaining %q, want %d", i, got, chargesLimit-i)
		}
		if resp.Header.Get("Retry-After") != "" {
			t.Errorf("request %d: Retry-After on an allowed request", i)
		}
	}
	// curl -d sends application/x-www-form-urlencoded: tolerated.
	resp, body := post(t, e.http, "application/x-www-form-urlencoded", chargeBody("carol"))
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("request %d: %d %s, want 429", chargesLimit+1, resp.StatusCode, body)
	}
	if ra := resp.Header.Get("Retry-After"); mustAtoi(t, ra) < 1 {
		t.Errorf("Retry-After %q, want at least 1 second", ra)
	}
	for name, want := range map[string]string{
		"RateLimit":             `"payments/charges-per-user";r=0;t=`,
		"RateLimit-Policy":      `"payments/charges-per-user";q=5;w=60`,
		"X-RateLimit-Limit":     "5",
		"X-RateLimit-Remaining": "0",
		"Content-Type":          "application/json",
	} {
		if got := resp.Header.Get(name); !strings.HasPrefix(got, want) {
			t.Errorf("header %s = %q, want it to start with %q", name, got, want)
		}
	}
	var rr rlsv3.RateLimitResponse
	if err := protojson.Unmarshal(body, &rr); err != nil {
		t.Fatalf("body is not a protojson RateLimitResponse: %v\n%s", err, body)
	}
	if rr.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || len(rr.Statuses) != 1 ||
		rr.Statuses[0].CurrentLimit.GetName() != chargesPolicy || rr.Statuses[0].DurationUntilReset == nil {
		t.Errorf("body %s: want OVER_LIMIT with one status for %s and a reset duration", body, chargesPolicy)
	}
	if v, _ := header(&rr, "Retry-After"); v != resp.Header.Get("Retry-After") {
		t.Errorf("body's Retry-After %q differs from the header's %q", v, resp.Header.Get("Retry-After"))
	}

	// hitsAddend spends several units at once; no Content-Type is fine.
	body2 := `{"domain":"payments-api","hitsAddend":5,"descriptors":[{"entries":[{"key":"user_id","value":"dave"},{"key":"path","value":"/v1/charges"}]}]}`
	if resp, b := post(t, e.http, "", body2); resp.StatusCode != http.StatusOK || resp.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("hitsAddend 5: %d remaining %q %s, want 200 with 0 remaining", resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"), b)
	}
	if resp, b := post(t, e.http, "application/json; charset=utf-8", chargeBody("dave")); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("after hitsAddend 5: %d %s, want 429", resp.StatusCode, b)
	}

	// A request that matches no policy is allowed, without limit headers.
	resp, body = post(t, e.http, "application/json", `{"domain":"payments-api","descriptors":[{"entries":[{"key":"nothing","value":"x"}]}]}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-RateLimit-Limit") != "" {
		t.Fatalf("unmatched: %d %v %s, want 200 without limit headers", resp.StatusCode, resp.Header, body)
	}
}

func TestHTTPBadRequests(t *testing.T) {
	e := start(t, envOptions{})
	entries := func(n int) string {
		var parts []string
		for i := range n {
			parts = append(parts, fmt.Sprintf(`{"key":"k%d","value":"v"}`, i))
		}
		return `[` + strings.Join(parts, ",") + `]`
	}
	descriptors := func(n int) string {
		var parts []string
		for range n {
			parts = append(parts, `{"entries":[{"key":"user_id","value":"x"}]}`)
		}
		return `[` + strings.Join(parts, ",") + `]`
	}
	long := strings.Repeat("a", service.MaxEntryLength+1)
	for _, tc := range []struct {
		name, body string
		want       []string // substrings of the error
	}{
		{"empty body", ``, []string{"empty"}},
		{"malformed JSON", `{"domain":`, []string{"invalid request body", "unexpected EOF"}},
		{"not an object", `[1,2]`, []string{"invalid request body", "unexpected token ["}},
		{"trailing garbage", `{"domain":"payments-api"}{`, []string{"invalid request body", "unexpected token {"}},
		{"unknown field", `{"domain":"payments-api","descriptors":` + descriptors(1) + `,"hitsAdend":2}`, []string{`unknown field "hitsAdend"`}},
		{"unknown entry field", `{"domain":"payments-api","descriptors":[{"entries":[{"key":"a","valeu":"b"}]}]}`, []string{`unknown field "valeu"`}},
		{"domain not a string", `{"domain":5,"descriptors":` + descriptors(1) + `}`, []string{"string field domain", "5"}},
		{"key not a string", `{"domain":"d","descriptors":[{"entries":[{"key":1,"value":"b"}]}]}`, []string{"string field key"}},
		{"descriptors not a list", `{"domain":"d","descriptors":{}}`, []string{"invalid request body", "line 1:29"}},
		{"hitsAddend not a number", `{"domain":"d","descriptors":` + descriptors(1) + `,"hitsAddend":"many"}`, []string{"hitsAddend", "many"}},
		{"negative hitsAddend", `{"domain":"d","descriptors":` + descriptors(1) + `,"hitsAddend":-1}`, []string{"hitsAddend", "-1"}},
		{"negative descriptor hitsAddend", `{"domain":"d","descriptors":[{"entries":[{"key":"a","value":"b"}],"hitsAddend":-3}]}`, []string{"-3"}},
		{"hitsAddend beyond uint32", `{"domain":"d","descriptors":` + descriptors(1) + `,"hitsAddend":4294967296}`, []string{"hitsAddend", "4294967296"}},
		{"empty domain", `{"domain":"","descriptors":` + descriptors(1) + `}`, []string{"domain is empty"}},
		{"missing domain", `{"descriptors":` + descriptors(1) + `}`, []string{"domain is empty"}},
		{"no descriptors", `{"domain":"d","descriptors":[]}`, []string{"descriptors are empty"}},
		{"long domain", `{"domain":"` + long + `","descriptors":` + descriptors(1) + `}`, []string{"domain is 1025 bytes long"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := post(t, e.http, "application/json", tc.body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("%d %s, want 400", resp.StatusCode, body)
			}
			msg := errorMessage(t, resp, body)
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
		})
	}

	// What the client sent wrong in a request that selects a policy is no
	// error but a denial, which a gateway can't fail open on.
	charge := `{"key":"user_id","value":"x"},{"key":"path","value":"/v1/charges"}`
	charges := func(n int) string {
		return `[` + strings.TrimSuffix(strings.Repeat(`{"entries":[`+charge+`]},`, n), ",") + `]`
	}
	for _, tc := range []struct{ name, body, want string }{
		{"absurd hitsAddend", `{"domain":"payments-api","descriptors":` + charges(1) + `,"hitsAddend":4294967295}`, "hits_addend 4294967295 exceeds the maximum 1000000"},
		{"absurd descriptor hitsAddend", `{"domain":"payments-api","descriptors":[{"entries":[` + charge + `],"hitsAddend":"18446744073709551615"}]}`, "descriptors[0].hits_addend 18446744073709551615 exceeds the maximum 1000000"},
		{"17 descriptors", `{"domain":"payments-api","descriptors":` + charges(service.MaxDescriptors+1) + `}`, "17 descriptors, the maximum is 16"},
		{"17 entries", `{"domain":"payments-api","descriptors":[{"entries":` + entries(service.MaxEntries+1) + `}]}`, "descriptors[0] has 17 entries, the maximum is 16"},
		{"empty key", `{"domain":"payments-api","descriptors":[{"entries":[` + charge + `,{"key":"","value":"b"}]}]}`, "descriptors[0].entries[2] has an empty key"},
		{"long key", `{"domain":"payments-api","descriptors":[{"entries":[` + charge + `,{"key":"` + long + `","value":"b"}]}]}`, "descriptors[0].entries[2].key is 1025 bytes long, the maximum is 1024"},
		{"long value", `{"domain":"payments-api","descriptors":[{"entries":[{"key":"user_id","value":"` + long + `"},{"key":"path","value":"/v1/charges"}]}]}`, "descriptors[0].entries[0].value is 1025 bytes long, the maximum is 1024"},
	} {
		t.Run("refused "+tc.name, func(t *testing.T) {
			resp, body := post(t, e.http, "application/json", tc.body)
			if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(server.HeaderReason) != tc.want {
				t.Fatalf("%d %s %q %s, want 429 with the reason %q", resp.StatusCode, server.HeaderReason, resp.Header.Get(server.HeaderReason), body, tc.want)
			}
		})
	}

	// No counter was spent by any of them.
	if got := decisions(t, e.reg, "") - decisions(t, e.reg, service.ResultRefused); got != 0 {
		t.Errorf("%v decisions after bad requests, want 0", got)
	}
}

func errorMessage(t *testing.T, resp *http.Response, body []byte) string {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error Content-Type %q, want application/json", ct)
	}
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
		t.Fatalf("error body %q is not {\"error\": \"...\"}: %v", body, err)
	}
	return e.Error
}

func TestHTTPLimits(t *testing.T) {
	e := start(t, envOptions{})

	// Too large: 413, whether or not the length is announced.
	big := `{"domain":"d","descriptors":[{"entries":[{"key":"a","value":"` + strings.Repeat("x", server.DefaultMaxBodyBytes) + `"}]}]}`
	resp, body := post(t, e.http, "application/json", big)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(errorMessage(t, resp, body), "larger than the maximum of 1048576 bytes") {
		t.Fatalf("oversized body: %d %s, want 413 naming the maximum", resp.StatusCode, body)
	}
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, e.http+server.CheckPath, io.MultiReader(strings.NewReader(big))) // unknown length: chunked
	if err != nil {
		t.Fatal(err)
	}
	resp, body = do(t, req)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized chunked body: %d %s, want 413", resp.StatusCode, body)
	}

	// Wrong methods: 405 with Allow.
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		req, err := http.NewRequestWithContext(ctxT(t), m, e.http+server.CheckPath, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, body := do(t, req)
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
			t.Errorf("%s %s: %d Allow %q, want 405 Allow POST", m, server.CheckPath, resp.StatusCode, resp.Header.Get("Allow"))
		}
		if msg := errorMessage(t, resp, body); !strings.Contains(msg, m) {
			t.Errorf("%s: error %q does not name the method", m, msg)
		}
	}
	req, err = http.NewRequestWithContext(ctxT(t), http.MethodPost, e.http+"/readyz", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := do(t, req); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /readyz: %d, want 405", resp.StatusCode)
	}
	if resp, _ := get(t, e.http+"/nope"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nope: %d, want 404", resp.StatusCode)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	var storeDown atomic.Bool
	storeDown.Store(true)
	e := start(t, envOptions{noSwap: true, readiness: map[string]server.ReadinessChecker{
		"store": func(context.Context) (string, error) {
			if storeDown.Load() {
				return "", errors.New("connection refused")
			}
			return "ping ok", nil
		},
	}})
	ctx := ctxT(t)
	hc := healthpb.NewHealthClient(e.conn)

	// Alive, but nothing loaded and the store down: not ready.
	if resp, body := get(t, e.http+"/healthz"); resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %d %s", resp.StatusCode, body)
	}
	rd := readyz(t, e, http.StatusServiceUnavailable)
	if rd.Ready || rd.Checks["snapshot"].OK || rd.Checks["store"].OK || rd.Checks["store"].Detail != "connection refused" {
		t.Errorf("/readyz before a snapshot: %+v", rd)
	}
	for _, svc := range []string{"", server.RLSServiceName} {
		hr, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || hr.Status != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("health %q before a snapshot: %v %v, want NOT_SERVING", svc, hr, err)
		}
	}

	// A snapshot: gRPC serves; /readyz still waits for the store.
	snap := loadSample(t)
	e.srv.Swap(snap)
	for _, svc := range []string{"", server.RLSServiceName} {
		hr, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q after Swap: %v %v, want SERVING", svc, hr, err)
		}
	}
	rd = readyz(t, e, http.StatusServiceUnavailable)
	if !rd.Checks["snapshot"].OK || rd.SnapshotVersion != snap.Version || rd.Checks["store"].OK {
		t.Errorf("/readyz with a snapshot and the store down: %+v", rd)
	}

	storeDown.Store(false)
	rd = readyz(t, e, http.StatusOK)
	if !rd.Ready || rd.SnapshotVersion != snap.Version || rd.Checks["store"].Detail != "ping ok" ||
		!strings.Contains(rd.Checks["snapshot"].Detail, fmt.Sprintf("%d policies", len(snap.Policies))) {
		t.Errorf("/readyz when ready: %+v", rd)
	}
}

func readyz(t *testing.T, e *env, want int) server.Readiness {
	t.Helper()
	resp, body := get(t, e.http+"/readyz")
	if resp.StatusCode != want {
		t.Fatalf("/readyz: %d %s, want %d", resp.StatusCode, body, want)
	}
	var rd server.Readiness
	if err := json.Unmarshal(body, &rd); err != nil {
		t.Fatalf("/readyz body %q: %v", body, err)
	}
	return rd
}

func TestMetrics(t *testing.T) {
	e := start(t, envOptions{})
	ctx := ctxT(t)
	for range 2 {
		if _, err := e.rls.ShouldRateLimit(ctx, chargeRequest("erin", 0)); err != nil {
			t.Fatal(err)
		}
		post(t, e.http, "application/json", chargeBody("erin"))
	}
	get(t, e.http+"/v1/ratelimit/status?domain=payments-api&user_id=erin")
	get(t, e.http+"/v1/forward-auth/payments-api") // no mapping: 404, still timed
	// Health checks are not timed as requests.
	if _, err := healthpb.NewHealthClient(e.conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	resp, body := get(t, "http://"+e.srv.AdminAddr()+"/metrics")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	text := string(body)
	for _, want := range []string{
		`sluice_decisions_total{domain="payments-api",policy="payments/charges-per-user",result="allowed"} 4`,
		`sluice_request_duration_seconds_count{protocol="grpc"} 2`,
		`sluice_request_duration_seconds_count{protocol="http"} 2`,
		`sluice_request_duration_seconds_count{protocol="status"} 1`,
		`sluice_request_duration_seconds_count{protocol="forward_auth"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// decisions sums sluice_decisions_total for result ("" for all).
func decisions(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "sluice_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && (result == "" || l.GetValue() == result) {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// TestRedisStore runs two servers on one real redis-server: they share the
// counter, and /readyz follows the store's health.
func TestRedisStore(t *testing.T) {
	rs := redistest.Start(t)
	newStore := func() *redisstore.Store {
		opts, err := redisstore.ParseURL("redis://" + rs.Addr)
		if err != nil {
			t.Fatal(err)
		}
		opts.Timeout = time.Second // -race on a busy machine
		st, err := redisstore.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	st1, st2 := newStore(), newStore()
	e1 := start(t, envOptions{store: st1, readiness: map[string]server.ReadinessChecker{"store": server.PingCheck(st1)}})
	e2 := start(t, envOptions{store: st2})
	ctx := ctxT(t)

	if rd := readyz(t, e1, http.StatusOK); !rd.Checks["store"].OK {
		t.Errorf("/readyz with Redis up: %+v", rd)
	}
	for i := 1; i <= chargesLimit; i++ {
		e := []*env{e1, e2}[i%2]
		resp, err := e.rls.ShouldRateLimit(ctx, chargeRequest("frank", 0))
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != uint32(chargesLimit-i) {
			t.Fatalf("request %d: %v, want OK with %d remaining", i, resp, chargesLimit-i)
		}
	}
	resp, body := post(t, e1.http, "application/json", chargeBody("frank"))
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("request %d over HTTP: %d %s, want 429 with Retry-After", chargesLimit+1, resp.StatusCode, body)
	}
	if got := decisions(t, e1.reg, "failed_open") + decisions(t, e2.reg, "failed_open"); got != 0 {
		t.Fatalf("%v decisions failed open: Redis should have answered all", got)
	}

	rs.Stop()
	rd := readyz(t, e1, http.StatusServiceUnavailable)
	if rd.Checks["store"].OK || !strings.Contains(rd.Checks["store"].Detail, "ping failed") {
		t.Errorf("/readyz with Redis down: %+v", rd)
	}
}

// TestShutdown checks that Run returns after its context ends and that the
// listeners are closed then.
func TestShutdown(t *testing.T) {
	m := memory.New(memory.Options{})
	defer m.Close()
	svc := service.New(m, service.Options{})
	srv, err := server.New(svc, server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	srv.Swap(loadSample(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()

	// Serving once a request gets through (the listener exists already, so
	// the first request may wait in the backlog, never fail).
	resp, body := post(t, "http://"+srv.HTTPAddr(), "application/json", chargeBody("gina"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	_, err = http.Post("http://"+srv.HTTPAddr()+server.CheckPath, "application/json", bytes.NewBufferString(chargeBody("gina")))
	if err == nil {
		t.Fatal("HTTP listener still answers after shutdown")
	}

	// A second server can't take a port in use.
	other, err := server.New(svc, server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.New(svc, server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: other.HTTPAddr()}); err == nil || !strings.Contains(err.Error(), "HTTP listener") {
		t.Fatalf("New on a taken port: %v, want an HTTP listener error", err)
	}
	octx, ocancel := context.WithCancel(context.Background())
	ocancel()
	if err := other.Run(octx); err != nil {
		t.Fatalf("Run with a cancelled context: %v", err)
	}
}

// TestDrainAnswersNewConnections checks that, with a DrainDelay, a server whose
// context ended says it is not ready but still answers calls on new
// connections, HTTP and gRPC, until the delay is over; then it closes.
func TestDrainAnswersNewConnections(t *testing.T) {
	m := memory.New(memory.Options{})
	defer m.Close()
	svc := service.New(m, service.Options{})
	srv, err := server.New(svc, server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		DrainDelay: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv.Swap(loadSample(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	// Every call on a connection of its own, as a client that kube-proxy
	// sends to this pod after it began to terminate.
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	getStatus := func(path string) (int, error) {
		resp, err := fresh.Get("http://" + srv.HTTPAddr() + path)
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := getStatus("/readyz"); err != nil || code != http.StatusOK {
		t.Fatalf("/readyz before shutdown: %d %v", code, err)
	}

	cancel()
	for {
		code, err := getStatus("/readyz")
		if err != nil {
			t.Fatalf("/readyz while draining: %v", err)
		}
		if code == http.StatusServiceUnavailable {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := fresh.Post("http://"+srv.HTTPAddr()+server.CheckPath, "application/json", strings.NewReader(chargeBody("hana")))
	if err != nil {
		t.Fatalf("a check on a new connection while draining: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a check while draining: %d, want 200", resp.StatusCode)
	}
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	rlsResp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(rctx, chargeRequest("hana", 0))
	if err != nil || rlsResp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("an RLS call on a new connection while draining: %v %v, want OK", rlsResp, err)
	}
	h, err := healthpb.NewHealthClient(conn).Check(rctx, &healthpb.HealthCheckRequest{Service: server.RLSServiceName})
	if err != nil || h.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("gRPC health while draining: %v %v, want NOT_SERVING", h, err)
	}

	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the delay")
	}
	if _, err := getStatus("/readyz"); err == nil {
		t.Fatal("HTTP listener still answers after the delay")
	}
}

// TestShutdownHealth checks that a health watcher hears NOT_SERVING as soon
// as shutdown starts, while calls in flight may still finish.
func TestShutdownHealth(t *testing.T) {
	m := memory.New(memory.Options{})
	defer m.Close()
	svc := service.New(m, service.Options{})
	srv, err := server.New(svc, server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv.Swap(loadSample(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()

	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	wctx, wcancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer wcancel()
	stream, err := healthpb.NewHealthClient(conn).Watch(wctx, &healthpb.HealthCheckRequest{Service: server.RLSServiceName})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first health update: %v %v, want SERVING", r, err)
	}
	cancel()
	if r, err := stream.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health update on shutdown: %v %v, want NOT_SERVING", r, err)
	}
	wcancel() // the watcher goes away, as a client does on NOT_SERVING
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return")
	}
}
