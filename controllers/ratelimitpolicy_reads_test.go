package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers"
)

// listRecorder is the real client, over the real cache, recording what
// each List asked for.
type listRecorder struct {
	client.Client
	mu    sync.Mutex
	lists []string
}

func (l *listRecorder) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := client.ListOptions{}
	o.ApplyOptions(opts)
	what := fmt.Sprintf("%T", list)
	if o.Namespace != "" {
		what += " in " + o.Namespace
	}
	if o.FieldSelector != nil {
		what += " by " + strings.ReplaceAll(o.FieldSelector.String(), "\x00", "")
	}
	l.mu.Lock()
	l.lists = append(l.lists, what)
	l.mu.Unlock()
	return l.Client.List(ctx, list, opts...)
}

func (l *listRecorder) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lists
	l.lists = nil
	slices.Sort(out)
	return out
}

// A policy's pass reads its domain's tenancy alone, through the indexes:
// the policies of its domain, the fleets that list the domain, those that
// list none in the namespaces of the domain's policies, and those
// namespaces (by name): no list of every fleet or namespace. Its verdict
// and fleets are those the whole cluster's fleets and namespaces give.
func TestPolicyPassReadsItsDomainOnly(t *testing.T) {
	needSuite(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := tenancyWorld{t: t, ctx: ctx}
	w.namespaces(map[string]map[string]string{"rp-a": {"rp-team": "a"}, "rp-b": {"rp-team": "b"}, "rp-c": nil, "rp-sys": nil})
	w.fleet("rp-sys", "lists-d1", allowSelected("rp-d1", map[string]string{"rp-team": "a"}))
	onlyB := &v1alpha1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: "rp-sys", Name: "lists-d1-b"},
		Spec: v1alpha1.LimiterFleetSpec{Replicas: ptr.To(int32(0)), Domains: []v1alpha1.FleetDomain{allowAll("rp-d1")},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"rp-team": "b"}}}}
	if err := k8s.Create(ctx, onlyB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteFleet(t, onlyB) })
	w.fleet("rp-a", "own-a")
	w.fleet("rp-c", "own-c")                         // no policy in rp-c
	w.fleet("rp-sys", "lists-d2", allowAll("rp-d2")) // no policy of rp-d2
	p1 := w.policy("rp-a", "p1", "rp-d1")
	p2 := w.policy("rp-b", "p2", "rp-d1") // same descriptors as p1, in lists-d1-b too
	p3 := &v1alpha1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "rp-b", Name: "p3"},
		Spec: v1alpha1.RateLimitPolicySpec{Domain: "rp-d1", Descriptors: []v1alpha1.Descriptor{{Key: "other"}},
			Rate: v1alpha1.Rate{Limit: 10, Period: metav1.Duration{Duration: time.Minute}}}}
	if err := k8s.Create(ctx, p3); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), p3) })
	p4 := w.policy("rp-b", "p4", "rp-d3") // no fleet lists rp-d3

	rec := &listRecorder{Client: indexedClient(ctx, t, controllers.IndexPolicies, controllers.IndexFleets)}
	pass := controllers.PolicyPass(rec)
	for _, tc := range []struct {
		policy *v1alpha1.RateLimitPolicy
		reason string
		fleets []string
	}{
		{p1, v1beta1.AcceptedReason, []string{"rp-a/own-a", "rp-sys/lists-d1"}},
		{p2, v1beta1.ConflictReason, nil},
		{p3, v1beta1.AcceptedReason, []string{"rp-sys/lists-d1-b"}},
		{p4, v1beta1.DomainNotAllowedReason, nil},
	} {
		key := client.ObjectKeyFromObject(tc.policy)
		eventually(t, 30*time.Second, "the pass of "+key.String(), func() error {
			reason, fleets, err := pass(ctx, key)
			if err != nil {
				return err
			}
			if reason != tc.reason || !slices.Equal(fleets, tc.fleets) {
				return fmt.Errorf("%s: the pass reads %s, fleets %v; want %s, %v", key, reason, fleets, tc.reason, tc.fleets)
			}
			cReason, cFleets, err := controllers.ClusterPass(ctx, rec.Client, key)
			if err != nil {
				return err
			}
			if reason != cReason || !slices.Equal(fleets, cFleets) {
				return fmt.Errorf("%s: the pass reads %s, fleets %v; the whole cluster gives %s, %v", key, reason, fleets, cReason, cFleets)
			}
			return nil
		})
	}
	rec.take()
	// One pass of each domain, its List calls named.
	for _, tc := range []struct {
		key  types.NamespacedName
		want []string
	}{
		{client.ObjectKeyFromObject(p1), []string{
			"*v1beta1.LimiterFleetList by spec.domains.name=rp-d1",
			"*v1beta1.LimiterFleetList in rp-a by spec.domains.name=own-namespace",
			"*v1beta1.LimiterFleetList in rp-b by spec.domains.name=own-namespace",
			"*v1beta1.RateLimitPolicyList by spec.domain=rp-d1"}},
		{client.ObjectKeyFromObject(p4), []string{
			"*v1beta1.LimiterFleetList by spec.domains.name=rp-d3",
			"*v1beta1.LimiterFleetList in rp-b by spec.domains.name=own-namespace",
			"*v1beta1.RateLimitPolicyList by spec.domain=rp-d3"}},
	} {
		if _, _, err := pass(ctx, tc.key); err != nil {
			t.Fatal(err)
		}
		if got := rec.take(); !slices.Equal(got, tc.want) {
			t.Errorf("the pass of %s lists\n  %s\nwant\n  %s", tc.key, strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
		}
	}
	// The operator's own passes agree.
	for _, p := range []*v1alpha1.RateLimitPolicy{p1, p2, p3, p4} {
		key := client.ObjectKeyFromObject(p)
		reason, fleets, err := pass(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "the operator's status of "+key.String(), func() error {
			got := &v1beta1.RateLimitPolicy{}
			if err := k8s.Get(ctx, key, got); err != nil {
				return err
			}
			var names []string
			for _, f := range got.Status.Fleets {
				names = append(names, f.Namespace+"/"+f.Name)
			}
			c := condition(got.Status.Conditions, v1beta1.AcceptedCondition)
			if c == nil || c.Reason != reason || !slices.Equal(names, fleets) {
				return fmt.Errorf("%s: Accepted %+v, fleets %v; want %s, %v", key, c, names, reason, fleets)
			}
			return nil
		})
	}
}

