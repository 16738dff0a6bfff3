package controllers

import (
	"context"
	"fmt"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete

// apiServerRecheck is how often the operator reads the API server's
// endpoints again for the limiters' egress.
const apiServerRecheck = 5 * time.Minute

// apiServerEndpoints are the ready ip:port endpoints of the default/kubernetes
// Service (its EndpointSlices), read through the API reader (the cache
// holds no such slice) at most every apiServerRecheck; none when it has
// none.
func (r *LimiterFleetReconciler) apiServerEndpoints(ctx context.Context) ([]string, error) {
	r.apiServerMu.Lock()
	defer r.apiServerMu.Unlock()
	if !r.apiServerRead.IsZero() && time.Since(r.apiServerRead) < apiServerRecheck {
		return r.apiServer, nil
	}
	eps, err := APIServerEndpoints(ctx, r.secretReader())
	if err != nil {
		return nil, err
	}
	r.apiServer, r.apiServerRead = eps, time.Now()
	return eps, nil
}

// APIServerEndpoints lists the ready ip:port endpoints of the
// default/kubernetes Service, sorted.
func APIServerEndpoints(ctx context.Context, c client.Reader) ([]string, error) {
	var slices discoveryv1.EndpointSliceList
	if err := c.List(ctx, &slices, client.InNamespace(metav1.NamespaceDefault),
		client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}); err != nil {
		return nil, fmt.Errorf("reading the API server's endpoints: %w", err)
	}
	return readyEndpoints(slices.Items, "https"), nil
}

// reconcileNetworkPolicies applies the fleet's NetworkPolicies, owned by
// the fleet: the limiters' always, the Redis pods' in mode Cluster (and
// removes it in the other modes). It does nothing unless the operator knows
// who it is (NetworkPolicyOptions.Enabled).
func (r *LimiterFleetReconciler) reconcileNetworkPolicies(ctx context.Context, s *fleetScope) error {
	if !r.NetworkPolicies.Enabled() {
		return nil
	}
	opts := r.NetworkPolicies
	var err error
	if opts.APIServerEndpoints, err = r.apiServerEndpoints(ctx); err != nil {
		return err
	}
	limiters := resources.BuildLimiterNetworkPolicy(s.fleet, opts)
	if err := r.children.apply(ctx, s.fleet, limiters); err != nil {
		return fmt.Errorf("applying NetworkPolicy %s: %w", limiters.Name, err)
	}
	redis := resources.BuildRedisNetworkPolicy(s.fleet, r.NetworkPolicies)
	if s.fleet.Spec.EffectiveStoreType() == v1beta1.StoreCluster {
		if err := r.children.apply(ctx, s.fleet, redis); err != nil {
			return fmt.Errorf("applying NetworkPolicy %s: %w", redis.Name, err)
		}
		return nil
	}
	existing := &networkingv1.NetworkPolicy{}
	switch err := r.Get(ctx, client.ObjectKeyFromObject(redis), existing); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	if !metav1.IsControlledBy(existing, s.fleet) {
		return nil // not the fleet's: leave it
	}
	return client.IgnoreNotFound(r.Delete(ctx, existing))
}
