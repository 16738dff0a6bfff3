package main_test

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluice-dev/sluice/internal/redistest"
)

// budgetPolicies are tenant "flood"'s n policies in domain flood, policy i
// matching any request that carries the entry k<i> (so one request can
// match many), with failureMode mode; and tenant "steady"'s one policy,
// 10 requests an hour per user in domain steady.
func budgetPolicies(n int, mode string) string { return budgetPoliciesOf(n, mode, 1000000) }

// budgetPoliciesOf is budgetPolicies with flood's policies limit an hour.
func budgetPoliciesOf(n int, mode string, limit int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: p%02d, namespace: flood}
spec:
  domain: flood
  descriptors: [{key: k%02d}]
  rate: {limit: %d, period: 1h}
  failureMode: %s
---
`, i, i, limit, mode)
	}
	b.WriteString(`apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-user, namespace: steady}
spec:
  domain: steady
  descriptors: [{key: user}]
  algorithm: FixedWindow
  rate: {limit: 10, period: 1h}
`)
	return b.String()
}

// floodRequest carries the entries k00..k<n-1>, 16 to a descriptor: it
// matches n policies of tenant flood.
func floodRequest(n int, user string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "flood"}
	for i := 0; i < n; i += 16 {
		d := &rlv3.RateLimitDescriptor{}
		for j := i; j < min(n, i+16); j++ {
			d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: fmt.Sprintf("k%02d", j), Value: user})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

func budgetLimiter(t *testing.T, policies string, extra ...string) (*process, rlsv3.RateLimitServiceClient, *redis.Client) {
	t.Helper()
	rs := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(path, []byte(policies), 0o644); err != nil {
		t.Fatal(err)
	}
	// A generous deadline: -race and a busy machine must not fail open.
	args := append([]string{"--policies", path, "--store", "redis://" + rs.Addr, "--redis-timeout", "2s"}, extra...)
	p := startLimiter(t, args...)
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return p, rlsv3.NewRateLimitServiceClient(conn), rdb
}

func metadataReason(resp *rlsv3.RateLimitResponse) string {
	if md := resp.GetDynamicMetadata(); md != nil {
		return md.GetFields()["reason"].GetStringValue()
	}
	return ""
}

// A request that matches 40 of one tenant's policies makes the limiter run
// 40 store calls on the base commit: the work of one request grows with
// what the tenant writes. Now, past the namespace's maxPoliciesPerRequest
// (32 by default), the request is denied with a reason, over RLS and HTTP
// alike, before any store call; one within the budget is decided.
func TestAttackRequestMatchesTooManyPolicies(t *testing.T) {
	// 100 an hour: a counter charged once lives 36 s, until its bucket is
	// full again, long enough to be counted however slow the machine (at a
	// million an hour it lived 4 ms, and some were gone when counted).
	p, rls, rdb := budgetLimiter(t, budgetPoliciesOf(40, "Open", 100))
	ctx := context.Background()

	resp, err := rls.ShouldRateLimit(ctx, floodRequest(40, "mallory"))
	if err != nil {
		t.Fatalf("RLS: %v: a refused request must be a denial, never an error (gateways fail open)", err)
	}
	keys, err := rdb.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || keys != 0 {
		t.Fatalf("a request matching 40 policies of one namespace: %s, and Redis holds %d counters; want OVER_LIMIT before any store call",
			resp.OverallCode, keys)
	}
	if r := metadataReason(resp); !strings.Contains(r, "namespace flood") || !strings.Contains(r, "maxPoliciesPerRequest") {
		t.Errorf("RLS reason %q: want the namespace and the budget named", r)
	}

	var entries []string
	for i := range 16 {
		entries = append(entries, fmt.Sprintf(`{"key":"k%02d","value":"mallory"}`, i))
	}
	body := `{"domain":"flood","descriptors":[{"entries":[` + strings.Join(entries, ",") + `]},{"entries":[` +
		strings.ReplaceAll(strings.Join(entries, ","), `"k0`, `"k1`) + `]},{"entries":[` +
		strings.ReplaceAll(strings.Join(entries[:8], ","), `"k0`, `"k3`) + `]}]}`
	code, hdr, text := p.post(t, "/v1/ratelimit/check", body)
	if code != http.StatusTooManyRequests || !strings.Contains(hdr.Get("X-Sluice-Reason"), "maxPoliciesPerRequest") {
		t.Errorf("HTTP check matching 40 policies: %d %q %s; want 429 naming the budget", code, hdr.Get("X-Sluice-Reason"), text)
	}

	// Within the budget: decided by all 32 policies.
	resp, err = rls.ShouldRateLimit(ctx, floodRequest(32, "mallory"))
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a request matching 32 policies: %v %v, want OK", resp.GetOverallCode(), err)
	}
	if keys, _ := rdb.DBSize(ctx).Result(); keys != 32 {
		t.Errorf("Redis holds %d counters after a request matching 32 policies, want 32", keys)
	}
	if v := budgetExceeded(t, p, "flood", "maxPoliciesPerRequest"); v != 2 {
		t.Errorf("sluice_budget_exceeded_total{namespace=flood,budget=maxPoliciesPerRequest} = %v, want 2", v)
	}
}

// budgetPhase is tenant steady's traffic of one phase: each of users sends
// 12 requests (10 allowed, 2 denied, whatever else happens).
type budgetPhase struct {
	allowed, denied, errors int
	reasons                 []string
	latencies               []time.Duration
}

func (b *budgetPhase) p99() time.Duration {
	ds := slices.Clone(b.latencies)
	slices.Sort(ds)
	if len(ds) == 0 {
		return 0
	}
	return ds[len(ds)*99/100]
}

func steadyTraffic(rls rlsv3.RateLimitServiceClient, prefix string, users int) *budgetPhase {
	out := &budgetPhase{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for u := range users {
		wg.Go(func() {
			user := fmt.Sprintf("%s-%02d", prefix, u)
			for range 12 {
				req := &rlsv3.RateLimitRequest{Domain: "steady", Descriptors: []*rlv3.RateLimitDescriptor{{
					Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}}}}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				start := time.Now()
				resp, err := rls.ShouldRateLimit(ctx, req)
				lat := time.Since(start)
				cancel()
				mu.Lock()
				switch {
				case err != nil:
					out.errors++
				case resp.OverallCode == rlsv3.RateLimitResponse_OK:
					out.allowed++
				default:
					out.denied++
				}
				if r := metadataReason(resp); r != "" {
					out.reasons = append(out.reasons, r)
				}
				out.latencies = append(out.latencies, lat)
				mu.Unlock()
				time.Sleep(100 * time.Millisecond) // steady: under 400 a second, within its budget
			}
		})
	}
	wg.Wait()
	return out
}

// A tenant floods the limiter: requests matching 32 of its policies each
// (its per-request budget), from 8 workers without pause. On the base
// commit nothing bounds the store work one namespace makes the limiter do.
// Now each namespace has storeCallsPerSecond per limiter (here 1,000): past
// it, the flooding namespace's decisions are answered by its policies'
// failureMode (Closed here: denied, with the reason) without calling Redis,
// counted in sluice_budget_exceeded_total{namespace="flood"}, while a
// second tenant's decisions are unchanged. The second tenant's p99, with
// and without the flood, is logged (figures, not assertions).
func TestAttackTenantStoreFlood(t *testing.T) {
	const budget = 1000
	p, rls, rdb := budgetLimiter(t, budgetPolicies(32, "Closed"), "--tenant-store-calls-per-second", fmt.Sprint(budget))
	ctx := context.Background()
	const users = 40

	quiet := steadyTraffic(rls, "quiet", users)

	before, err := evalCalls(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	stop := make(chan struct{})
	var sent, budgetDenied, floodErrs atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				c, cancel := context.WithTimeout(ctx, 10*time.Second)
				resp, err := rls.ShouldRateLimit(c, floodRequest(32, fmt.Sprintf("w%d-%d", w, i%50)))
				cancel()
				sent.Add(1)
				switch {
				case err != nil:
					floodErrs.Add(1)
				case strings.Contains(metadataReason(resp), "namespace store budget exceeded (failureMode Closed)"):
					budgetDenied.Add(1)
				}
			}
		})
	}
	// The flood runs until the limiter has refused it store calls.
	eventually(t, "the flooding namespace over its store budget", func() (bool, string) {
		n := budgetExceeded(t, p, "flood", "storeCallsPerSecond")
		return n > 0, fmt.Sprintf("sluice_budget_exceeded_total %v", n)
	})
	loud := steadyTraffic(rls, "loud", users)
	// /readyz names the cause (the admin snapshot carries it to the
	// policy's Degraded condition).
	_, rd := p.readyz(t)
	degraded := rd.Checks["degraded"].Detail
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	after, err := evalCalls(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}

	t.Logf("with budgets: tenant steady p99: %v without the flood, %v with it (%d decisions each); flood: %d requests of 32 policies in %v, %d denied by the store budget, %d errors, %d Redis decisions",
		quiet.p99(), loud.p99(), len(quiet.latencies), sent.Load(), elapsed.Round(time.Millisecond), budgetDenied.Load(), floodErrs.Load(), after-before)
	if quiet.allowed != users*10 || quiet.denied != users*2 || quiet.errors != 0 {
		t.Fatalf("tenant steady alone: %d allowed, %d denied, %d errors; want %d, %d, 0", quiet.allowed, quiet.denied, quiet.errors, users*10, users*2)
	}
	if loud.allowed != quiet.allowed || loud.denied != quiet.denied || loud.errors != 0 {
		t.Errorf("tenant steady during the flood: %d allowed, %d denied, %d errors; alone %d, %d, 0", loud.allowed, loud.denied, loud.errors, quiet.allowed, quiet.denied)
	}
	if slices.ContainsFunc(loud.reasons, func(r string) bool { return strings.Contains(r, "budget") }) {
		t.Errorf("tenant steady's denials during the flood give reasons %q", loud.reasons)
	}
	if !strings.Contains(degraded, "flood/p00 runs degraded (namespace store budget exceeded, failureMode Closed") || strings.Contains(degraded, "steady/") {
		t.Errorf("/readyz degraded detail during the flood: %s", degraded)
	}
	if budgetDenied.Load() == 0 || floodErrs.Load() != 0 {
		t.Errorf("flood: %d denials by the store budget, %d errors; want some denials, no error", budgetDenied.Load(), floodErrs.Load())
	}
	if v := budgetExceeded(t, p, "steady", "storeCallsPerSecond"); v != 0 {
		t.Errorf("tenant steady counted over its budget %v times", v)
	}
	// Redis did at most the budget's work for the flood: a second's burst
	// plus budget per second (steady's calls are its own).
	floodCalls := after - before - int64(len(loud.latencies))
	if most := int64(budget) * (int64(elapsed/time.Second) + 2); floodCalls > most {
		t.Errorf("Redis ran %d decisions for the flood in %v, above the budget's %d", floodCalls, elapsed, most)
	}

	// For comparison, as on the base commit: the same flood against a
	// limiter without budgets (figures only).
	_, rls0, rdb0 := budgetLimiter(t, budgetPolicies(32, "Closed"), "--tenant-max-policies-per-request", "0", "--tenant-store-calls-per-second", "0")
	quiet0 := steadyTraffic(rls0, "quiet", users)
	before0, _ := evalCalls(ctx, rdb0)
	stop0 := make(chan struct{})
	var sent0 atomic.Int64
	var wg0 sync.WaitGroup
	start0 := time.Now()
	for w := range 8 {
		wg0.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop0:
					return
				default:
				}
				c, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, _ = rls0.ShouldRateLimit(c, floodRequest(32, fmt.Sprintf("w%d-%d", w, i%50)))
				cancel()
				sent0.Add(1)
			}
		})
	}
	loud0 := steadyTraffic(rls0, "loud", users)
	close(stop0)
	wg0.Wait()
	after0, _ := evalCalls(ctx, rdb0)
	t.Logf("without budgets: tenant steady p99: %v without the flood, %v with it; flood: %d requests in %v, %d Redis decisions (%d allowed, %d denied for steady during it)",
		quiet0.p99(), loud0.p99(), sent0.Load(), time.Since(start0).Round(time.Millisecond), after0-before0, loud0.allowed, loud0.denied)
}

// evalCalls counts the decisions Redis has run: each exact decision of a
// TokenBucket or FixedWindow policy (all of budgetPolicies') reads its
// counter with one GET, and nothing else the limiter sends is a GET. Not
// the scripts: on a standalone server one script run decides a round
// trip's decisions together.
func evalCalls(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_get:"} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				var calls int64
				if _, err := fmt.Sscanf(rest, "calls=%d", &calls); err != nil {
					return 0, fmt.Errorf("%s: %w", line, err)
				}
				n += calls
			}
		}
	}
	return n, nil
}

// budgetExceeded is sluice_budget_exceeded_total{namespace,budget}.
func budgetExceeded(t *testing.T, p *process, ns, budget string) float64 {
	t.Helper()
	for _, m := range p.metrics(t)["sluice_budget_exceeded_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["namespace"] == ns && labels["budget"] == budget {
			return sampleValue(m)
		}
	}
	return 0
}

// sharedPolicy is one policy of tenant "shared": 3 requests an hour per
// user in domain shared, with failureMode mode ("" for the default, Open).
func sharedPolicy(mode string) string {
	p := `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-user, namespace: shared}
