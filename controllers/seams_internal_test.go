package controllers

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// A fleet that declares the entries that steer the limiters
// (spec.entries) serves no policy that counts on one of them, or that
// names another lease entry or priority key; policies that agree with it
// are accepted. A fleet that declares nothing leaves them to the policies.
func TestAcceptanceWithFleetEntries(t *testing.T) {
	holding := func(ns, name string, created int, leaseEntry *string) v1alpha1.RateLimitPolicy {
		p := pol(ns, name, created, "d", "team="+ns)
		p.Spec.Algorithm = ptr.To(v1alpha1.Concurrency)
		p.Spec.Rate = v1alpha1.Rate{}
		p.Spec.Concurrency = &v1alpha1.ConcurrencyLimit{MaxInFlight: 2, LeaseEntry: leaseEntry}
		return p
	}
	shedding := func(ns, name string, created int, key string) v1alpha1.RateLimitPolicy {
		p := pol(ns, name, created, "d", "service="+ns)
		p.Spec.Priority = &v1alpha1.PriorityShedding{Key: key, Default: "low",
			Levels: []v1alpha1.PriorityLevel{{Value: "high", Share: 100}, {Value: "low", Share: 50}}}
		return p
	}
	all := []v1alpha1.RateLimitPolicy{
		holding("a", "default-lease", 1, nil),
		holding("b", "own-lease", 2, ptr.To("b_lease")),
		shedding("c", "declared-priority", 3, "prio"),
		shedding("e", "own-priority", 4, "tier"),
		pol("f", "counts-on-idempotency", 5, "d", "idem"),
		pol("g", "counts-on-priority", 6, "d", "prio"),
		pol("h", "plain", 7, "d", "user_id"),
	}
	domains := []v1beta1.FleetDomain{{Name: "d", AllowedNamespaces: &v1beta1.AllowedNamespaces{From: ptr.To(v1beta1.NamespacesFromAll)}}}
	declaring := tenancy{fleets: []v1beta1.LimiterFleet{{ObjectMeta: metav1.ObjectMeta{Namespace: "sys", Name: "f"},
		Spec: v1beta1.LimiterFleetSpec{Domains: domains,
			Entries: &v1beta1.FleetEntries{Lease: ptr.To("sluice_lease"), Idempotency: ptr.To("idem"), Priority: ptr.To("prio")}}}}}
	want := map[string]string{
		"a/default-lease":         "Accepted",
		"b/own-lease":             `ReservedEntry:the policy's lease entry "b_lease" (spec.concurrency.leaseEntry or spec.reserve.leaseEntry in v1alpha1, sluice_lease by default) is not the one LimiterFleet sys/f declares for its domains (spec.entries.lease: "sluice_lease")`,
		"c/declared-priority":     "Accepted",
		"e/own-priority":          `ReservedEntry:the policy's priority key "tier" (spec.priority.key in v1alpha1, priority by default) is not the priority entry LimiterFleet sys/f declares for its domains (spec.entries.priority: "prio")`,
		"f/counts-on-idempotency": `ReservedEntry:spec.descriptors[0].key "idem" is an entry that LimiterFleet sys/f reserves (spec.entries.idempotency)`,
		"g/counts-on-priority":    `ReservedEntry:spec.descriptors[0].key "prio" is an entry that LimiterFleet sys/f reserves (spec.entries.priority)`,
		"h/plain":                 "Accepted",
	}
	got := decideAcceptance(stored(all), declaring)
	for key, w := range want {
		ns, name, _ := strings.Cut(key, "/")
		v := got[types.NamespacedName{Namespace: ns, Name: name}]
		reason, detail, _ := strings.Cut(w, ":")
		if v.Reason != reason || v.Accepted != (reason == "Accepted") || !strings.Contains(v.Message, detail) {
			t.Errorf("%s: %+v, want %s", key, v, w)
		}
	}
	// Declaring nothing, the fleet leaves the entries to the policies:
	// all are accepted (g's prio is no lease entry).
	open := tenancy{fleets: []v1beta1.LimiterFleet{{ObjectMeta: metav1.ObjectMeta{Namespace: "sys", Name: "f"},
		Spec: v1beta1.LimiterFleetSpec{Domains: domains}}}}
	for key, v := range decideAcceptance(stored(all), open) {
		if !v.Accepted {
			t.Errorf("%s without spec.entries: %+v, want accepted", key, v)
		}
	}
}

// The fleet's idempotency entry is its limiters' --idempotency-entry.
func TestLimiterArgsIdempotencyEntry(t *testing.T) {
	f := &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: "sys", Name: "f"}}
	for _, a := range resources.LimiterArgs(f, "memory") {
		if strings.HasPrefix(a, "--idempotency-entry") {
			t.Fatalf("a fleet without spec.entries renders %s", a)
		}
	}
	f.Spec.Entries = &v1beta1.FleetEntries{Idempotency: ptr.To("idem"), Accept: ptr.To("x_accept")}
	found, accept := false, false
	for _, a := range resources.LimiterArgs(f, "memory") {
		found = found || a == "--idempotency-entry=idem"
		accept = accept || a == "--accept-entry=x_accept"
	}
	if !found || !accept {
		t.Fatalf("args %v lack --idempotency-entry=idem or --accept-entry=x_accept", resources.LimiterArgs(f, "memory"))
	}
}
