package controllers

import (
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/observe"
)

// stored are policies written by a v1alpha1 client as the API server
// stores them, in v1beta1, with the conversion annotation that keeps what
// only v1alpha1 says; the operator reads them so.
func stored(ps []v1alpha1.RateLimitPolicy) []v1beta1.RateLimitPolicy {
	out := make([]v1beta1.RateLimitPolicy, len(ps))
	for i := range ps {
		out[i] = *storedOne(&ps[i])
	}
	return out
}

// storedOne is stored for one policy.
func storedOne(p *v1alpha1.RateLimitPolicy) *v1beta1.RateLimitPolicy {
	b := &v1beta1.RateLimitPolicy{}
	if err := p.DeepCopy().ConvertTo(b); err != nil {
		panic(err)
	}
	b.APIVersion, b.Kind = v1beta1.GroupVersion.String(), "RateLimitPolicy"
	return b
}

func pol(ns, name string, created int, domain string, keys ...string) v1alpha1.RateLimitPolicy {
	p := v1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name), Generation: 1,
			CreationTimestamp: metav1.NewTime(time.Unix(int64(created), 0))},
		Spec: v1alpha1.RateLimitPolicySpec{Domain: domain, Rate: v1alpha1.Rate{Limit: 1, Period: metav1.Duration{Duration: time.Second}}},
	}
	for _, k := range keys {
		key, value, ok := strings.Cut(k, "=")
		d := v1alpha1.Descriptor{Key: key}
		if ok {
			d.Value = ptr.To(value)
		}
		p.Spec.Descriptors = append(p.Spec.Descriptors, d)
	}
	return p
}

func TestDecideAcceptance(t *testing.T) {
	invalid := pol("a", "invalid", 0, "d", "k")
	invalid.Spec.Rate.Limit = 0
	deleting := pol("a", "deleting", 0, "d", "user")
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	all := []v1alpha1.RateLimitPolicy{
		pol("b", "newer", 20, "d", "user", "path=/x"),
		pol("a", "older", 10, "d", "path=/x", "user"), // same set, other order
		pol("a", "same-time-b", 30, "d", "ip"),
		pol("a", "same-time-a", 30, "d", "ip"),
		pol("a", "other-value", 40, "d", "user", "path=/y"),
		pol("a", "other-domain", 50, "e", "user", "path=/x"),
		invalid,
		deleting,
		pol("z", "after-deleting", 60, "d", "user"),
	}
	// One fleet allows every namespace to use both domains: conflicts are
	// decided among all of them.
	open := tenancy{fleets: []v1beta1.LimiterFleet{{ObjectMeta: metav1.ObjectMeta{Namespace: "sys", Name: "all"},
		Spec: v1beta1.LimiterFleetSpec{Domains: []v1beta1.FleetDomain{
			{Name: "d", AllowedNamespaces: &v1beta1.AllowedNamespaces{From: ptr.To(v1beta1.NamespacesFromAll)}},
			{Name: "e", AllowedNamespaces: &v1beta1.AllowedNamespaces{From: ptr.To(v1beta1.NamespacesFromAll)}},
		}}}}}
	got := decideAcceptance(stored(all), open)
	want := map[string]string{
		"b/newer":          "Conflict:a/older",
		"a/older":          "Accepted",
		"a/same-time-a":    "Accepted", // ties break by namespace/name
		"a/same-time-b":    "Conflict:a/same-time-a",
		"a/other-value":    "Accepted",
		"a/other-domain":   "Accepted",
		"a/invalid":        "InvalidSpec:spec.limit.rate.limit",
		"z/after-deleting": "Accepted", // a policy being deleted holds nothing
	}
	if len(got) != len(want) {
		t.Fatalf("got %d verdicts, want %d: %v", len(got), len(want), got)
	}
	for key, w := range want {
		ns, name, _ := strings.Cut(key, "/")
		v := got[types.NamespacedName{Namespace: ns, Name: name}]
		reason, detail, _ := strings.Cut(w, ":")
		if v.Reason != reason || v.Accepted != (reason == "Accepted") || !strings.Contains(v.Message, detail) {
			t.Errorf("%s: %+v, want %s", key, v, w)
		}
	}
	// The outcome does not depend on list order.
	rev := make([]v1alpha1.RateLimitPolicy, len(all))
	for i := range all {
		rev[len(all)-1-i] = all[i]
	}
	if again := decideAcceptance(stored(rev), open); len(again) != len(got) || again[types.NamespacedName{Namespace: "b", Name: "newer"}] != got[types.NamespacedName{Namespace: "b", Name: "newer"}] {
		t.Fatal("list order changed the verdicts")
	}
}

