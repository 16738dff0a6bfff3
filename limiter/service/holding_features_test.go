package service_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/limiter/config"
)

// holdingFeaturePolicies put issue 19's priorities and calendar quotas on
// policies that hold (issue 18): 4 slots per tenant in flight, of which
// batch requests may hold 2; 1000 tokens per account and calendar day in
// Paris, reserved then settled, of which batch requests may reserve 500.
const holdingFeaturePolicies = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: slots, namespace: llm}
spec:
  domain: llm
  descriptors: [{key: tenant}]
  algorithm: Concurrency
  concurrency: {maxInFlight: 4, leaseDuration: 1m}
  priority: {key: priority, levels: [{value: interactive, share: 100}, {value: batch, share: 50}], default: batch}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: daily-tokens, namespace: llm}
spec:
  domain: llm
  descriptors: [{key: account}]
  algorithm: FixedWindow
  rate: {limit: 1000, calendar: Day, timeZone: Europe/Paris}
  reserve: {expireAfter: 5m}
  priority: {key: priority, levels: [{value: interactive, share: 100}, {value: batch, share: 50}], default: batch}
`

// Priorities share what policies hold: a batch request takes a slot only
// while fewer than half the slots are in flight, whatever priority holds
// them, and reserves tokens only within half the day's quota; the end of a
// request gives back what it held, and a reservation's settlement refunds
// into its calendar day. Decisions are counted per priority.
func TestPrioritiesOnHoldings(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			svc, reg := newService(t, newStore(t))
			snap, err := config.Parse("inline", []byte(holdingFeaturePolicies))
			if err != nil {
				t.Fatal(err)
			}
			svc.Swap(snap)
			batch, interactive := desc("tenant", "t1", "priority", "batch"), desc("tenant", "t1", "priority", "interactive")

			var leases []string
			for i := range 2 {
				r := call(t, svc, "llm", 0, batch)
				if r.OverLimit || r.Lease == "" {
					t.Fatalf("batch %d: %+v, want a slot", i, r)
				}
				leases = append(leases, r.Lease)
			}
			if r := call(t, svc, "llm", 0, batch); !r.OverLimit || r.Lease != "" || r.Reported.Result.RetryAfter != time.Second {
				t.Fatalf("a 3rd batch: over limit %v, lease %q, retry %v; want denied, no lease, retry 1s", r.OverLimit, r.Lease, r.Reported.Result.RetryAfter)
			}
			r := call(t, svc, "llm", 0, interactive)
			if r.OverLimit || r.Lease == "" || r.Reported.Result.Remaining != 1 {
				t.Fatalf("interactive beside 2 batch: %+v, want a slot with 1 left", r)
			}
			// One batch ends: 2 still in flight, the interactive one among
			// them, so batch still waits; when it ends too, batch goes.
			if got := outcomes(end(t, svc, leases[0], 0, batch)); got != "llm/slots=released" {
				t.Fatalf("a batch end: %s", got)
			}
			if r := call(t, svc, "llm", 0, batch); !r.OverLimit {
				t.Fatalf("batch with 2 in flight: %+v, want denied", r)
			}
			if got := outcomes(end(t, svc, r.Lease, 0, interactive)); got != "llm/slots=released" {
				t.Fatalf("the interactive end: %s", got)
			}
			if r := call(t, svc, "llm", 0, batch); r.OverLimit || r.Lease == "" {
				t.Fatalf("batch with 1 in flight: %+v, want a slot", r)
			}
			for level, want := range map[string]map[string]float64{"batch": {"allowed": 3, "limited": 2}, "interactive": {"allowed": 1, "limited": 0}} {
				for result, n := range want {
					if got := priorityDecisions(t, reg, "llm/slots", level, result); got != n {
						t.Errorf("sluice_priority_decisions_total{priority=%q,result=%q} = %v, want %v", level, result, got, n)
					}
				}
			}

			// Tokens: batch reserves within 500 of the day's 1000.
			tb, ti := desc("account", "a1", "priority", "batch"), desc("account", "a1", "priority", "interactive")
			first := call(t, svc, "llm", 400, tb)
			if first.OverLimit || first.Lease == "" || first.Reported.Result.Remaining != 100 {
				t.Fatalf("batch reserves 400: %+v, want 100 left of its 500", first)
			}
			if r := call(t, svc, "llm", 200, tb); !r.OverLimit {
				t.Fatalf("batch reserves 200 more: %+v, want denied", r)
			}
			if r := call(t, svc, "llm", 500, ti); r.OverLimit || r.Reported.Result.Remaining != 100 {
				t.Fatalf("interactive reserves 500: %+v, want 100 left of the 1000", r)
			}
			es := end(t, svc, first.Lease, 100, tb)
			if outcomes(es) != "llm/daily-tokens=settled" || es[0].Held != 400 || es[0].Result.Remaining != 400 {
				t.Fatalf("settle the 400 at 100: %+v, want 300 back and 400 left of the day", es)
			}
			if got := left(t, svc, "llm/daily-tokens", tb); got != 0 {
				t.Fatalf("batch's view after the refund: %d left, want 0 (600 spent of its 500)", got)
			}
			if got := left(t, svc, "llm/daily-tokens", ti); got != 400 {
				t.Fatalf("interactive's view after the refund: %d left, want 400", got)
			}
		})
	}
}

// priorityDecisions reads sluice_priority_decisions_total for policy's
// level and result.
func priorityDecisions(t *testing.T, reg *prometheus.Registry, policy, level, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_priority_decisions_total" {
			continue
		}
		for _, m := range mf.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["policy"] == policy && labels["priority"] == level && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
