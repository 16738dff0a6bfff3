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
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers"
)

// A fleet event, and a pod acknowledgement (which names its fleet alone),
// reach only the policies whose status that fleet decides: those it serves
// (it allows their domain to their namespace, and selects them by policy
// and namespace labels), and those whose status.fleets names it (it served
// them). Not every policy in the cluster, nor one its selectors pick in a
// domain it does not serve there.
func TestFleetEventsReachTheirPoliciesOnly(t *testing.T) {
	needSuite(t)
	// The operator would rewrite status.fleets, which this test sets.
	stopOperator()
	t.Cleanup(func() {
		if err := startOperator(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, ns := range []string{"events-prod", "events-dev"} {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"events-env": ns}}}
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	team := func(t string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"events-team": t}}
	}
	// a serves team a in events-prod, its own namespace; b serves team b
	// in the domains it lists, everywhere.
	a := &v1alpha1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: "events-prod", Name: "a"},
		Spec: v1alpha1.LimiterFleetSpec{PolicySelector: team("a"),
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"events-env": "events-prod"}}}}
	b := &v1alpha1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: "events-dev", Name: "b"},
		Spec: v1alpha1.LimiterFleetSpec{PolicySelector: team("b"),
			Domains: []v1alpha1.FleetDomain{allowAll("events-prod-b"), allowAll("events-dev-b"), allowAll("events-dev-a")}}}
	for _, f := range []*v1alpha1.LimiterFleet{a, b} {
		if err := k8s.Create(ctx, f); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteFleet(t, f) })
	}
	policy := func(ns, name, team string, servedBy *v1alpha1.LimiterFleet) {
		t.Helper()
		p := &v1alpha1.RateLimitPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.RateLimitPolicySpec{Domain: "events-" + name, Descriptors: []v1alpha1.Descriptor{{Key: "user"}},
				Rate: v1alpha1.Rate{Limit: 10, Period: metav1.Duration{Duration: time.Minute}}},
		}
		if team != "" {
			p.Labels = map[string]string{"events-team": team}
		}
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), p) })
		if servedBy != nil {
			if err := controllers.ApplyConditions(ctx, k8s, storedOne(p), &v1alpha1.RateLimitPolicyStatus{
				Fleets: []v1alpha1.FleetStatus{{Namespace: servedBy.Namespace, Name: servedBy.Name}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	policy("events-prod", "prod-a", "a", nil)
	policy("events-prod", "prod-b", "b", nil)
	policy("events-prod", "prod-b2", "b", nil)  // team b, but in a domain b does not list
	policy("events-dev", "dev-a", "a", nil)     // team a, but not in a namespace a serves; b lists its domain
	policy("events-dev", "dev-b", "b", b)       // selected by b, and served by it
	policy("events-dev", "dev-none", "", a)     // selected by none; a served it before
	policy("events-dev", "dev-other", "c", nil) // selected by none, never served

	// The policy controller's reads, through a cache with its indexes.
	c := indexedClient(ctx, t, controllers.IndexPolicies)
	fleetEvent, ackEvent := controllers.PolicyMaps(c)
	// This test's policies a map gives; other tests' policies are left out.
	names := func(m handler.MapFunc, obj client.Object) string {
		var out []string
		for _, r := range m(ctx, obj) {
			if strings.HasPrefix(r.Namespace, "events-") {
				out = append(out, r.String())
			}
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	// The operator's events carry v1beta1 fleets.
	stub := func(f *v1alpha1.LimiterFleet) *v1beta1.LimiterFleet {
		return &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: f.Name}}
	}
	want := map[string]string{
		"a": "events-dev/dev-none events-prod/prod-a",
		"b": "events-dev/dev-b events-prod/prod-b",
	}
	eventually(t, 10*time.Second, "the cache sees the statuses", func() error {
		if got := names(fleetEvent, betaOf(a)); got != want["a"] {
			return fmt.Errorf("fleet a's event reaches %q, want %q", got, want["a"])
		}
		return nil
	})
	for _, f := range []*v1alpha1.LimiterFleet{a, b} {
		if got := names(fleetEvent, betaOf(f)); got != want[f.Name] {
			t.Errorf("fleet %s's event reaches %q, want %q", f.Name, got, want[f.Name])
		}
		if got := names(ackEvent, stub(f)); got != want[f.Name] {
			t.Errorf("an acknowledgement from fleet %s's pods reaches %q, want %q", f.Name, got, want[f.Name])
		}
	}

	// Once b is gone, its pods' last acknowledgements reach the policies
	// it served.
	if err := k8s.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the cache sees fleet b gone", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(b), &v1beta1.LimiterFleet{}); err == nil {
			return fmt.Errorf("fleet b still cached")
		}
		return nil
	})
	if got := names(ackEvent, stub(b)); got != "events-dev/dev-b" {
		t.Errorf("an acknowledgement from deleted fleet b's pods reaches %q, want the policy it served", got)
	}
}

// indexedClient reads through a new cache of the suite's API server that
// holds the given controllers' indexes, synced; the cache stops with ctx.
func indexedClient(ctx context.Context, t *testing.T, indexes ...func(context.Context, client.FieldIndexer) error) client.Client {
	t.Helper()
	informers, err := cache.New(cfg, cache.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	for _, index := range indexes {
		if err := index(ctx, informers); err != nil {
			t.Fatal(err)
		}
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: informers}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
