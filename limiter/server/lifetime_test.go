package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

// llmPolicies: 2 requests of an API key in flight (leases of a minute),
// and 1000 tokens a minute, reserved at the check and settled at the end.
const llmPolicies = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: inflight, namespace: llm}
spec:
  domain: llm
  descriptors: [{key: api_key}]
  algorithm: Concurrency
  concurrency: {maxInFlight: 2, leaseDuration: 1m}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: tokens, namespace: llm}
spec:
  domain: llm
  descriptors: [{key: api_key}, {key: model}]
  algorithm: FixedWindow
  rate: {limit: 1000, period: 1h}
  reserve: {expireAfter: 5m}
`

// startLLM runs a server with llmPolicies on a memory store whose clock
// the test moves.
func startLLM(t *testing.T) (*env, *storetest.Clock) {
	t.Helper()
	clock := storetest.NewClock()
	m := memory.New(memory.Options{Clock: clock.Now})
	t.Cleanup(func() { _ = m.Close() })
	snap, err := config.Parse("llm", []byte(llmPolicies))
	if err != nil {
		t.Fatal(err)
	}
	return start(t, envOptions{store: m, snapshot: snap}), clock
}

func postTo(t *testing.T, url, path, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return do(t, req)
}

const llmCheck = `{"domain":"llm","descriptors":[{"entries":[{"key":"api_key","value":"%s"},{"key":"model","value":"m1"}],"hitsAddend":%d}]}`

func llmEnd(key, lease, cost string) string {
	b := `{"domain":"llm","descriptors":[{"entries":[{"key":"api_key","value":"` + key + `"},{"key":"model","value":"m1"}]}],"lease":"` + lease + `"`
	if cost != "" {
		b += `,"cost":` + cost
	}
	return b + "}"
}

func endResponse(t *testing.T, body []byte) server.EndResponse {
	t.Helper()
	var out server.EndResponse
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return out
}

func outcomes(r server.EndResponse) string {
	var parts []string
	for _, e := range r.Endings {
		parts = append(parts, e.Policy+"="+e.Outcome)
	}
	return strings.Join(parts, " ")
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// HTTP: a check that holds answers its lease and the draft's
// concurrent-requests quota; release frees the slot, and says so when the
// lease holds nothing (twice, expired, another key's).
func TestHTTPLeaseAndRelease(t *testing.T) {
	e, clock := startLLM(t)
	var leases []string
	for i := range 3 {
		resp, body := postTo(t, e.http, server.CheckPath, sprintf(llmCheck, "alice", 1))
		lease := resp.Header.Get(server.HeaderLease)
		if i == 2 {
			if resp.StatusCode != http.StatusTooManyRequests || lease != "" {
				t.Fatalf("third check: %d, lease %q; want 429 and no lease", resp.StatusCode, lease)
			}
			if got := resp.Header.Get(server.HeaderRateLimitPolicy); got != `"llm/inflight";q=2;qu="concurrent-requests"` {
				t.Fatalf("RateLimit-Policy %q", got)
			}
			if got := resp.Header.Get(server.HeaderRateLimit); got != `"llm/inflight";r=0` {
				t.Fatalf("RateLimit %q", got)
			}
			if got := resp.Header.Get(server.HeaderRetryAfter); got != "1" && got != "2" {
				t.Fatalf("Retry-After %q, want 1s (and jitter)", got)
			}
			continue
		}
		if resp.StatusCode != http.StatusOK || len(lease) != 22 {
			t.Fatalf("check %d: %d, lease %q: %s", i, resp.StatusCode, lease, body)
		}
		var js struct {
			DynamicMetadata map[string]string `json:"dynamicMetadata"`
		}
		if err := json.Unmarshal(body, &js); err != nil || js.DynamicMetadata[server.LeaseMetadataKey] != lease {
			t.Fatalf("check %d body %s: want the lease in dynamicMetadata", i, body)
		}
		leases = append(leases, lease)
	}

	resp, body := postTo(t, e.http, server.ReleasePath, llmEnd("alice", leases[0], ""))
	if got := endResponse(t, body); resp.StatusCode != http.StatusOK || outcomes(got) != "llm/inflight=released llm/tokens=settled" {
		t.Fatalf("release: %d %s", resp.StatusCode, body)
	}
	resp, body = postTo(t, e.http, server.ReleasePath, llmEnd("alice", leases[0], ""))
	got := endResponse(t, body)
	if resp.StatusCode != http.StatusNotFound || outcomes(got) != "llm/inflight=not-held llm/tokens=not-held" ||
		!strings.Contains(got.Error, "released or settled already, expired, or never taken with these descriptors; nothing changed") {
		t.Fatalf("second release: %d %s", resp.StatusCode, body)
	}
	// Another key's lease: bob's descriptors with alice's lease.
	resp, body = postTo(t, e.http, server.ReleasePath, llmEnd("bob", leases[1], ""))
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a lease on another key: %d %s", resp.StatusCode, body)
	}
	// An expired lease: a minute later, the slot freed itself (the
	// reservation lives 5 minutes, and is still settled).
	clock.Set(clock.Now().Add(time.Minute))
	resp, body = postTo(t, e.http, server.ReleasePath, llmEnd("alice", leases[1], ""))
	if got := endResponse(t, body); resp.StatusCode != http.StatusOK || got.Endings[0].Outcome != "not-held" || got.Endings[0].Remaining != 2 ||
		got.Endings[1].Outcome != "settled" {
		t.Fatalf("release of an expired lease: %d %s", resp.StatusCode, body)
	}
}

// HTTP settle: the actual cost refunds or charges the difference; bad
// input is refused with what is wrong, and changes no counter.
func TestHTTPSettle(t *testing.T) {
	e, clock := startLLM(t)
	resp, _ := postTo(t, e.http, server.CheckPath, sprintf(llmCheck, "carol", 600))
	lease := resp.Header.Get(server.HeaderLease)
	if resp.StatusCode != http.StatusOK || lease == "" {
		t.Fatalf("reserve: %d", resp.StatusCode)
	}
	for _, tc := range []struct {
		name, path, body string
		code             int
		want             string
	}{
		{"negative cost", server.SettlePath, llmEnd("carol", lease, "-5"), 400, "cost -5 is negative"},
		{"cost -1", server.SettlePath, llmEnd("carol", lease, "-1"), 400, "cost -1 is negative"},
		{"no cost", server.SettlePath, llmEnd("carol", lease, ""), 400, "cost is required"},
		{"cost on release", server.ReleasePath, llmEnd("carol", lease, "5"), 400, "cost is not taken by release"},
		{"malformed lease", server.SettlePath, llmEnd("carol", "abc", "5"), 400, `lease: lease ID \"abc\" is malformed`},
		{"unknown field", server.SettlePath, `{"domain":"llm","lease":"x","costs":5}`, 400, `unknown field \"costs\"`},
		{"empty body", server.SettlePath, ``, 400, "request body is empty"},
		{"unknown lease", server.SettlePath, llmEnd("carol", "AAAAAAAAAAAAAAAAAAAAAA", "5"), 404, "nothing changed"},
		{"foreign lease", server.SettlePath, llmEnd("dave", lease, "0"), 404, "nothing changed"},
		{"GET", server.SettlePath, "", 405, "method GET not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var resp *http.Response
			var body []byte
			if tc.name == "GET" {
				resp, body = get(t, e.http+tc.path)
			} else {
				resp, body = postTo(t, e.http, tc.path, tc.body)
			}
			if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.want) {
				t.Fatalf("%d %s, want %d with %q", resp.StatusCode, body, tc.code, tc.want)
			}
			if got := peekTokens(t, e, "carol"); got != 400 {
				t.Fatalf("tokens left %d after a refused settle, want 400", got)
			}
		})
	}
	// The request used 250: 350 back.
	resp, body := postTo(t, e.http, server.SettlePath, llmEnd("carol", lease, "250"))
	got := endResponse(t, body)
	if resp.StatusCode != http.StatusOK || outcomes(got) != "llm/inflight=released llm/tokens=settled" ||
		got.Endings[1].Held != 600 || *got.Endings[1].Cost != 250 || got.Endings[1].Remaining != 750 {
		t.Fatalf("settle: %d %s", resp.StatusCode, body)
	}
	// A reservation left to expire is settled at its estimate.
	resp, _ = postTo(t, e.http, server.CheckPath, sprintf(llmCheck, "carol", 100))
	lease = resp.Header.Get(server.HeaderLease)
	clock.Set(clock.Now().Add(5 * time.Minute))
	resp, body = postTo(t, e.http, server.SettlePath, llmEnd("carol", lease, "0"))
	if resp.StatusCode != http.StatusNotFound || peekTokens(t, e, "carol") != 650 {
		t.Fatalf("settle after expiry: %d %s, tokens %d; want 404 and 650 left (the estimate spent)", resp.StatusCode, body, peekTokens(t, e, "carol"))
	}
}