// A fleet's spec event reaches only the policies of the domains it lists,
// or, listing none, of those used in its namespace; a namespace's label
// event only the policies of the domains used in it: those whose verdict
// (or fleets) the change may move. Not every policy.
func TestTenancyEventsReachTheirPoliciesOnly(t *testing.T) {
	needSuite(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := tenancyWorld{t: t, ctx: ctx}
	w.namespaces(map[string]map[string]string{"ptm-a": nil, "ptm-b": nil, "ptm-c": nil, "ptm-sys": nil})
	listsD1 := w.fleet("ptm-sys", "lists-d1", allowAll("ptm-d1"))
	ownA := w.fleet("ptm-a", "own-a")
	w.policy("ptm-a", "p1", "ptm-d1")
	w.policy("ptm-b", "p2", "ptm-d1")
	w.policy("ptm-a", "p3", "ptm-d2")
	w.policy("ptm-c", "p4", "ptm-d3")

	fleetSpec, nsLabels := controllers.PolicyTenancyMaps(indexedClient(ctx, t, controllers.IndexPolicies))
	nsObj := func(name string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	for _, tc := range []struct {
		what string
		got  func() []reconcile.Request
		want string
	}{
		{"a fleet listing a domain", func() []reconcile.Request { return fleetSpec(ctx, betaOf(listsD1)) }, "ptm-a/p1 ptm-b/p2"},
		{"a fleet listing none", func() []reconcile.Request { return fleetSpec(ctx, betaOf(ownA)) }, "ptm-a/p1 ptm-a/p3 ptm-b/p2"},
		{"a namespace with a policy", func() []reconcile.Request { return nsLabels(ctx, nsObj("ptm-b")) }, "ptm-a/p1 ptm-b/p2"},
		{"a namespace alone in its domain", func() []reconcile.Request { return nsLabels(ctx, nsObj("ptm-c")) }, "ptm-c/p4"},
		{"a namespace without policies", func() []reconcile.Request { return nsLabels(ctx, nsObj("ptm-sys")) }, ""},
	} {
		eventually(t, 10*time.Second, tc.what, func() error {
			if got := requestNames(tc.got()); got != tc.want {
				return fmt.Errorf("%s: the event reaches %q, want %q", tc.what, got, tc.want)
			}
			return nil
		})
	}
}