spec:
  domain: shared
  descriptors: [{key: user}]
  rate: {limit: 3, period: 1h}
`
	if mode != "" {
		p += "  failureMode: " + mode + "\n"
	}
	return p
}

func userRequest(user string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "shared", Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}}}}
}

// A client over her limit of 3 an hour floods, from 4 workers, checks of
// other keys of the same domain: past the namespace's store budget (50
// calls a second here), on the base commit each decision was answered by
// the policy's failureMode, Open by default, and she was admitted 123 of
// 131 times (this test on the base commit: 78,902 of 79,494, none of them
// saying why; under failureMode Local, 3 of 43, the pod's share of her
// limit starting afresh). Now running out of budget opens no limit: the
// pod remembers the store's denial of her key, and decides the rest
// against its share of the limit in memory (as failureMode Local does),
// whatever the policy's failureMode. Not one of her checks is admitted,
// though most are answered without the store.
func TestAttackSpentBudgetOpensLimits(t *testing.T) {
	for _, mode := range []string{"", "Local"} {
		t.Run("failureMode="+cmp.Or(mode, "default"), func(t *testing.T) {
			p, rls, _ := budgetLimiter(t, sharedPolicy(mode), "--tenant-store-calls-per-second", "50")
			ctx := context.Background()
			// Mallory spends her 3, and is denied by the store.
			for i := range 4 {
				resp, err := rls.ShouldRateLimit(ctx, userRequest("mallory"))
				if err != nil {
					t.Fatal(err)
				}
				if want := i < 3; (resp.OverallCode == rlsv3.RateLimitResponse_OK) != want || metadataReason(resp) != "" {
					t.Fatalf("mallory's check %d before the flood: %s %q, want allowed %v by the store", i+1, resp.OverallCode, metadataReason(resp), want)
				}
			}

			stop := make(chan struct{})
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						c, cancel := context.WithTimeout(ctx, 10*time.Second)
						_, _ = rls.ShouldRateLimit(c, userRequest(fmt.Sprintf("w%d-%d", w, i)))
						cancel()
					}
				})
			}
			defer func() {
				close(stop)
				wg.Wait()
			}()
			eventually(t, "the namespace over its store budget", func() (bool, string) {
				n := budgetExceeded(t, p, "shared", "storeCallsPerSecond")
				return n > 0, fmt.Sprintf("sluice_budget_exceeded_total %v", n)
			})

			// Her checks during the flood, until 40 of them were answered
			// past the budget (not by the store).
			var checks, admitted, pastBudget int
			reasons := map[string]int{}
			deadline := time.Now().Add(settle)
			for pastBudget < 40 && time.Now().Before(deadline) {
				resp, err := rls.ShouldRateLimit(ctx, userRequest("mallory"))
				if err != nil {
					t.Fatal(err)
				}
				checks++
				if resp.OverallCode == rlsv3.RateLimitResponse_OK {
					admitted++
				}
				r := metadataReason(resp)
				reasons[r]++
				if strings.Contains(r, "namespace store budget exceeded") {
					pastBudget++
				}
			}
			t.Logf("mallory during the flood: %d checks, %d admitted, %d answered past the budget; reasons %v", checks, admitted, pastBudget, reasons)
			if admitted != 0 {
				t.Errorf("mallory, over her limit of 3, was admitted %d of %d times during the flood; want never", admitted, checks)
			}
			if pastBudget < 40 {
				t.Errorf("only %d of mallory's %d checks were answered past the budget: the flood did not spend it", pastBudget, checks)
			}
		})
	}
}
