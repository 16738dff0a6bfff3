package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers"
)

// A policy event reaches only the fleets that may serve a policy of its
// domain (a policy decides the acceptance of its whole domain): those that
// list the domain, those that list none in a namespace with a policy of
// the domain, and those its status.fleets names (it may have left their
// domain). Not every fleet in the cluster.
func TestPolicyEventsReachTheirFleetsOnly(t *testing.T) {
	needSuite(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, ns := range []string{"pev-a", "pev-b"} {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	all := &v1alpha1.AllowedNamespaces{From: ptr.To(v1alpha1.NamespacesFromAll)}
	fleet := func(ns, name string, domains ...string) *v1alpha1.LimiterFleet {
		t.Helper()
		f := &v1alpha1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.LimiterFleetSpec{Replicas: ptr.To(int32(0))}}
		for _, d := range domains {
			f.Spec.Domains = append(f.Spec.Domains, v1alpha1.FleetDomain{Name: d, AllowedNamespaces: all})
		}
		if err := k8s.Create(ctx, f); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteFleet(t, f) })
		return f
	}
	fleet("pev-a", "lists-d1", "pev-d1")
	fleet("pev-a", "own-a")
	fleet("pev-b", "own-b")
	other := fleet("pev-b", "lists-d2", "pev-d2")
	policy := func(ns, name, domain string) *v1alpha1.RateLimitPolicy {
		t.Helper()
		p := &v1alpha1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.RateLimitPolicySpec{Domain: domain, Descriptors: []v1alpha1.Descriptor{{Key: "user"}},
				Rate: v1alpha1.Rate{Limit: 10, Period: metav1.Duration{Duration: time.Minute}}}}
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), p) })
		return p
	}
	d1 := policy("pev-b", "d1", "pev-d1")
	d3a := policy("pev-a", "d3a", "pev-d3")
	d3b := policy("pev-b", "d3b", "pev-d3")

	// The fleet controller's reads, through a cache with its indexes.
	c := indexedClient(ctx, t, controllers.IndexPolicies, controllers.IndexFleets)
	fleetsOf := controllers.FleetsOfPolicy(c)
	names := func(p *v1beta1.RateLimitPolicy) string {
		var out []string
		for _, r := range fleetsOf(ctx, p) {
			if strings.HasPrefix(r.Namespace, "pev-") {
				out = append(out, r.String())
			}
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	served := storedOne(d3b)
	served.Status.Fleets = []v1beta1.FleetStatus{{Namespace: other.Namespace, Name: other.Name}}
	for _, tc := range []struct {
		what   string
		policy *v1beta1.RateLimitPolicy
		want   string
	}{
		{"a policy of a listed domain", storedOne(d1), "pev-a/lists-d1 pev-b/own-b"},
		{"a domain used in two namespaces", storedOne(d3a), "pev-a/own-a pev-b/own-b"},
		{"a policy a fleet served", served, "pev-a/own-a pev-b/lists-d2 pev-b/own-b"},
	} {
		eventually(t, 10*time.Second, tc.what, func() error {
			if got := names(tc.policy); got != tc.want {
				return fmt.Errorf("%s: the event reaches %q, want %q", tc.what, got, tc.want)
			}
			return nil
		})
	}
}
