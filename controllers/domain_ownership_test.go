package controllers

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

func domain(name string, from v1beta1.FromNamespaces, sel map[string]string) v1beta1.FleetDomain {
	d := v1beta1.FleetDomain{Name: name, AllowedNamespaces: &v1beta1.AllowedNamespaces{From: ptr.To(from)}}
	if sel != nil {
		d.AllowedNamespaces.Selector = &metav1.LabelSelector{MatchLabels: sel}
	}
	return d
}

func domainFleet(ns, name string, domains ...v1beta1.FleetDomain) v1beta1.LimiterFleet {
	return v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name), Generation: 1},
		Spec: v1beta1.LimiterFleetSpec{Domains: domains}}
}

// TestFleetAllows: a listed domain admits the namespaces of its
// allowedNamespaces (Same by default); a fleet that lists no domains
// admits its own namespace in any domain; an unlisted domain admits none.
func TestFleetAllows(t *testing.T) {
	labels := map[string]map[string]string{"pay": {"team": "payments"}, "other": {"team": "other"}, "sys": nil}
	for _, tc := range []struct {
		name   string
		fleet  v1beta1.LimiterFleet
		ns     string
		domain string
		want   bool
		errSub string
	}{
		{name: "no domains: own namespace, any domain", fleet: domainFleet("sys", "f"), ns: "sys", domain: "anything", want: true},
		{name: "no domains: other namespace", fleet: domainFleet("sys", "f"), ns: "pay", domain: "anything"},
		{name: "unlisted domain, own namespace", fleet: domainFleet("sys", "f", domain("a", v1beta1.NamespacesFromAll, nil)), ns: "sys", domain: "b"},
		{name: "Same admits own namespace", fleet: domainFleet("sys", "f", domain("a", v1beta1.NamespacesFromSame, nil)), ns: "sys", domain: "a", want: true},
		{name: "Same refuses others", fleet: domainFleet("sys", "f", domain("a", v1beta1.NamespacesFromSame, nil)), ns: "pay", domain: "a"},
		{name: "default is Same", fleet: domainFleet("sys", "f", v1beta1.FleetDomain{Name: "a"}), ns: "pay", domain: "a"},
		{name: "All", fleet: domainFleet("sys", "f", domain("a", v1beta1.NamespacesFromAll, nil)), ns: "other", domain: "a", want: true},
		{name: "Selector matches", fleet: domainFleet("sys", "f", domain("a", v1beta1.NamespacesFromSelector, map[string]string{"team": "payments"})), ns: "pay", domain: "a", want: true},
		{name: "Selector differs", fleet: domainFleet("sys", "f", domain("a", v1beta1.NamespacesFromSelector, map[string]string{"team": "payments"})), ns: "other", domain: "a"},
		{name: "Selector does not admit the fleet's own namespace for free", fleet: domainFleet("sys", "f", domain("a", v1beta1.NamespacesFromSelector, map[string]string{"team": "payments"})), ns: "sys", domain: "a"},
		{name: "bad selector", fleet: domainFleet("sys", "f", v1beta1.FleetDomain{Name: "a", AllowedNamespaces: &v1beta1.AllowedNamespaces{
			From: ptr.To(v1beta1.NamespacesFromSelector), Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Nope"}}}}}),
			ns: "pay", domain: "a", errSub: "Nope"},
	} {
		p := pol(tc.ns, "p", 0, tc.domain, "k")
		got, err := fleetAllows(&tc.fleet, storedOne(&p), labels[tc.ns])
		if tc.errSub != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errSub) || got {
				t.Errorf("%s: %v %v, want an error with %q", tc.name, got, err, tc.errSub)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.name, got, err, tc.want)
		}
	}
}

// TestDecideAcceptanceDomainOwnership: the two attacks of issue 16 as pure
// verdicts. A tenant squatting another's domain, and a tenant denying all
// of another's domain, are not accepted, whatever their age, and change no
// verdict of the owner; conflicts are decided among the policies one fleet
// allows.
func TestDecideAcceptanceDomainOwnership(t *testing.T) {
	tn := tenancy{
		fleets: []v1beta1.LimiterFleet{
			domainFleet("sys", "shared",
				domain("payments-api", v1beta1.NamespacesFromSelector, map[string]string{"team": "payments"}),
				domain("b-api", v1beta1.NamespacesFromSelector, map[string]string{"team": "b"})),
			domainFleet("tenant-c", "own"), // no domains: tenant-c's policies only
		},
		nsLabels: map[string]map[string]string{"pay": {"team": "payments"}, "tenant-b": {"team": "b"}, "tenant-c": nil},
	}
	squat := pol("tenant-b", "squat", 1, "payments-api", "user_id")
	denyAll := pol("tenant-b", "deny-all", 2, "payments-api", "remote_address")
	denyAll.Spec.Rate.Limit = 1
	all := []v1alpha1.RateLimitPolicy{
		squat, denyAll,
		pol("pay", "charges", 10, "payments-api", "user_id"),
		pol("tenant-b", "own", 11, "b-api", "user_id"),
		// tenant-c's own fleet serves it in any domain, payments-api too:
		// it conflicts with nobody, for no fleet allows both.
		pol("tenant-c", "same-signature-elsewhere", 0, "payments-api", "user_id"),
		pol("tenant-c", "dup-in-c", 20, "payments-api", "user_id"),
	}
	got := decideAcceptance(stored(all), tn)
	want := map[string]string{
		"tenant-b/squat":                    "DomainNotAllowed",
		"tenant-b/deny-all":                 "DomainNotAllowed",
		"pay/charges":                       "Accepted",
		"tenant-b/own":                      "Accepted",
		"tenant-c/same-signature-elsewhere": "Accepted",
		"tenant-c/dup-in-c":                 "Conflict",
	}
	for key, w := range want {
		ns, name, _ := strings.Cut(key, "/")
		v := got[types.NamespacedName{Namespace: ns, Name: name}]
		if v.Reason != w || v.Accepted != (w == "Accepted") {
			t.Errorf("%s: %+v, want %s", key, v, w)
		}
	}
	msg := got[types.NamespacedName{Namespace: "tenant-b", Name: "squat"}].Message
	for _, sub := range []string{`domain "payments-api"`, `namespace "tenant-b"`, "sys/shared", "allowedNamespaces"} {
		if !strings.Contains(msg, sub) {
			t.Errorf("the squatter's message %q lacks %q", msg, sub)
		}
	}
	if m := got[types.NamespacedName{Namespace: "tenant-c", Name: "dup-in-c"}].Message; !strings.Contains(m, "tenant-c/same-signature-elsewhere") {
		t.Errorf("conflict message %q", m)
	}

	// Without any fleet, nothing is allowed, and the message says how a
	// fleet would allow it.
	none := decideAcceptance(stored(all), tenancy{})[types.NamespacedName{Namespace: "pay", Name: "charges"}]
	if none.Accepted || none.Reason != v1beta1.DomainNotAllowedReason || !strings.Contains(none.Message, "spec.domains") {
		t.Errorf("no fleet: %+v", none)
	}
	// A fleet being deleted allows nothing.
	gone := tn
	gone.fleets = []v1beta1.LimiterFleet{tn.fleets[0]}
	gone.fleets[0].DeletionTimestamp = ptr.To(metav1.Now())
	if v := decideAcceptance(stored(all), gone)[types.NamespacedName{Namespace: "pay", Name: "charges"}]; v.Accepted {
		t.Errorf("a deleted fleet still allows: %+v", v)
	}
}

// TestVerdictCacheFollowsTenancy: the cached verdicts change when a
// fleet's spec or a namespace's labels change, not only the policies.
func TestVerdictCacheFollowsTenancy(t *testing.T) {
	var c verdictCache
	pols := []v1alpha1.RateLimitPolicy{pol("pay", "charges", 0, "payments-api", "user_id")}
	key := types.NamespacedName{Namespace: "pay", Name: "charges"}
	fleet := domainFleet("sys", "f", domain("payments-api", v1beta1.NamespacesFromSelector, map[string]string{"team": "payments"}))
	tn := tenancy{fleets: []v1beta1.LimiterFleet{fleet}, nsLabels: map[string]map[string]string{"pay": {"team": "x"}}}
	if c.get("d", stored(pols), tn)[key].Accepted {
		t.Fatal("accepted before the namespace has the label")
	}
	tn.nsLabels = map[string]map[string]string{"pay": {"team": "payments"}}
	if !c.get("d", stored(pols), tn)[key].Accepted {
		t.Fatal("not accepted once the namespace has the label")
	}
	fleet.Spec.Domains = nil
	fleet.Generation = 2
	tn.fleets = []v1beta1.LimiterFleet{fleet}
	if c.get("d", stored(pols), tn)[key].Accepted {
		t.Fatal("still accepted once the fleet lists no domains")
	}
}
