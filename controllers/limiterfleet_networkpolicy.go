package controllers

import (
	"context"
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete

// reconcileNetworkPolicies applies the fleet's NetworkPolicies, owned by
// the fleet: the limiters' always, the Redis pods' in mode Cluster (and
// removes it in the other modes). It does nothing unless the operator knows
// who it is (NetworkPolicyOptions.Enabled).
func (r *LimiterFleetReconciler) reconcileNetworkPolicies(ctx context.Context, s *fleetScope) error {
	if !r.NetworkPolicies.Enabled() {
		return nil
	}
	limiters := BuildLimiterNetworkPolicy(s.fleet, r.NetworkPolicies)
	if err := r.apply(ctx, s.fleet, limiters); err != nil {
		return fmt.Errorf("applying NetworkPolicy %s: %w", limiters.Name, err)
	}
	redis := BuildRedisNetworkPolicy(s.fleet, r.NetworkPolicies)
	if s.fleet.Spec.EffectiveRedisMode() == v1alpha1.RedisCluster {
		if err := r.apply(ctx, s.fleet, redis); err != nil {
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