func TestFleetSelects(t *testing.T) {
	p := pol("team-a", "p", 0, "d", "k")
	p.Labels = map[string]string{"tier": "gold"}
	for _, tc := range []struct {
		name        string
		pols, nss   *metav1.LabelSelector
		nsLabels    map[string]string
		want        bool
		wantErrText string
	}{
		{name: "nil selectors select all", want: true},
		{name: "empty selectors select all", pols: &metav1.LabelSelector{}, nss: &metav1.LabelSelector{}, want: true},
		{name: "policy label matches", pols: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}, want: true},
		{name: "policy label differs", pols: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "silver"}}},
		{name: "namespace label matches", nss: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}, nsLabels: map[string]string{"team": "a"}, want: true},
		{name: "namespace label missing", nss: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}},
		{name: "bad selector", pols: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Nope"}}}, wantErrText: "Nope"},
	} {
		f := &v1beta1.LimiterFleet{Spec: v1beta1.LimiterFleetSpec{Policies: &v1beta1.PolicySelection{Selector: tc.pols, NamespaceSelector: tc.nss}}}
		got, err := fleetSelects(f, storedOne(&p), tc.nsLabels)
		if tc.wantErrText != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErrText) {
				t.Errorf("%s: err %v", tc.name, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.name, got, err, tc.want)
		}
	}
}

func TestEnforcedCondition(t *testing.T) {
	p := pol("ns", "p", 0, "d", "k")
	p.Generation = 3
	uid := string(p.UID)
	fleet := func(name string, disabled bool) *v1beta1.LimiterFleet {
		f := &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: "sys", Name: name}}
		if disabled {
			f.Spec.Enforcement = ptr.To(v1beta1.EnforcementDisabled)
		}
		return f
	}
	has := func(gen int64) observe.PodAck {
		return observe.PodAck{Answered: true, Generations: map[string]int64{uid: gen}, Enforcement: "Enabled"}
	}
	off := func(a observe.PodAck) observe.PodAck { a.Enforcement = "Disabled"; return a }
	for _, tc := range []struct {
		name     string
		accepted bool
		fleets   []fleetView
		status   metav1.ConditionStatus
		reason   string
		message  string
	}{
		{name: "not accepted", fleets: nil, status: "False", reason: v1beta1.NotAcceptedReason},
		{name: "no fleet", accepted: true, status: "False", reason: v1beta1.NoFleetReason},
		{name: "all pods have it", accepted: true, fleets: []fleetView{{Fleet: fleet("f", false), Version: "v1", Pods: []observe.PodAck{has(3), has(3)}}},
			status: "True", reason: v1beta1.EnforcedReason},
		{name: "one pod lags", accepted: true, fleets: []fleetView{{Fleet: fleet("f", false), Version: "v2", Pods: []observe.PodAck{has(3), has(2)}}},
			status: "False", reason: v1beta1.SnapshotPendingReason, message: "fleet sys/f: 1/2 pods on snapshot v2"},
		{name: "no ready pods", accepted: true, fleets: []fleetView{{Fleet: fleet("f", false), Version: "v2"}},
			status: "False", reason: v1beta1.SnapshotPendingReason, message: "0/0 pods"},
		{name: "second fleet lags", accepted: true, fleets: []fleetView{
			{Fleet: fleet("f", false), Pods: []observe.PodAck{has(3)}}, {Fleet: fleet("g", false), Version: "v9", Pods: []observe.PodAck{has(3), {Answered: true}}}},
			status: "False", reason: v1beta1.SnapshotPendingReason, message: "fleet sys/g: 1/2"},
		{name: "kill switch", accepted: true, fleets: []fleetView{{Fleet: fleet("f", true), Pods: []observe.PodAck{off(has(3))}}},
			status: "False", reason: v1beta1.EnforcementDisabledReason, message: "Disabled on fleet sys/f"},
		{name: "kill switch not loaded yet", accepted: true, fleets: []fleetView{{Fleet: fleet("f", true), Version: "v3", Pods: []observe.PodAck{has(3), off(has(3))}}},
			status: "False", reason: v1beta1.SnapshotPendingReason, message: "fleet sys/f: 1/2 pods on snapshot v3"},
		{name: "switched back on, a pod still off", accepted: true, fleets: []fleetView{{Fleet: fleet("f", false), Version: "v4", Pods: []observe.PodAck{has(3), off(has(3))}}},
			status: "False", reason: v1beta1.SnapshotPendingReason, message: "fleet sys/f: 1/2 pods on snapshot v4"},
	} {
		c := enforcedCondition(storedOne(&p), tc.accepted, tc.fleets)
		if c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, tc.message) || c.ObservedGeneration != 3 {
			t.Errorf("%s: %+v", tc.name, c)
		}
	}
}

