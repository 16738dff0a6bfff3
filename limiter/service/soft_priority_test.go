package service_test

import (
	"testing"

	"github.com/sluice-dev/sluice/limiter/config"
)

// softPriorityPolicies: a soft warning at 10 per tenant, which batch
// requests reach at 5 (issue 19's soft limits and priorities together),
// beside a hard limit with priorities too. Both windows are 720h, so that
// no window ends between the requests a test counts.
const softPriorityPolicies = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: warn, namespace: s}
spec:
  domain: s
  descriptors: [{key: tenant}]
  algorithm: FixedWindow
  rate: {limit: 10, period: 720h}
  soft: true
  priority: {key: priority, levels: [{value: interactive, share: 100}, {value: batch, share: 50}], default: interactive}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: hard, namespace: s}
spec:
  domain: s
  descriptors: [{key: tenant}, {key: path, value: /hard}]
  algorithm: FixedWindow
  rate: {limit: 100, period: 720h}
  priority: {key: priority, levels: [{value: interactive, share: 100}, {value: batch, share: 50}], default: interactive}
`

// A soft policy with priorities marks each priority past its own share,
// never denies, and counts the marks per level as soft_limited; a policy
// that is not soft has no soft_limited series.
func TestSoftPolicyWithPriorities(t *testing.T) {
	svc, reg := newService(t, nil)
	snap, err := config.Parse("inline", []byte(softPriorityPolicies))
	if err != nil {
		t.Fatal(err)
	}
	svc.Swap(snap)
	batch := desc("tenant", "t", "priority", "batch", "path", "/hard")
	for i := range 6 {
		r := call(t, svc, "s", 0, batch)
		if r.OverLimit || len(r.SoftLimited) != min(1, max(0, i-4)) {
			t.Fatalf("batch %d: over limit %v, soft limited by %v; want allowed, marked from the 6th", i, r.OverLimit, r.SoftLimited)
		}
	}
	if r := call(t, svc, "s", 0, desc("tenant", "t", "priority", "interactive")); r.OverLimit || len(r.SoftLimited) != 0 {
		t.Fatalf("interactive with 6 counted: %+v, want allowed and unmarked (its share is 10)", r)
	}
	for level, want := range map[string]map[string]float64{"batch": {"allowed": 5, "soft_limited": 1}, "interactive": {"allowed": 1, "soft_limited": 0}} {
		for result, n := range want {
			if got := priorityDecisions(t, reg, "s/warn", level, result); got != n {
				t.Errorf("s/warn: sluice_priority_decisions_total{priority=%q,result=%q} = %v, want %v", level, result, got, n)
			}
		}
	}
	if got := decisions(t, reg, "s/warn", "soft_limited"); got != 1 {
		t.Errorf("s/warn: sluice_decisions_total{result=soft_limited} = %v, want 1", got)
	}
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
			if labels["policy"] == "s/hard" && labels["result"] == "soft_limited" {
				t.Errorf("s/hard, not soft, has a soft_limited series: %v", labels)
			}
		}
	}
}
