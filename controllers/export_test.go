package controllers

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The two writers of a RateLimitPolicy's status, for the tests of package
// controllers_test that run them against the API server.
var (
	ApplyConditions  = applyConditions
	ApplyEnforcement = applyEnforcement
	// OwnsUnwrittenCondition reports whether the policy controller owns,
	// in a policy's managedFields, a condition it does not write.
	OwnsUnwrittenCondition = func(entries []metav1.ManagedFieldsEntry) bool {
		return ownsUnwrittenCondition(entries, PolicyStatusFieldOwner, policyConditionTypes)
	}
)

// IndexPolicies adds the policy controller's indexes to a cache.
var IndexPolicies = indexPolicies

// PolicyMaps returns how the policy controller maps a fleet event and a pod
// acknowledgement (which names its fleet alone) to policies, reading
// through c, whose cache holds IndexPolicies' indexes.
func PolicyMaps(c client.Client) (fleetEvent, ackEvent handler.MapFunc) {
	r := &RateLimitPolicyReconciler{Client: c}
	return r.policiesOfFleet, r.policiesOfAckedFleet
}

// RedisDataLossCount is sluice_operator_redis_data_loss_total of a fleet
// ("namespace/name"), for the system tests, from the registry the manager
// serves.
func RedisDataLossCount(fleet string) float64 {
	families, err := metrics.Registry.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range families {
		if mf.GetName() != "sluice_operator_redis_data_loss_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "fleet" && l.GetValue() == fleet {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// IndexFleets adds the fleet controller's index to a cache.
var IndexFleets = indexFleets

// FleetsOfPolicy returns how the fleet controller maps a policy event to
// fleets, reading through c, whose cache holds IndexPolicies' and
// IndexFleets' indexes.
func FleetsOfPolicy(c client.Client) func(context.Context, *v1beta1.RateLimitPolicy) []reconcile.Request {
	r := &LimiterFleetReconciler{Client: c}
	return r.fleetsOfPolicy
}

// FleetMaps returns how the fleet controller maps a fleet's spec event and
// a namespace's label event to fleets, reading through c, whose cache
// holds IndexPolicies' and IndexFleets' indexes: each takes the event's
// object, or an update's old and new object.
func FleetMaps(c client.Client) (fleetSpec, namespaceLabels func(context.Context, ...client.Object) []reconcile.Request) {
	r := &LimiterFleetReconciler{Client: c}
	return func(ctx context.Context, objs ...client.Object) []reconcile.Request {
			return requestsOf(ctx, r.fleetsOfFleet, objs...)
		}, func(ctx context.Context, objs ...client.Object) []reconcile.Request {
			return requestsOf(ctx, r.fleetsOfNamespace, objs...)
		}
}
