package controllers_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// npOptions is who the operator is in these tests (and in the suite's
// operator): the chart's labels in sluice-system, scraped from monitoring.
var npOptions = resources.NetworkPolicyOptions{
	OperatorNamespace:   "sluice-system",
	OperatorPodLabels:   map[string]string{"app.kubernetes.io/name": "sluice", "app.kubernetes.io/component": "operator"},
	MonitoringNamespace: "monitoring",
}

// TestFleetRendersNetworkPolicies: the operator applies the fleet's
// NetworkPolicies, owned by it, as the builders render them, and the API
// server takes them; a client selector it refuses fails the fleet's
// reconcile, saying so; the Redis policy goes with mode Cluster.
func TestFleetRendersNetworkPolicies(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	f := &v1alpha1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: namespace(t, "netpol"), Name: "edge"},
		Spec: v1alpha1.LimiterFleetSpec{Replicas: ptr.To(int32(0)), Redis: v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisCluster)},
			Clients: []v1alpha1.FleetClient{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "ingress"}}}}}}
	if err := k8s.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteFleet(t, f) })
	rendered := func(name string, want *networkingv1.NetworkPolicy) func() error {
		return func() error {
			got := &networkingv1.NetworkPolicy{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: f.Namespace, Name: name}, got); err != nil {
				return err
			}
			if !metav1.IsControlledBy(got, f) {
				return fmt.Errorf("owners %v", got.OwnerReferences)
			}
			if diff := cmp.Diff(want.Spec, got.Spec); diff != "" {
				return fmt.Errorf("spec (-built +applied):\n%s", diff)
			}
			return nil
		}
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(f), f); err != nil {
		t.Fatal(err)
	}
	// The limiters' egress: the API server's endpoints, as the operator
	// reads them.
	opts := npOptions
	var err error
	if opts.APIServerEndpoints, err = controllers.APIServerEndpoints(ctx, k8s); err != nil || len(opts.APIServerEndpoints) == 0 {
		t.Fatalf("the API server's endpoints: %v %v", opts.APIServerEndpoints, err)
	}
	eventually(t, 30*time.Second, "the limiters' NetworkPolicy", rendered(resources.LimiterNetworkPolicyName(betaOf(f)), resources.BuildLimiterNetworkPolicy(betaOf(f), opts)))
	lim := resources.BuildLimiterNetworkPolicy(betaOf(f), opts)
	if !slices.Contains(lim.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || len(lim.Spec.Egress) != 3 {
		t.Errorf("the limiters' policy: types %v, egress %+v: want DNS, the API server and Redis", lim.Spec.PolicyTypes, lim.Spec.Egress)
	}
	eventually(t, 30*time.Second, "the Redis NetworkPolicy", rendered(resources.RedisNetworkPolicyName(betaOf(f)), resources.BuildRedisNetworkPolicy(betaOf(f), npOptions)))

	// A selector the API server refuses in a NetworkPolicy.
	// kubectl's limiterfleet is v1beta1 (the preferred version): patch in
	// v1alpha1's shape.
	kubectl(t, "-n", f.Namespace, "patch", "limiterfleets.v1alpha1.ratelimit.sluice.dev", f.Name, "--type=merge", "-p",
		`{"spec":{"clients":[{"podSelector":{"matchExpressions":[{"key":"app","operator":"Bogus"}]}}]}}`)
	eventually(t, 30*time.Second, "the fleet reports the refused NetworkPolicy", func() error {
		got := &v1alpha1.LimiterFleet{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(f), got); err != nil {
			return err
		}
		c := condition(got.Status.Conditions, v1beta1.ReadyCondition)
		if c == nil || c.Reason != v1beta1.ReconcileErrorReason || !regexp.MustCompile(`NetworkPolicy edge-limiter.*Bogus`).MatchString(c.Message) {
			return fmt.Errorf("Ready %+v", c)
		}
		return nil
	})

	// Mode None: no Redis pods, no Redis policy.
	kubectl(t, "-n", f.Namespace, "patch", "limiterfleets.v1alpha1.ratelimit.sluice.dev", f.Name, "--type=merge", "-p", `{"spec":{"clients":null,"redis":{"mode":"None"}}}`)
	eventually(t, 30*time.Second, "the Redis NetworkPolicy gone", func() error {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: f.Namespace, Name: resources.RedisNetworkPolicyName(betaOf(f))}, &networkingv1.NetworkPolicy{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(f), f); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the limiters' NetworkPolicy admits the fleet's namespace again",
		rendered(resources.LimiterNetworkPolicyName(betaOf(f)), resources.BuildLimiterNetworkPolicy(betaOf(f), opts)))
}
