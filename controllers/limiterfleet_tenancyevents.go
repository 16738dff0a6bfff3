package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// A fleet's pass reads, beyond its own spec, the tenancy of each domain it
// may serve (fleetDomains, readDomainTenancy): the fleets that list the
// domain, those that list none in a namespace with a policy of the domain,
// and the labels of those namespaces. So a fleet's spec, and a namespace's
// labels, are read by the passes of the fleets that may serve a domain
// they are in the tenancy of, and by no other: the maps below enqueue
// those, found through the cache's indexes, never every fleet.

// fleetsOfFleet maps a fleet's creation, deletion or change of spec to
// the fleets whose pass reads it: itself, and the fleets that may serve a
// domain it may serve (fleetsOfDomain of each of fleetDomains: the domains
// it lists, or, listing none, those used in its namespace, whose tenancy
// holds it). Mapped for the old and the new fleet of an update, a domain
// it stops listing wakes the fleets of that domain too.
func (r *LimiterFleetReconciler) fleetsOfFleet(ctx context.Context, obj client.Object, out map[types.NamespacedName]bool) {
	fleet, ok := obj.(*v1beta1.LimiterFleet)
	if !ok {
		return
	}
	out[client.ObjectKeyFromObject(fleet)] = true
	domains, err := r.fleetDomains(ctx, fleet)
	if err != nil {
		logf.FromContext(ctx).Error(err, "Listing a fleet's domains", "fleet", client.ObjectKeyFromObject(fleet))
	}
	for _, d := range domains {
		r.fleetsOfDomain(ctx, d, "", out)
	}
}

// fleetsOfNamespace maps a change of a namespace's labels to the fleets
// whose pass reads them: readDomainTenancy reads the labels of the
// namespaces with a policy of the domain, so the fleets that may serve a
// domain used in the namespace (fleetsOfDomain). Which fleets read the
// labels does not depend on them, so the fleets whose selectors the old
// labels matched and the new ones don't are among them: a namespace that
// stops matching wakes the fleet it left. A namespace without policies is
// read by no fleet's pass.
func (r *LimiterFleetReconciler) fleetsOfNamespace(ctx context.Context, obj client.Object, out map[types.NamespacedName]bool) {
	var list v1beta1.RateLimitPolicyList
	// Read-only: domains alone, no copy of the policies.
	if err := r.List(ctx, &list, client.InNamespace(obj.GetName()), client.UnsafeDisableDeepCopy); err != nil {
		logf.FromContext(ctx).Error(err, "Listing policies", "namespace", obj.GetName())
		return
	}
	seen := map[string]bool{}
	for i := range list.Items {
		if d := list.Items[i].Spec.Domain; !seen[d] {
			seen[d] = true
			r.fleetsOfDomain(ctx, d, "", out)
		}
	}
}
