package controllers

import (
	"context"
	"maps"
	"slices"
	"strings"

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

// fleetMap adds to out the fleets whose pass an event's object may change.
type fleetMap func(ctx context.Context, obj client.Object, out map[types.NamespacedName]bool)

// requestsOf maps objs, an event's object or an update's old and new one,
// through m: each fleet once, sorted.
func requestsOf(ctx context.Context, m fleetMap, objs ...client.Object) []reconcile.Request {
	out := map[types.NamespacedName]bool{}
	for _, obj := range objs {
		m(ctx, obj, out)
	}
	reqs := make([]reconcile.Request, 0, len(out))
	for _, key := range slices.SortedFunc(maps.Keys(out), func(a, b types.NamespacedName) int {
		return strings.Compare(a.String(), b.String())
	}) {
		reqs = append(reqs, reconcile.Request{NamespacedName: key})
	}
	return reqs
}

// eventsTo is an event handler that enqueues requestsOf m: of the old and
// the new object on an update, so that a fleet the object left is told.
func eventsTo(m fleetMap) handler.EventHandler {
	add := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], objs ...client.Object) {
		for _, req := range requestsOf(ctx, m, objs...) {
			q.Add(req)
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

// fleetsOfPolicyEvent is fleetsOfPolicy as a fleetMap.
func (r *LimiterFleetReconciler) fleetsOfPolicyEvent(ctx context.Context, obj client.Object, out map[types.NamespacedName]bool) {
	if p, ok := obj.(*v1beta1.RateLimitPolicy); ok {
		for _, req := range r.fleetsOfPolicy(ctx, p) {
			out[req.NamespacedName] = true
		}
	}
}

// fleetsOfPolicy lists the fleets whose snapshot a change of the policy
// may change: a fleet serves only policies of the domains it lists, or,
// listing none, of its own namespace; and a policy's change decides the
// acceptance of its whole domain (conflicts), so every fleet that may
// serve a policy of that domain (fleetsOfDomain, the policy's namespace
// among those of the domain: it may have just left it). The fleets that
// served the policy (its status.fleets) are added: it may have left their
// domain. Everything is read through the cache's indexes, with no list of
// every policy or fleet.
func (r *LimiterFleetReconciler) fleetsOfPolicy(ctx context.Context, p *v1beta1.RateLimitPolicy) []reconcile.Request {
	out := map[types.NamespacedName]bool{}
	for _, f := range p.Status.Fleets {
		out[types.NamespacedName{Namespace: f.Namespace, Name: f.Name}] = true
	}
	r.fleetsOfDomain(ctx, p.Spec.Domain, p.Namespace, out)
	reqs := make([]reconcile.Request, 0, len(out))
	for key := range out {
		reqs = append(reqs, reconcile.Request{NamespacedName: key})
	}
	return reqs
}

// fleetsOfDomain adds to out the fleets that may serve a policy of domain,
// which are the fleets readDomainTenancy reads for it: those that list the
// domain, and those that list none in a namespace with a policy of the
// domain, or in namespace when it is not "". Their passes read the
// domain's policies, tenancy and namespaces' labels.
func (r *LimiterFleetReconciler) fleetsOfDomain(ctx context.Context, domain, namespace string, out map[types.NamespacedName]bool) {
	log := logf.FromContext(ctx)
	var listing v1beta1.LimiterFleetList
	if err := r.List(ctx, &listing, client.MatchingFields{fleetDomainIndex: domain}, client.UnsafeDisableDeepCopy); err != nil {
		log.Error(err, "Listing fleets", "domain", domain)
	}
	var sameDomain v1beta1.RateLimitPolicyList
	if err := r.List(ctx, &sameDomain, client.MatchingFields{domainIndex: domain}, client.UnsafeDisableDeepCopy); err != nil {
		log.Error(err, "Listing policies", "domain", domain)
	}
	var namespaces []string
	if namespace != "" {
		namespaces = append(namespaces, namespace)
	}
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
}