// TestDegradedCondition: Degraded is True while pods report fallbacks
// (StoreUnavailable), and stays True (FallbackDecisions) while the
// enforcement window counts decisions answered by the failure mode.
func TestDegradedCondition(t *testing.T) {
	p := pol("ns", "p", 0, "d", "k")
	fleet := &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: "sys", Name: "f"}}
	down := []fleetView{{Fleet: fleet, Pods: []observe.PodAck{{Answered: true, Degraded: map[string]string{"ns/p": "Open"}}, {Answered: true}}}}
	up := []fleetView{{Fleet: fleet, Pods: []observe.PodAck{{Answered: true}, {Answered: true}}}}
	failingOver := fleet.DeepCopy()
	failingOver.Status.Conditions = []metav1.Condition{{Type: v1beta1.RedisReadyCondition, Status: metav1.ConditionFalse, Reason: v1beta1.NodeUnreachableReason,
		Message: "shard 1: primary f-redis-1-0 lost (last heard from at 01:02:03.400Z, 1.5s ago), no replica serves its slots yet; redis node f-redis-1-0: unreachable"}}
	downFailingOver := []fleetView{{Fleet: failingOver, Pods: down[0].Pods}}
	overBudget := []fleetView{{Fleet: fleet, Pods: []observe.PodAck{{Answered: true, Degraded: map[string]string{"ns/p": "Closed" + observe.BudgetExceededMark}}, {Answered: true}}}}
	openOverBudget := []fleetView{{Fleet: fleet, Pods: []observe.PodAck{{Answered: true, Degraded: map[string]string{"ns/p": "Open" + observe.BudgetExceededMark}}, {Answered: true}}}}
	window := func(open, closed, local int64) *v1alpha1.EnforcementStatus {
		return &v1alpha1.EnforcementStatus{Allowed: ptr.To[int64](9), FailedOpen: ptr.To(open), FailedClosed: ptr.To(closed), LocalFallback: ptr.To(local),
			Window: &metav1.Duration{Duration: 5 * time.Minute}}
	}
	for _, tc := range []struct {
		name     string
		fleets   []fleetView
		enf      *v1alpha1.EnforcementStatus
		status   metav1.ConditionStatus
		reason   string
		messages []string
	}{
		{"no status yet", up, nil, "False", v1beta1.StoreAvailableReason, nil},
		{"no fallback in the window", up, window(0, 0, 0), "False", v1beta1.StoreAvailableReason, nil},
		{"a pod falls back", down, window(0, 0, 0), "True", v1beta1.StoreUnavailableReason, []string{"fleet sys/f: 1/2 pods answer by failureMode Open"}},
		{"one failed open in the window", up, window(1, 0, 0), "True", v1beta1.FallbackDecisionsReason,
			[]string{"in the last 5m0s the store could not answer 1 decisions: 1 failed open (allowed uncounted), 0 failed closed", "decides against the store again"}},
		{"closed and local", up, window(0, 2, 3), "True", v1beta1.FallbackDecisionsReason, []string{"5 decisions", "2 failed closed (denied), 3 decided by the pod's local share"}},
		{"a pod falls back while a primary is lost", downFailingOver, window(0, 0, 0), "True", v1beta1.StoreUnavailableReason,
			[]string{"the store is unavailable (Redis Cluster: shard 1: primary f-redis-1-0 lost (last heard from at 01:02:03.400Z, 1.5s ago), no replica serves its slots yet)"}},
		{"both", down, window(4, 0, 0), "True", v1beta1.StoreUnavailableReason, []string{"1/2 pods answer by failureMode Open", "4 failed open"}},
		{"namespace over its store budget", overBudget, window(0, 7, 0), "True", v1beta1.BudgetExceededReason,
			[]string{"fleet sys/f: 1/2 pods answer by failureMode Closed: namespace ns is over its store budget (spec.tenantBudget.storeCallsPerSecondPerNamespace)", "7 failed closed"}},
		{"an Open policy's namespace over its store budget", openOverBudget, window(0, 0, 7), "True", v1beta1.BudgetExceededReason,
			[]string{"fleet sys/f: 1/2 pods decide against the store's last denials and their share of the limit: namespace ns is over its store budget", "7 decided by the pod's local share"}},
	} {
		p.Status.Enforcement = tc.enf
		c := degradedCondition(storedOne(&p), tc.fleets)
		ok := c.Status == tc.status && c.Reason == tc.reason
		for _, m := range tc.messages {
			ok = ok && strings.Contains(c.Message, m)
		}
		if !ok {
			t.Errorf("%s: %+v", tc.name, c)
		}
	}
}

func TestReadyEndpoints(t *testing.T) {
	slice := func(port *int32, eps ...discoveryv1.Endpoint) discoveryv1.EndpointSlice {
		s := discoveryv1.EndpointSlice{Endpoints: eps}
		if port != nil {
			s.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To(int32(9))}, {Name: ptr.To("http"), Port: port}}
		}
		return s
	}
	ep := func(ready *bool, addrs ...string) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: addrs, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	}
	got := readyEndpoints([]discoveryv1.EndpointSlice{
		slice(ptr.To(int32(8080)), ep(ptr.To(true), "10.0.0.2"), ep(ptr.To(false), "10.0.0.3"), ep(nil, "10.0.0.1")),
		slice(ptr.To(int32(8080)), ep(ptr.To(true), "10.0.0.2")), // the same pod in two slices
		slice(nil, ep(ptr.To(true), "10.0.0.9")),                 // no http port
	}, "http")
	if strings.Join(got, " ") != "10.0.0.1:8080 10.0.0.2:8080" {
		t.Fatalf("got %v", got)
	}
}
