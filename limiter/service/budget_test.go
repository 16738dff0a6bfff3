package service_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
)

// budgetSnapshot has n policies in namespace ns, domain d, policy i
// matching the entry k<i>.
func budgetSnapshot(t *testing.T, n int) *config.Snapshot {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "apiVersion: ratelimit.sluice.dev/v1alpha1\nkind: RateLimitPolicy\nmetadata: {name: p%02d, namespace: ns}\n"+
			"spec:\n  domain: d\n  descriptors: [{key: k%02d}]\n  rate: {limit: 1000, period: 1h}\n---\n", i, i)
	}
	snap, err := config.Parse("budget.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// The per-request budget counts every descriptor's matches, denies past
// it whatever request came before (pooled scratch), and a request within
// it is decided by every policy.
func TestMatchBudget(t *testing.T) {
	svc := service.New(memoryStore(t), service.Options{Registerer: prometheus.NewRegistry(),
		Budgets: &config.Budgets{Default: config.NamespaceBudget{MaxPoliciesPerRequest: 4, StoreCallsPerSecond: 1_000_000}}})
	svc.Swap(budgetSnapshot(t, 6))
	req := func(n int) service.Response {
		var ds []service.Descriptor
		for i := range n {
			ds = append(ds, desc(fmt.Sprintf("k%02d", i), "v"))
		}
		resp, err := svc.Decide(context.Background(), &service.Request{Domain: "d", Descriptors: ds})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for range 3 {
		if r := req(5); !r.OverLimit || !strings.Contains(r.Reported.Reason, "request matches 5 policies of namespace ns, above its budget of 4") {
			t.Fatalf("5 matches: %+v", r.Reported)
		}
		if r := req(4); r.OverLimit || len(r.Decisions) != 4 || r.Decisions[3].Policy == nil {
			t.Fatalf("4 matches: %+v", r)
		}
	}
}

// Past its store budget, a namespace's decisions take the policy's failure
// mode, with the budget's reason, and the policy shows degraded for it.
func TestStoreBudgetFailureMode(t *testing.T) {
	for _, mode := range []v1alpha1.FailureMode{v1alpha1.FailOpen, v1alpha1.FailClosed, v1alpha1.FailLocal} {
		t.Run(string(mode), func(t *testing.T) {
			snap := budgetSnapshot(t, 1)
			doc := config.DocumentOf(snap)
			doc.Policies[0].Spec.FailureMode = &mode
			doc.Budgets = &config.Budgets{Default: config.NamespaceBudget{MaxPoliciesPerRequest: 4, StoreCallsPerSecond: 1}}
			data, _ := config.EncodeDocument(doc)
			snap, err := config.ParseDocument(data)
			if err != nil {
				t.Fatal(err)
			}
			svc := service.New(memoryStore(t), service.Options{Registerer: prometheus.NewRegistry(), Fallback: memoryStore(t)})
			svc.Swap(snap)
			first := svc.Check(context.Background(), "d", []config.Entry{{Key: "k00", Value: "v"}}, 1)
			second := svc.Check(context.Background(), "d", []config.Entry{{Key: "k00", Value: "v"}}, 1)
			if first.Reason != "" || !strings.Contains(second.Reason, "namespace store budget exceeded (failureMode "+string(mode)+")") {
				t.Fatalf("first %q, second %q", first.Reason, second.Reason)
			}
			if second.OverLimit != (mode == v1alpha1.FailClosed) {
				t.Fatalf("second over limit: %v", second.OverLimit)
			}
			if ds := svc.Degraded(); len(ds) != 1 || ds[0].Cause != service.CauseBudgetExceeded {
				t.Fatalf("degraded %+v", ds)
			}
		})
	}
}

// BenchmarkCheckBudgeted is BenchmarkCheck (TokenBucket) with and without
// a namespace store budget: what metering one store call costs.
func BenchmarkCheckBudgeted(b *testing.B) {
	for _, budgeted := range []bool{false, true} {
		b.Run(fmt.Sprintf("budget=%v", budgeted), func(b *testing.B) {
			var opts service.Options
			if budgeted {
				// Never exhausted: every call is metered, none refused.
				opts.Budgets = &config.Budgets{Default: config.NamespaceBudget{MaxPoliciesPerRequest: 32, StoreCallsPerSecond: 1 << 30}}
			}
			svc := benchServiceWith(b, "TokenBucket", opts)
			entries := []config.Entry{{Key: "user_id", Value: "user-42"}, {Key: "path", Value: "/v1/charges"}}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if d := svc.Check(ctx, "bench", entries, 1); d.Policy == nil {
					b.Fatal("no match")
				}
			}
		})
	}
}
