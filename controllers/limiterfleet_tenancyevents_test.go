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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers"
)

// tenancyWorld creates fleets and policies for the event-map tests, each
// deleted when the test ends.
type tenancyWorld struct {
	t   *testing.T
	ctx context.Context
}

func (w tenancyWorld) fleet(ns, name string, domains ...v1alpha1.FleetDomain) *v1alpha1.LimiterFleet {
	w.t.Helper()
	f := &v1alpha1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.LimiterFleetSpec{Replicas: ptr.To(int32(0)), Domains: domains}}
	if err := k8s.Create(w.ctx, f); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { deleteFleet(w.t, f) })
	return f
}

func (w tenancyWorld) policy(ns, name, domain string) *v1alpha1.RateLimitPolicy {
	w.t.Helper()
	p := &v1alpha1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.RateLimitPolicySpec{Domain: domain, Descriptors: []v1alpha1.Descriptor{{Key: "user"}},
			Rate: v1alpha1.Rate{Limit: 10, Period: metav1.Duration{Duration: time.Minute}}}}
	if err := k8s.Create(w.ctx, p); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = k8s.Delete(context.Background(), p) })
	return p
}

func (w tenancyWorld) namespaces(labels map[string]map[string]string) {
	w.t.Helper()
	for ns, l := range labels {
		if err := k8s.Create(w.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: l}}); err != nil {
			w.t.Fatal(err)
		}
	}
}

func allowAll(name string) v1alpha1.FleetDomain {
	return v1alpha1.FleetDomain{Name: name, AllowedNamespaces: &v1alpha1.AllowedNamespaces{From: ptr.To(v1alpha1.NamespacesFromAll)}}
}

func allowSelected(name string, labels map[string]string) v1alpha1.FleetDomain {
	return v1alpha1.FleetDomain{Name: name, AllowedNamespaces: &v1alpha1.AllowedNamespaces{From: ptr.To(v1alpha1.NamespacesFromSelector),
		Selector: &metav1.LabelSelector{MatchLabels: labels}}}
}

