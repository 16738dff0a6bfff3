package service_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/memory"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

func load(t testing.TB) *config.Snapshot {
	t.Helper()
	snap, err := config.LoadFile("testdata/policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// newService is a service on st (nil: a memory store) with a memory store
// for failureMode Local, as limiter/app wires it, and testdata's policies.
func newService(t testing.TB, st store.Store) (*service.Service, *prometheus.Registry) {
	t.Helper()
	if st == nil {
		st = memoryStore(t)
	}
	reg := prometheus.NewRegistry()
	svc := service.New(st, service.Options{Registerer: reg, Fallback: memoryStore(t)})
	svc.Swap(load(t))
	return svc, reg
}

func memoryStore(t testing.TB) *memory.Store {
	m := memory.New(memory.Options{})
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// desc builds a descriptor from key=value pairs.
func desc(kv ...string) service.Descriptor {
	var d service.Descriptor
	for i := 0; i < len(kv); i += 2 {
		d.Entries = append(d.Entries, config.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func call(t *testing.T, svc *service.Service, domain string, hits uint64, ds ...service.Descriptor) service.Response {
	t.Helper()
	resp, err := svc.Decide(context.Background(), &service.Request{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// answer says what Decide answered: "error: ...", "refused: REASON" (a
// denial for what the client sent), or "decided".
func answer(resp service.Response, err error) string {
	switch {
	case err != nil:
		return "error: " + err.Error()
	case resp.Reported.Refused:
		if !resp.OverLimit || !resp.Reported.OverLimit {
			return "refused but not denied: " + resp.Reported.Reason
		}
		return "refused: " + resp.Reported.Reason
	}
	return "decided"
}

// policyOf names the policy of a decision, "" for none.
func policyOf(d service.Decision) string {
	if d.Policy == nil {
		return ""
	}
	return d.Policy.ID()
}

func decisions(t *testing.T, reg *prometheus.Registry, policy, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_decisions_total" {
			continue
		}
		for _, m := range mf.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["policy"] == policy && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestUnknownDomainAndUnmatchedAreOK(t *testing.T) {
	svc, _ := newService(t, nil)
	for _, tc := range []struct {
		domain string
		d      service.Descriptor
	}{
		{"nope", desc("user", "a")},
		{"shop", desc("nobody", "a")},
		{"shop", desc("path", "/checkout")}, // lacks user
	} {
		resp := call(t, svc, tc.domain, 0, tc.d)
		if resp.OverLimit || len(resp.Decisions) != 1 || resp.Decisions[0].Policy != nil || resp.Reported.Policy != nil {
			t.Errorf("%s %v: %+v", tc.domain, tc.d, resp)
		}
	}
}

func TestLimitThenOverLimit(t *testing.T) {
	svc, reg := newService(t, nil)
	for i := range 5 {
		resp := call(t, svc, "shop", 0, desc("user", "ann"))
		if resp.OverLimit {
			t.Fatalf("request %d: over limit", i)
		}
		d := resp.Decisions[0]
		if policyOf(d) != "shop/per-user" || d.Policy.Limit.Limit != 5 || d.Policy.Limit.Period != time.Hour ||
			d.Result.Remaining != int64(4-i) || d.OverLimit || d.Reason != "" {
			t.Fatalf("request %d: decision %+v", i, d)
		}
		if resp.Reported != d {
			t.Fatalf("request %d: reported %+v, want the only decision", i, resp.Reported)
		}
	}
	resp := call(t, svc, "shop", 0, desc("user", "ann"))
	d := resp.Decisions[0]
	if !resp.OverLimit || !d.OverLimit || d.Result.Allowed || d.Result.Remaining != 0 || resp.Reported != d {
		t.Fatalf("6th request: %+v", resp)
	}
	if r := d.Result.ResetAfter; r <= 0 || r > time.Hour {
		t.Fatalf("reset after %v", r)
	}
	if r := d.Result.RetryAfter; r <= 0 || r > time.Hour {
		t.Errorf("retry after %v", r)
	}
	// Another user has their own counter.
	if call(t, svc, "shop", 0, desc("user", "bob")).OverLimit {
		t.Fatal("bob was limited by ann's counter")
	}
	if a, l := decisions(t, reg, "shop/per-user", "allowed"), decisions(t, reg, "shop/per-user", "limited"); a != 6 || l != 1 {
		t.Fatalf("metrics allowed=%v limited=%v, want 6 and 1", a, l)
	}
}

// Every matching policy is evaluated; the most restrictive is reported.
func TestOverlappingPoliciesReportTheMostRestrictive(t *testing.T) {
	svc, _ := newService(t, nil)
	d := desc("user", "cy", "path", "/checkout")
	r1 := call(t, svc, "shop", 0, d)
	if policyOf(r1.Decisions[0]) != "shop/per-user-checkout" || r1.Decisions[0].Result.Remaining != 1 {
		t.Fatalf("first: %+v", r1.Decisions[0])
	}
	call(t, svc, "shop", 0, d)
	r3 := call(t, svc, "shop", 0, d)
	if !r3.OverLimit || policyOf(r3.Decisions[0]) != "shop/per-user-checkout" {
		t.Fatalf("third: %+v", r3)
	}
	// The per-user policy counted all three (the denial by the other
	// policy does not refund it), so this fourth request leaves 1.
	r := call(t, svc, "shop", 0, desc("user", "cy"))
	if r.Decisions[0].Result.Remaining != 1 {
		t.Fatalf("per-user remaining after 3+1 requests: %+v", r.Decisions[0])
	}
}

// A shadow policy is evaluated and counted, and invisible to clients: it
// never denies and never shows in statuses or headers.
func TestShadowNeverDeniesNorShows(t *testing.T) {
	svc, reg := newService(t, nil)
	for i := range 3 {
		resp := call(t, svc, "shop", 0, desc("ip", "10.0.0.1"))
		if resp.OverLimit {
			t.Fatalf("request %d denied by a shadow policy", i)
		}
		if resp.Decisions[0].Policy != nil || resp.Reported.Policy != nil {
			t.Fatalf("request %d shows the shadow policy: %+v", i, resp)
		}
	}
	if got := decisions(t, reg, "shop/per-ip-shadow", "shadow_limited"); got != 2 {
		t.Fatalf("shadow_limited = %v, want 2", got)
	}
	// Mixed with an enforcing policy, the enforcing one is what clients see.
	resp := call(t, svc, "shop", 0, desc("ip", "10.0.0.1"), desc("user", "fay"))
	if got := resp.Reported.Result.Remaining; resp.OverLimit || got != 4 {
		t.Fatalf("mixed request: over limit %v, remaining %d", resp.OverLimit, got)
	}
	if policyOf(resp.Reported) != "shop/per-user" || resp.Decisions[0].Policy != nil {
		t.Fatalf("reported %q, first decision %+v", policyOf(resp.Reported), resp.Decisions[0])
	}
}

// Of several descriptors, an over-limit one is reported; among allowed
// ones, the one with the fewest units left.
func TestReportedDecision(t *testing.T) {
	svc, _ := newService(t, nil)
	call(t, svc, "shop", 0, desc("user", "gus", "path", "/checkout"))
	resp := call(t, svc, "shop", 0, desc("user", "hal"), desc("user", "gus", "path", "/checkout"))
	if resp.OverLimit || resp.Reported != resp.Decisions[1] || resp.Reported.Result.Remaining != 0 {
		t.Fatalf("allowed: %+v, want the second decision (0 left) reported", resp)
	}
	resp = call(t, svc, "shop", 0, desc("user", "gus", "path", "/checkout"), desc("user", "hal"))
	if !resp.OverLimit || resp.Reported != resp.Decisions[0] || !resp.Decisions[0].OverLimit || resp.Decisions[1].OverLimit {
		t.Fatalf("one over limit: %+v, want the first decision reported", resp)
	}
}

// DecideInto reuses a response: nothing of the last answer stays, and an
// error leaves it empty.
func TestDecideIntoReusesTheResponse(t *testing.T) {
	svc, _ := newService(t, nil)
	ctx := context.Background()
	var resp service.Response
	two := &service.Request{Domain: "shop", Descriptors: []service.Descriptor{desc("user", "ivy", "path", "/checkout"), desc("user", "ivy")}, HitsAddend: 2}
	if err := svc.DecideInto(ctx, two, &resp); err != nil || len(resp.Decisions) != 2 || resp.OverLimit {
		t.Fatalf("two descriptors: %+v %v", resp, err)
	}
	if err := svc.DecideInto(ctx, two, &resp); err != nil || len(resp.Decisions) != 2 || !resp.OverLimit {
		t.Fatalf("two descriptors again: %+v %v, want over limit", resp, err)
	}
	one := &service.Request{Domain: "shop", Descriptors: []service.Descriptor{desc("user", "jo")}}
	if err := svc.DecideInto(ctx, one, &resp); err != nil || len(resp.Decisions) != 1 || resp.OverLimit || resp.Reported != resp.Decisions[0] {
		t.Fatalf("one descriptor after two: %+v %v", resp, err)
	}
	if want, _ := svc.Decide(ctx, &service.Request{Domain: "shop", Descriptors: []service.Descriptor{desc("user", "kai")}}); want.Decisions[0].Result.Remaining != resp.Decisions[0].Result.Remaining || policyOf(want.Decisions[0]) != policyOf(resp.Decisions[0]) {
		t.Fatalf("Decide %+v, DecideInto %+v: want the same for a fresh user", want.Decisions[0], resp.Decisions[0])
	}
	if err := svc.DecideInto(ctx, &service.Request{Domain: "shop"}, &resp); !errors.Is(err, service.ErrInvalidArgument) ||
		len(resp.Decisions) != 0 || resp.Reported.Policy != nil || resp.OverLimit {
		t.Fatalf("invalid request: %+v %v, want an empty response", resp, err)
	}
}

func TestHitsAddend(t *testing.T) {
	svc, _ := newService(t, nil)
	if r := call(t, svc, "shop", 4, desc("user", "dee")); r.Decisions[0].Result.Remaining != 1 {
		t.Fatalf("after hits 4: %+v", r.Decisions[0])
	}
	if r := call(t, svc, "shop", 2, desc("user", "dee")); !r.OverLimit {
		t.Fatalf("hits 2 with 1 left: %+v", r)
	}
	// A descriptor's own hits_addend wins; 0 peeks.
	peek := desc("user", "dee")
	peek.HitsAddend, peek.HasHitsAddend = 0, true
	if r := call(t, svc, "shop", 5, peek); r.OverLimit || r.Decisions[0].Result.Remaining != 1 {
		t.Fatalf("peek: %+v", r)
	}
	if r := call(t, svc, "shop", 0, desc("user", "dee")); r.OverLimit {
		t.Fatalf("last unit after a peek: %+v", r)
	}
}

func TestSwapIsAtomicAndTakesEffect(t *testing.T) {
	svc, _ := newService(t, nil)
	snap, err := config.Parse("inline", []byte(`
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-user, namespace: shop}
spec:
  domain: shop
  descriptors: [{key: user}]
  algorithm: FixedWindow
  rate: {limit: 1, period: 1h}
`))
	if err != nil {
		t.Fatal(err)
	}
	call(t, svc, "shop", 0, desc("user", "eve"))
	svc.Swap(snap)
	if svc.Snapshot().Version != snap.Version {
		t.Fatal("Snapshot() is not the swapped snapshot")
	}
	// Same policy identity, algorithm and period: the counter carries over.
	if r := call(t, svc, "shop", 0, desc("user", "eve")); !r.OverLimit {
		t.Fatalf("after lowering the limit to 1: %+v", r.Decisions[0])
	}
}

// Only a request that selects no policy is an error; whatever else the
// client sent wrong is a refusal: denied with a reason when it matches an
// enforcing policy, answered as unmatched when nothing would count it.
func TestInvalidRequests(t *testing.T) {
	svc, _ := newService(t, nil)
	for _, tc := range []struct {
		name string
		req  service.Request
		want string
	}{
		{"empty domain", service.Request{Descriptors: []service.Descriptor{desc("user", "a")}}, "domain is empty"},
		{"no descriptors", service.Request{Domain: "shop"}, "descriptors are empty"},
	} {
		_, err := svc.Decide(context.Background(), &tc.req)
		var iae *service.InvalidArgumentError
		if !errors.Is(err, service.ErrInvalidArgument) || !errors.As(err, &iae) || !strings.Contains(iae.Message, tc.want) {
			t.Errorf("%s: got %v, want an InvalidArgumentError %q", tc.name, err, tc.want)
		}
		if verr := svc.Validate(&tc.req); verr == nil || verr.Error() != err.Error() {
			t.Errorf("%s: Validate says %v, Decide %v", tc.name, verr, err)
		}
	}
}

func TestRefusedRequestsAreDenied(t *testing.T) {
	svc, reg := newService(t, nil)
	long := strings.Repeat("x", 1025)
	many := func(n int) []service.Descriptor {
		out := make([]service.Descriptor, n)
		for i := range out {
			out[i] = desc("user", "a")
		}
		return out
	}
	one := func(d service.Descriptor) []service.Descriptor { return []service.Descriptor{d} }
	var wide service.Descriptor
	for range 17 {
		wide.Entries = append(wide.Entries, config.Entry{Key: "k", Value: "v"})
	}
	bigHits := desc("user", "a")
	bigHits.HitsAddend, bigHits.HasHitsAddend = 1<<40, true
	negative := desc("user", "a")
	negative.NegativeHits = true
	for _, tc := range []struct {
		name string
		req  service.Request
		want string
	}{
		{"17 descriptors", service.Request{Domain: "shop", Descriptors: many(17)}, "17 descriptors, the maximum is 16"},
		{"17 entries", service.Request{Domain: "shop", Descriptors: one(wide)}, "has 17 entries, the maximum is 16"},
		{"empty key", service.Request{Domain: "shop", Descriptors: one(desc("user", "a", "", "v"))}, "empty key"},
		{"long key", service.Request{Domain: "shop", Descriptors: one(desc("user", "a", long, "v"))}, "key is 1025 bytes long, the maximum is 1024"},
		{"long value", service.Request{Domain: "shop", Descriptors: one(desc("user", long))}, "value is 1025 bytes long"},
		{"long value in the second descriptor", service.Request{Domain: "shop", Descriptors: []service.Descriptor{desc("user", "a"), desc("user", long)}}, "descriptors[1].entries[0].value is 1025 bytes long"},
		{"absurd hits", service.Request{Domain: "shop", Descriptors: many(1), HitsAddend: 2_000_000_000}, "hits_addend 2000000000 exceeds the maximum 1000000"},
		{"absurd descriptor hits", service.Request{Domain: "shop", Descriptors: one(bigHits)}, "descriptors[0].hits_addend 1099511627776 exceeds"},
		{"negative hits", service.Request{Domain: "shop", Descriptors: one(negative)}, "is_negative_hits is not supported"},
		{"long idempotency key", service.Request{Domain: "shop", Descriptors: one(desc("user", "a")), IdempotencyKey: strings.Repeat("k", 257)}, "Idempotency-Key: idempotency key is 257 bytes long"},
	} {
		resp, err := svc.Decide(context.Background(), &tc.req)
		if err != nil {
			t.Errorf("%s: error %v, want a denial (a gateway fails open on errors)", tc.name, err)
			continue
		}
		if !resp.OverLimit || !resp.Reported.Refused || !resp.Reported.OverLimit || !strings.Contains(resp.Reported.Reason, tc.want) {
			t.Errorf("%s: %+v, want refused with a reason containing %q", tc.name, resp.Reported, tc.want)
		}
		if verr := svc.Validate(&tc.req); tc.req.IdempotencyKey == "" && (verr == nil || verr.Error() != resp.Reported.Reason) {
			t.Errorf("%s: Validate says %v, Decide refused for %q", tc.name, verr, resp.Reported.Reason)
		}
	}
	// Nothing was spent: user a still has its whole quota.
	peek := desc("user", "a")
	peek.HasHitsAddend = true
	if r := call(t, svc, "shop", 0, peek); r.OverLimit || r.Decisions[0].Policy == nil || r.Decisions[0].Result.Remaining != r.Decisions[0].Policy.Limit.Capacity() {
		t.Fatalf("user a after the refusals: %+v, want its whole quota", r.Decisions[0])
	}
	if n := decisions(t, reg, "shop/per-user", service.ResultRefused); n == 0 {
		t.Fatal("no refused decision counted for shop/per-user")
	}
}

// A refused descriptor that no enforcing policy matches would have been
// counted by nothing: it is answered as unmatched, and the rest decided.
func TestRefusedUnmatchedDescriptor(t *testing.T) {
	svc, _ := newService(t, nil)
	long := strings.Repeat("x", 1025)
	r := call(t, svc, "shop", 0, desc("nobody", long), desc("user", "zed"))
	if r.OverLimit || r.Reported.Refused || len(r.Decisions) != 2 || r.Decisions[0].Policy != nil || r.Decisions[1].Policy == nil {
		t.Fatalf("%+v, want the first unmatched and the second decided", r)
	}
	if r := call(t, svc, "nope", 0, desc("user", long)); r.OverLimit {
		t.Fatalf("unknown domain: %+v, want allowed", r)
	}
}

// Failure modes against a real Redis that stops answering.
func TestFailureModesWhenRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	st, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc, reg := newService(t, st)
	// With Redis up the store answers. The first dial and script load race
	// the 100ms deadline on a loaded machine, so allow a few tries.
	warmup := 0 // decisions that missed the deadline with Redis up
	for ; ; warmup++ {
		r := call(t, svc, "modes", 0, desc("closed", "x"))
		if !r.OverLimit && r.Reported.Reason == "" {
			break
		}
		if warmup == 20 {
			t.Fatalf("with Redis up: %+v", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	srv.Stop()

	for i := range 3 {
		if r := call(t, svc, "modes", 0, desc("open", "x")); r.OverLimit || r.Reported.Reason != service.ReasonFailedOpen {
			t.Fatalf("Open, request %d: %+v", i, r)
		}
	}
	r := call(t, svc, "modes", 0, desc("closed", "x"))
	if !r.OverLimit || r.Reported.Reason != service.ReasonFailedClosed || r.Reported.Result.RetryAfter != time.Second {
		t.Fatalf("Closed: %+v", r)
	}
	// Local enforces the limit (2) in this pod's memory.
	for i, want := range []bool{false, false, true} {
		if r := call(t, svc, "modes", 0, desc("local", "x")); r.OverLimit != want || r.Reported.Reason != service.ReasonLocal {
			t.Fatalf("Local, request %d: %+v, want over limit %v", i, r, want)
		}
	}
	for policy, want := range map[string]float64{"modes/open": 3, "modes/closed": float64(1 + warmup), "modes/local": 3} {
		result := map[string]string{"modes/open": "failed_open", "modes/closed": "failed_closed", "modes/local": "local_fallback"}[policy]
		if got := decisions(t, reg, policy, result); got != want {
			t.Errorf("%s %s = %v, want %v", policy, result, got, want)
		}
	}
	if got := counterValue(t, reg, "sluice_store_errors_total"); got != float64(7+warmup) {
		t.Errorf("store errors = %v, want %d", got, 7+warmup)
	}
	// Redis refused the connections, then the breaker opened: those seven
	// are causes error and unavailable (the warm-up's missed deadlines
	// are timeouts).
	byCause := counterValues(t, reg, "sluice_store_errors_total", "cause")
	if got := byCause[service.CauseError] + byCause[service.CauseUnavailable]; got < 7 || byCause[service.CauseQueued] != 0 {
		t.Errorf("store errors by cause %v, want at least 7 error or unavailable and none queued", byCause)
	}
}

// counterValues is the counter name by the value of its label.
func counterValues(t *testing.T, reg *prometheus.Registry, name, label string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			sum := 0.0 // over every label's series
			for _, m := range mf.Metric {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}
