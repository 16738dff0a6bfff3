package controllers

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/observe"
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

// PolicyPass returns the reads of the policy controller's pass through c,
// whose cache holds IndexPolicies' and IndexFleets' indexes: for a policy,
// its verdict's reason and the fleets that serve it ("namespace/name",
// sorted), as its status would say (no pod has answered).
func PolicyPass(c client.Client) func(context.Context, types.NamespacedName) (string, []string, error) {
	r := &RateLimitPolicyReconciler{Client: c, Acks: observe.NewAckTracker()}
	return func(ctx context.Context, key types.NamespacedName) (string, []string, error) {
		p := &v1beta1.RateLimitPolicy{}
		if err := c.Get(ctx, key, p); err != nil {
			return "", nil, err
		}
		v, fleets, _, err := r.observe(ctx, p)
		var names []string
		for _, f := range fleets {
			names = append(names, f.Fleet.Namespace+"/"+f.Fleet.Name)
		}
		return v.Reason, names, err
	}
}

// ClusterPass is what the policy controller's pass decided before it read
// its domain's tenancy alone: the verdict over every fleet and the labels
// of every namespace, and the fleets among every fleet that serve the
// policy (sorted). The reference of the parity test.
func ClusterPass(ctx context.Context, c client.Reader, key types.NamespacedName) (string, []string, error) {
	p := &v1beta1.RateLimitPolicy{}
	if err := c.Get(ctx, key, p); err != nil {
		return "", nil, err
	}
	var policies v1beta1.RateLimitPolicyList
	var fleets v1beta1.LimiterFleetList
	var nss corev1.NamespaceList
	for _, l := range []client.ObjectList{&policies, &fleets, &nss} {
		if err := c.List(ctx, l); err != nil {
			return "", nil, err
		}
	}
	tn := tenancy{fleets: fleets.Items, nsLabels: map[string]map[string]string{}}
	for _, ns := range nss.Items {
		tn.nsLabels[ns.Name] = ns.Labels
	}
	sameDomain := slices.DeleteFunc(policies.Items, func(o v1beta1.RateLimitPolicy) bool { return o.Spec.Domain != p.Spec.Domain })
	v := decideAcceptance(sameDomain, tn)[key]
	var names []string
	for i := range fleets.Items {
		f := &fleets.Items[i]
		if ok, err := fleetServes(f, p, tn.nsLabels[p.Namespace]); v.Accepted && err == nil && ok {
			names = append(names, f.Namespace+"/"+f.Name)
		}
	}
	slices.Sort(names)
	return v.Reason, names, nil
}

// WriteFleetStatus and OwnedFleetStatus are the fleet status writer, and
// the part of a status one writer writes.
var (
	WriteFleetStatus = writeFleetStatus
	OwnedFleetStatus = ownedFleetStatus
)

// PolicyTenancyMaps returns how the policy controller maps a fleet's spec
// event and a namespace's label event to policies, reading through c,
// whose cache holds IndexPolicies' indexes.
func PolicyTenancyMaps(c client.Client) (fleetSpec, namespaceLabels handler.MapFunc) {
	r := &RateLimitPolicyReconciler{Client: c}
	return r.policiesOfFleetDomains, r.policiesOfNamespace
}

// ApplyFleetStatusAt applies owner's part of a fleet's status at a
// resourceVersion, as the failover watch does.
var ApplyFleetStatusAt = applyFleetStatusAt
