package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
)

// Two policies on user in domain d: one capped at 2 units a request, one
// shadow capped at 1; and one on ip whose cap is its capacity, 4.
const cappedPolicies = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: capped, namespace: a}
spec: {domain: d, descriptors: [{key: user}], algorithm: FixedWindow, rate: {limit: 10, period: 1h}, maxCost: 2}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: watching, namespace: a}
spec: {domain: d, descriptors: [{key: user}, {key: path}], algorithm: FixedWindow, rate: {limit: 10, period: 1h}, maxCost: 1, shadow: true}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-ip, namespace: a}
spec: {domain: d, descriptors: [{key: ip}], algorithm: TokenBucket, rate: {limit: 2, period: 1h}, burst: 4}
`

// A descriptor above the maxCost of an enforcing policy it matches is
// refused before anything is decided; shadow policies and a disabled
// kill switch refuse nothing.
func TestMaxCost(t *testing.T) {
	svc := service.New(memoryStore(t), service.Options{Registerer: prometheus.NewRegistry()})
	snap, err := config.Parse("inline", []byte(cappedPolicies))
	if err != nil {
		t.Fatal(err)
	}
	svc.Swap(snap)
	decide := func(hits uint64, ds ...service.Descriptor) (service.Response, error) {
		return svc.Decide(context.Background(), &service.Request{Domain: "d", HitsAddend: hits, Descriptors: ds})
	}
	for _, tc := range []struct {
		name string
		hits uint64
		ds   []service.Descriptor
		want string // "" for a decision
	}{
		{"within the cap", 2, []service.Descriptor{desc("user", "ann")}, ""},
		{"above the cap", 3, []service.Descriptor{desc("user", "ann")}, "descriptors[0] costs 3, above the maximum cost of 2 of policy a/capped (spec.limit.rate.cost.max)"},
		{"the second descriptor", 0, []service.Descriptor{desc("ip", "1.2.3.4"), {Entries: desc("user", "ann").Entries, HitsAddend: 5, HasHitsAddend: true}},
			"descriptors[1] costs 5, above the maximum cost of 2 of policy a/capped"},
		{"the capacity caps a policy without maxCost", 5, []service.Descriptor{desc("ip", "1.2.3.4")}, "maximum cost of 4 of policy a/per-ip"},
		{"the capacity itself", 4, []service.Descriptor{desc("ip", "1.2.3.5")}, ""},
		{"a shadow policy's cap refuses nothing", 2, []service.Descriptor{desc("user", "bo", "path", "/x")}, ""},
		{"unmatched", 1000, []service.Descriptor{desc("other", "x")}, ""},
		{"the idempotency entry is not matched", 3, []service.Descriptor{desc("user", "cy", "idempotency_key", "k")}, "maximum cost of 2 of policy a/capped"},
	} {
		r, err := decide(tc.hits, tc.ds...)
		switch {
		case err != nil:
			t.Errorf("%s: %v, want a decision", tc.name, err)
		case tc.want == "" && r.Reported.Refused:
			t.Errorf("%s: refused: %s", tc.name, r.Reported.Reason)
		case tc.want != "" && (!r.OverLimit || !r.Reported.Refused || !strings.Contains(r.Reported.Reason, tc.want)):
			t.Errorf("%s: %+v, want refused %q", tc.name, r.Reported, tc.want)
		}
	}
	// The refused requests spent nothing: 1.2.3.4 has its 4 units, ann 8.
	if r, err := decide(4, desc("ip", "1.2.3.4")); err != nil || r.OverLimit {
		t.Errorf("1.2.3.4's 4 units after the refusals: %+v %v", r, err)
	}
	peek := desc("user", "ann")
	peek.HasHitsAddend = true // and 0: a peek
	if r, err := decide(0, peek); err != nil || r.Decisions[0].Result.Remaining != 8 {
		t.Errorf("ann after one admitted request of 2: %+v %v, want 8 remaining", r, err)
	}
	// With enforcement off nothing is refused, as nothing is denied.
	svc.SetEnforcement(false)
	if r, err := decide(3, desc("user", "ann")); err != nil || r.OverLimit || r.Reported.Refused {
		t.Errorf("above the cap with enforcement disabled: %+v %v", r.Reported, err)
	}
}