func peekTokens(t *testing.T, e *env, key string) int64 {
	t.Helper()
	st, err := e.svc.Peek(ctxT(t), "llm", []config.Entry{{Key: "api_key", Value: key}, {Key: "model", Value: "m1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st {
		if p.Policy == "llm/tokens" {
			return p.Remaining
		}
	}
	t.Fatal("no llm/tokens")
	return 0
}

// RLS over real gRPC: the check answers the lease in its dynamic metadata,
// never in a header; the stream-done call, with the lease in the policy's
// lease entry and the actual cost as hits_addend, settles it and spends
// nothing else.
func TestRLSLeaseAndStreamDone(t *testing.T) {
	e, _ := startLLM(t)
	check := &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries:    []*rlv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: "erin"}, {Key: "model", Value: "m1"}},
		HitsAddend: wrapperspb.UInt64(300),
	}}}
	resp, err := e.rls.ShouldRateLimit(ctxT(t), check)
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("check: %v %v", resp, err)
	}
	lease := resp.GetDynamicMetadata().GetFields()[server.LeaseMetadataKey].GetStringValue()
	if len(lease) != 22 {
		t.Fatalf("dynamic metadata %v: want the lease", resp.GetDynamicMetadata())
	}
	for _, h := range resp.GetResponseHeadersToAdd() {
		if strings.Contains(h.GetValue(), lease) {
			t.Fatalf("header %s carries the lease: the client could end its own request", h.GetKey())
		}
	}
	done := &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: "erin"}, {Key: "model", Value: "m1"},
			{Key: "sluice_lease", Value: lease}},
		HitsAddend: wrapperspb.UInt64(120),
	}}}
	resp, err = e.rls.ShouldRateLimit(ctxT(t), done)
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetResponseHeadersToAdd()) != 0 {
		t.Fatalf("stream done: %v %v", resp, err)
	}
	if got := peekTokens(t, e, "erin"); got != 880 {
		t.Fatalf("tokens left %d, want 880: 120 spent", got)
	}
	// Both slots free again.
	st, _ := e.svc.Peek(ctxT(t), "llm", []config.Entry{{Key: "api_key", Value: "erin"}})
	if len(st) != 1 || st[0].Remaining != 2 {
		t.Fatalf("in flight after the end: %+v", st)
	}
	// A malformed lease entry is refused (OVER_LIMIT), naming it.
	done.Descriptors[0].Entries[2].Value = "nope"
	if resp, err := e.rls.ShouldRateLimit(ctxT(t), done); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT ||
		!strings.Contains(resp.GetDynamicMetadata().AsMap()["reason"].(string), `descriptors[0].entries[2] (sluice_lease): lease ID "nope" is malformed`) {
		t.Fatalf("malformed lease: %v %v", resp, err)
	}
}
