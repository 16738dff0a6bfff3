package service_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/policytest"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
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

// Past its store budget, a namespace's decisions are made against this
// pod's share of the limit, whatever the policy's failure mode but
// Closed, which denies; each with the budget's reason, and the policy
// shows degraded for it.
func TestStoreBudgetFailureMode(t *testing.T) {
	for _, mode := range []v1alpha1.FailureMode{v1alpha1.FailOpen, v1alpha1.FailClosed, v1alpha1.FailLocal} {
		t.Run(string(mode), func(t *testing.T) {
			snap := budgetSnapshot(t, 1)
			doc := config.DocumentOf(snap)
			doc.Policies[0].Spec.FailureMode = ptr.To(v1beta1.FailureMode(mode))
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
			want := service.ReasonBudgetLocal
			if mode == v1alpha1.FailClosed {
				want = service.ReasonBudgetFailedClosed
			}
			if first.Reason != "" || second.Reason != want {
				t.Fatalf("first %q, second %q; want the store's, then %q", first.Reason, second.Reason, want)
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

// sharedSnapshot is one policy of namespace shared, limit an hour per user
// in domain shared, with failureMode mode, under a store budget of rate
// calls a second.
func sharedSnapshot(t *testing.T, limit int64, mode v1alpha1.FailureMode, rate int32) *config.Snapshot {
	t.Helper()
	snap, err := policytest.Compile([]v1alpha1.RateLimitPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "per-user"},
		Spec: v1alpha1.RateLimitPolicySpec{Domain: "shared", Descriptors: []v1alpha1.Descriptor{{Key: "user"}}, FailureMode: ptr.To(mode),
			Rate: v1alpha1.Rate{Limit: limit, Period: metav1.Duration{Duration: time.Hour}}}}})
	if err != nil {
		t.Fatal(err)
	}
	snap.Budgets = &config.Budgets{Default: config.NamespaceBudget{MaxPoliciesPerRequest: 4, StoreCallsPerSecond: rate}}
	return snap
}

// budgetService is a service on a real Redis, with a memory store for the
// pod's share, whose budgets run on a clock the test moves (now).
func budgetService(t *testing.T, snap *config.Snapshot) (*service.Service, *prometheus.Registry, *atomic.Int64) {
	t.Helper()
	srv := redistest.Start(t)
	st, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	reg := prometheus.NewRegistry()
	svc := service.New(st, service.Options{Registerer: reg, Fallback: memoryStore(t)})
	now := &atomic.Int64{}
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	service.SetClock(svc, func() time.Time { return time.Unix(0, now.Load()) })
	svc.Swap(snap)
	return svc, reg, now
}

func user(u string) []config.Entry { return []config.Entry{{Key: "user", Value: u}} }

// Past its store budget, a namespace never admits what its limit would
// deny, whatever the failure mode: a client the store denied stays denied
// (the store's last answer) however many of her checks come past the
// budget; a client the store has not seen is decided against the pod's
// share of the limit, all of it on one pod.
func TestPastBudgetNeverAdmitsWhatTheStoreDenies(t *testing.T) {
	for _, mode := range []v1alpha1.FailureMode{v1alpha1.FailOpen, v1alpha1.FailLocal} {
		t.Run(string(mode), func(t *testing.T) {
			svc, _, now := budgetService(t, sharedSnapshot(t, 3, mode, 50))
			ctx := context.Background()
			for i := range 4 {
				if d := svc.Check(ctx, "shared", user("mallory"), 1); d.OverLimit != (i == 3) || d.Reason != "" {
					t.Fatalf("mallory's check %d: %+v, want the store's", i+1, d)
				}
			}
			// A flood of other keys spends the budget, a second at a time.
			admitted, pastBudget := 0, 0
			for s := range 5 {
				for i := range 200 {
					svc.Check(ctx, "shared", user(fmt.Sprintf("flood-%d-%d", s, i)), 1)
				}
				for range 20 {
					d := svc.Check(ctx, "shared", user("mallory"), 1)
					if !d.OverLimit {
						admitted++
					}
					if d.Reason == service.ReasonBudgetDenied {
						pastBudget++
					}
				}
				now.Add(int64(time.Second))
			}
			if admitted != 0 || pastBudget < 90 {
				t.Fatalf("mallory during the flood: %d of 100 admitted, %d denied past the budget by the store's last answer; want 0 and most", admitted, pastBudget)
			}
			// Bob, whom the store never saw, past the budget: his limit,
			// then denied.
			for i := range 200 {
				svc.Check(ctx, "shared", user(fmt.Sprintf("flood-x-%d", i)), 1)
			}
			for i := range 5 {
				d := svc.Check(ctx, "shared", user("bob"), 1)
				if d.Reason != service.ReasonBudgetLocal || d.OverLimit != (i >= 3) {
					t.Fatalf("bob's check %d past the budget: %+v, want the pod's share of 3 (one pod)", i+1, d)
				}
			}
		})
	}
}

// Peeks (the status peek, explain, a check of cost 0) admit nothing, and
// take nothing from the decisions' budget: after a thousand of them, a
// namespace's decisions are all the store's, up to the budget. Past their
// own budget (a tenth of the decisions'), peeks answer without reading the
// store and say so, with the store's last denial when there is one.
func TestPeeksSpendNoDecisionBudget(t *testing.T) {
	svc, reg, now := budgetService(t, sharedSnapshot(t, 3, v1alpha1.FailOpen, 20))
	ctx := context.Background()
	// Mallory is over her limit at the store.
	for range 4 {
		svc.Check(ctx, "shared", user("mallory"), 1)
	}
	var unread int
	for i := range 1000 {
		u := user(fmt.Sprintf("peeker-%d", i%50))
		if i%10 == 0 {
			u = user("mallory")
		}
		st, err := svc.Peek(ctx, "shared", u)
		if err != nil || len(st) != 1 {
			t.Fatalf("peek: %+v %v", st, err)
		}
		ex, err := svc.Explain(ctx, "shared", u)
		if err != nil || len(ex) != 1 {
			t.Fatalf("explain: %+v %v", ex, err)
		}
		d := svc.Check(ctx, "shared", u, 0)
		if d.OverLimit {
			t.Fatalf("a check of cost 0: %+v", d)
		}
		for _, r := range []string{ex[0].Reason, d.Reason} {
			if r == service.ReasonPeekBudget {
				unread++
			}
		}
		if st[0].Reason == service.ReasonPeekBudget {
			unread++
			if u[0].Value == "mallory" && (st[0].Remaining != 0 || !ex[0].WouldDeny()) {
				t.Fatalf("mallory's peek past the budget: %+v, explain %+v; want the store's last word, none remaining", st[0], ex[0])
			}
		} else if st[0].Reason != "" {
			t.Fatalf("peek reason %q", st[0].Reason)
		}
	}
	if unread < 2900 {
		t.Fatalf("%d of 3000 peeks answered past the peek budget", unread)
	}
	if svc.Degraded() != nil {
		t.Fatalf("peeks past their budget made policies degraded: %+v", svc.Degraded())
	}
	// The decisions' budget is whole: a second of decisions at its rate,
	// all the store's.
	for i := range 20 {
		now.Add(int64(time.Second / 20))
		if d := svc.Check(ctx, "shared", user(fmt.Sprintf("new-%d", i)), 1); d.Reason != "" || d.OverLimit {
			t.Fatalf("decision %d after the peeks: %+v, want the store's", i+1, d)
		}
	}
	over := counterValues(t, reg, "sluice_budget_exceeded_total", "budget")
	if over[service.BudgetStoreCalls] != 0 || over[service.BudgetStorePeeks] < 2900 {
		t.Fatalf("sluice_budget_exceeded_total by budget: %v; want no decision, and the peeks past theirs", over)
	}
}

// One key's flood, from 4 workers, does not spend its neighbours' budget:
// a neighbour (a key whose shares are not the flood's) gets the store's
// decisions at least once in each step of its 5 checks, made after the
// flood took all it could of the step's refill (16 calls a step; the
// flood sends 400), and is never admitted past its limit. Without the
// shares (one bucket, first come first served), the flood left it
// nothing.
func TestOneKeysFloodLeavesItsNeighboursTheStore(t *testing.T) {
	svc, _, now := budgetService(t, sharedSnapshot(t, 5, v1alpha1.FailOpen, 64))
	ctx := context.Background()
	fa, fb := service.BudgetShares(svc, "shared", user("flood"))
	var neighbour string
	for i := range 100 {
		u := fmt.Sprintf("neighbour-%d", i)
		if a, b := service.BudgetShares(svc, "shared", user(u)); a != fa && a != fb && b != fa && b != fb {
			neighbour = u
			break
		}
	}
	if neighbour == "" {
		t.Fatal("no neighbour apart from the flood's shares among 100 keys")
	}
	var (
		admitted, stores int
		floodPast        atomic.Int64
	)
	for step := range 20 {
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 100 {
					if d := svc.Check(ctx, "shared", user("flood"), 1); strings.HasPrefix(d.Reason, "namespace store budget exceeded") {
						floodPast.Add(1)
					}
				}
			})
		}
		// The neighbour comes once the flood has taken all it could.
		wg.Wait()
		got := 0
		for range 5 {
			d := svc.Check(ctx, "shared", user(neighbour), 1)
			if !d.OverLimit {
				admitted++
			}
			if d.Reason == "" {
				got++
			}
		}
		if got == 0 {
			t.Fatalf("step %d: none of the neighbour's 5 checks decided by the store beside the flood", step)
		}
		stores += got
		now.Add(int64(250 * time.Millisecond))
	}
	t.Logf("20 steps: the neighbour got %d store decisions of 100, the flood %d of 8000 past the budget", stores, floodPast.Load())
	if admitted > 5 {
		t.Fatalf("the neighbour was admitted %d times, past its limit of 5", admitted)
	}
	if floodPast.Load() < 7000 {
		t.Fatalf("only %d of the flood's 8000 checks past the budget: it did not spend it", floodPast.Load())
	}
}
