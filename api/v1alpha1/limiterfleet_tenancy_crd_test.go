package v1alpha1_test

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// The rules of spec.domains and spec.clients, run by TestFleetCRDRejects
// and TestFleetCRDAccepts with the others.
func init() {
	fleetBadCases = append(fleetBadCases, tenancyBadCases...)
	fleetGoodCases = append(fleetGoodCases, tenancyGoodCases...)
}

var teamSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "payments"}}

var tenancyBadCases = []fleetBadCase{
	{
		name: "domains: Selector without a selector",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Domains = []v1alpha1.FleetDomain{{Name: "payments-api", AllowedNamespaces: &v1alpha1.AllowedNamespaces{From: ptr.To(v1alpha1.NamespacesFromSelector)}}}
		},
		field:   "spec.domains[0].allowedNamespaces",
		message: "allowedNamespaces.selector is required when from is Selector, and only allowed then",
	},
	{
		name: "domains: a selector with All",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Domains = []v1alpha1.FleetDomain{{Name: "payments-api", AllowedNamespaces: &v1alpha1.AllowedNamespaces{From: ptr.To(v1alpha1.NamespacesFromAll), Selector: teamSelector}}}
		},
		field:   "spec.domains[0].allowedNamespaces",
		message: "allowedNamespaces.selector is required when from is Selector, and only allowed then",
	},
	{
		name: "domains: a selector with the default from (Same)",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Domains = []v1alpha1.FleetDomain{{Name: "payments-api", AllowedNamespaces: &v1alpha1.AllowedNamespaces{Selector: teamSelector}}}
		},
		field:   "spec.domains[0].allowedNamespaces",
		message: "allowedNamespaces.selector is required when from is Selector, and only allowed then",
	},
	{
		name: "domains: an unknown from",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Domains = []v1alpha1.FleetDomain{{Name: "payments-api", AllowedNamespaces: &v1alpha1.AllowedNamespaces{From: ptr.To(v1alpha1.FromNamespaces("Anyone"))}}}
		},
		field:   "spec.domains[0].allowedNamespaces.from",
		message: `supported values: "Same", "All", "Selector"`,
	},
	{
		name: "domains: the same name twice",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Domains = []v1alpha1.FleetDomain{{Name: "payments-api"}, {Name: "payments-api"}}
		},
		field:   "spec.domains[1]",
		message: "Duplicate value",
	},
	{
		name:    "domains: an empty name",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Domains = []v1alpha1.FleetDomain{{Name: ""}} },
		field:   "spec.domains[0].name",
		message: "should be at least 1 chars long",
	},
	{
		name: "domains: more than 64",
		typed: func(f *v1alpha1.LimiterFleet) {
			for i := range v1alpha1.MaxFleetDomains + 1 {
				f.Spec.Domains = append(f.Spec.Domains, v1alpha1.FleetDomain{Name: "d" + strings.Repeat("x", i)})
			}
		},
		field:   "spec.domains",
		message: "must have at most 64 items",
	},
	{
		name:    "clients: a client with no selector",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Clients = []v1alpha1.FleetClient{{}} },
		field:   "spec.clients[0]",
		message: "a client needs a namespaceSelector, a podSelector or both",
	},
	{
		name: "clients: more than 16",
		typed: func(f *v1alpha1.LimiterFleet) {
			for range v1alpha1.MaxFleetClients + 1 {
				f.Spec.Clients = append(f.Spec.Clients, v1alpha1.FleetClient{PodSelector: teamSelector})
			}
		},
		field:   "spec.clients",
		message: "must have at most 16 items",
	},
}

var tenancyGoodCases = []fleetGoodCase{
	{name: "domains of every kind", typed: func(f *v1alpha1.LimiterFleet) {
		f.Spec.Domains = []v1alpha1.FleetDomain{
			{Name: "same-api", AllowedNamespaces: &v1alpha1.AllowedNamespaces{From: ptr.To(v1alpha1.NamespacesFromSame)}},
			{Name: "all-api", AllowedNamespaces: &v1alpha1.AllowedNamespaces{From: ptr.To(v1alpha1.NamespacesFromAll)}},
			{Name: "payments-api", AllowedNamespaces: &v1alpha1.AllowedNamespaces{From: ptr.To(v1alpha1.NamespacesFromSelector), Selector: teamSelector}},
			{Name: "everyone-by-selector", AllowedNamespaces: &v1alpha1.AllowedNamespaces{From: ptr.To(v1alpha1.NamespacesFromSelector), Selector: &metav1.LabelSelector{}}},
		}
	}},
	{name: "clients by namespace, by pod, by both", typed: func(f *v1alpha1.LimiterFleet) {
		f.Spec.Clients = []v1alpha1.FleetClient{
			{NamespaceSelector: teamSelector},
			{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "envoy"}}},
			{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "gateway"}}},
		}
	}},
}