func requestNames(reqs []reconcile.Request) string {
	out := make([]string, 0, len(reqs))
	for _, r := range reqs {
		out = append(out, r.String())
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// A fleet's spec event reaches only itself and the fleets that may serve
// a domain it may serve (the domains it lists, or, listing none, those
// used in its namespace), of the old and the new spec; a namespace's label
// event only the fleets that may serve a domain used in that namespace,
// whether its old or new labels match their selectors. Not every fleet.
func TestFleetAndNamespaceEventsReachTheirFleetsOnly(t *testing.T) {
	needSuite(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := tenancyWorld{t: t, ctx: ctx}
	w.namespaces(map[string]map[string]string{"tev-a": nil, "tev-b": {"tev-team": "b"}, "tev-c": nil, "tev-sys": nil})
	listsD1 := w.fleet("tev-sys", "lists-d1", allowAll("tev-d1"))
	w.fleet("tev-sys", "lists-d2", allowSelected("tev-d2", map[string]string{"tev-team": "b"}))
	w.fleet("tev-sys", "lists-d4", allowAll("tev-d4")) // no policy of tev-d4
	ownA := w.fleet("tev-a", "own-a")
	ownB := w.fleet("tev-b", "own-b")
	ownC := w.fleet("tev-c", "own-c") // no policy in tev-c
	w.policy("tev-a", "p1", "tev-d1")
	w.policy("tev-b", "p2", "tev-d2")
	w.policy("tev-b", "p3", "tev-d3")

	c := indexedClient(ctx, t, controllers.IndexPolicies, controllers.IndexFleets)
	fleetSpec, nsLabels := controllers.FleetMaps(c)
	// An update's new fleet: listsD1 moved from tev-d1 to tev-d4; ownA
	// from its namespace's domains to tev-d2.
	moved := func(f *v1alpha1.LimiterFleet, domains ...v1alpha1.FleetDomain) *v1beta1.LimiterFleet {
		f = f.DeepCopy()
		f.Spec.Domains = domains
		return betaOf(f)
	}
	movedD1, movedA := moved(listsD1, allowAll("tev-d4")), moved(ownA, allowAll("tev-d2"))
	nsObj := func(name string, labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	for _, tc := range []struct {
		what string
		got  func() []reconcile.Request
		want string
	}{
		{"a fleet listing a domain", func() []reconcile.Request { return fleetSpec(ctx, betaOf(listsD1)) },
			"tev-a/own-a tev-sys/lists-d1"},
		{"a fleet moving to another domain", func() []reconcile.Request { return fleetSpec(ctx, betaOf(listsD1), movedD1) },
			"tev-a/own-a tev-sys/lists-d1 tev-sys/lists-d4"},
		{"a fleet listing none", func() []reconcile.Request { return fleetSpec(ctx, betaOf(ownB)) },
			"tev-b/own-b tev-sys/lists-d2"},
		{"a fleet listing none, in a namespace without policies", func() []reconcile.Request { return fleetSpec(ctx, betaOf(ownC)) },
			"tev-c/own-c"},
		{"a fleet listing none that lists a domain", func() []reconcile.Request { return fleetSpec(ctx, betaOf(ownA), movedA) },
			"tev-a/own-a tev-b/own-b tev-sys/lists-d1 tev-sys/lists-d2"},
		{"a namespace with a policy", func() []reconcile.Request { return nsLabels(ctx, nsObj("tev-a", nil)) },
			"tev-a/own-a tev-sys/lists-d1"},
		{"a namespace leaving a fleet's selector", func() []reconcile.Request {
			return nsLabels(ctx, nsObj("tev-b", map[string]string{"tev-team": "b"}), nsObj("tev-b", map[string]string{"tev-team": "x"}))
		}, "tev-b/own-b tev-sys/lists-d2"},
		{"a namespace without policies", func() []reconcile.Request { return nsLabels(ctx, nsObj("tev-c", map[string]string{"x": "y"})) },
			""},
	} {
		eventually(t, 10*time.Second, tc.what, func() error {
			if got := requestNames(tc.got()); got != tc.want {
				return fmt.Errorf("%s: the event reaches %q, want %q", tc.what, got, tc.want)
			}
			return nil
		})
	}
}

// A namespace's label change still makes the fleets whose pass reads it
// follow: a namespace that leaves a fleet's allowedNamespaces selector, or
// its spec.policies namespaceSelector, leaves its snapshot, and comes back
// when relabelled. (The policy controller's status writes, which a policy
// event carries to the same fleets, follow the change too: this guards the
// behaviour; TestFleetAndNamespaceEventsReachTheirFleetsOnly the map.)
func TestNamespaceLabelsMoveFleetSnapshots(t *testing.T) {
	needSuite(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := tenancyWorld{t: t, ctx: ctx}
	member := map[string]string{"nsl-team": "a", "nsl-env": "prod"}
	w.namespaces(map[string]map[string]string{"nsl-a": member, "nsl-sys": nil})
	allowing := w.fleet("nsl-sys", "allowing", allowSelected("nsl-d1", map[string]string{"nsl-team": "a"}))
	selecting := &v1alpha1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: "nsl-sys", Name: "selecting"},
		Spec: v1alpha1.LimiterFleetSpec{Replicas: ptr.To(int32(0)), Domains: []v1alpha1.FleetDomain{allowAll("nsl-d2")},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"nsl-env": "prod"}}}}
	if err := k8s.Create(ctx, selecting); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteFleet(t, selecting) })
	w.policy("nsl-a", "p1", "nsl-d1")
	w.policy("nsl-a", "p2", "nsl-d2")

	snapshots := func(what string, want int32) {
		t.Helper()
		eventually(t, 30*time.Second, what, func() error {
			for _, fleet := range []*v1alpha1.LimiterFleet{allowing, selecting} {
				f := &v1alpha1.LimiterFleet{}
				if err := k8s.Get(ctx, client.ObjectKeyFromObject(fleet), f); err != nil {
					return err
				}
				if f.Status.Snapshot == nil || f.Status.Snapshot.Policies != want {
					return fmt.Errorf("fleet %s: snapshot %+v, want %d policies", fleet.Name, f.Status.Snapshot, want)
				}
			}
			return nil
		})
	}
	relabel := func(labels map[string]string) {
		t.Helper()
		ns := &corev1.Namespace{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: "nsl-a"}, ns); err != nil {
			t.Fatal(err)
		}
		ns.Labels = labels
		if err := k8s.Update(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	snapshots("each fleet serves its policy", 1)
	relabel(map[string]string{"nsl-team": "b"})
	snapshots("the namespace left both fleets", 0)
	relabel(member)
	snapshots("the namespace came back to both fleets", 1)
}
