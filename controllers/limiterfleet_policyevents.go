package controllers

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// fleetDomainIndex indexes fleets by the domains spec.domains lists, and
// a fleet that lists none by ownNamespaceDomains: it serves every domain
// of its own namespace.
const (
	fleetDomainIndex    = "spec.domains.name"
	ownNamespaceDomains = "\x00own-namespace"
)

// indexFleets adds the fleet controller's index to a cache.
func indexFleets(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &v1beta1.LimiterFleet{}, fleetDomainIndex, func(o client.Object) []string {
		f := o.(*v1beta1.LimiterFleet)
		if len(f.Spec.Domains) == 0 {
			return []string{ownNamespaceDomains}
		}
		out := make([]string, 0, len(f.Spec.Domains))
		for _, d := range f.Spec.Domains {
			out = append(out, d.Name)
		}
		return out
	})
}

// policyEvents maps a policy event to the fleets whose snapshot it may
// change (fleetsOfPolicy), of the old and the new policy on an update.
func (r *LimiterFleetReconciler) policyEvents() handler.EventHandler {
	add := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], objs ...client.Object) {
		seen := map[types.NamespacedName]bool{}
		for _, obj := range objs {
			p, ok := obj.(*v1beta1.RateLimitPolicy)
			if !ok {
				continue
			}
			for _, req := range r.fleetsOfPolicy(ctx, p) {
				if !seen[req.NamespacedName] {
					seen[req.NamespacedName] = true
					q.Add(req)
				}
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.Object)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.Object)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.Object)
		},
	}
}

// fleetsOfPolicy lists the fleets whose snapshot a change of the policy
// may change: a fleet serves only policies of the domains it lists, or,
// listing none, of its own namespace; and a policy's change decides the
// acceptance of its whole domain (conflicts), so every fleet that may
// serve a policy of that domain: the fleets that list the domain, and
// those that list none in a namespace with a policy of the domain. The
// fleets that served the policy (its status.fleets) are added: it may
// have left their domain. Everything is read through the cache's indexes,
// with no list of every policy or fleet.
func (r *LimiterFleetReconciler) fleetsOfPolicy(ctx context.Context, p *v1beta1.RateLimitPolicy) []reconcile.Request {
	log := logf.FromContext(ctx)
	out := map[types.NamespacedName]bool{}
	for _, f := range p.Status.Fleets {
		out[types.NamespacedName{Namespace: f.Namespace, Name: f.Name}] = true
	}
	var listing v1beta1.LimiterFleetList
	if err := r.List(ctx, &listing, client.MatchingFields{fleetDomainIndex: p.Spec.Domain}, client.UnsafeDisableDeepCopy); err != nil {
		log.Error(err, "Listing fleets", "domain", p.Spec.Domain)
	}
	var sameDomain v1beta1.RateLimitPolicyList
	if err := r.List(ctx, &sameDomain, client.MatchingFields{domainIndex: p.Spec.Domain}, client.UnsafeDisableDeepCopy); err != nil {
		log.Error(err, "Listing policies", "domain", p.Spec.Domain)
	}
	namespaces := []string{p.Namespace}
	for i := range sameDomain.Items {
		namespaces = append(namespaces, sameDomain.Items[i].Namespace)
	}
	slices.Sort(namespaces)
	for _, ns := range slices.Compact(namespaces) {
		var own v1beta1.LimiterFleetList
		if err := r.List(ctx, &own, client.InNamespace(ns), client.MatchingFields{fleetDomainIndex: ownNamespaceDomains}, client.UnsafeDisableDeepCopy); err != nil {
			log.Error(err, "Listing fleets", "namespace", ns)
		}
		listing.Items = append(listing.Items, own.Items...)
	}
	for i := range listing.Items {
		out[client.ObjectKeyFromObject(&listing.Items[i])] = true
	}
	reqs := make([]reconcile.Request, 0, len(out))
	for key := range out {
		reqs = append(reqs, reconcile.Request{NamespacedName: key})
	}
	return reqs
}
