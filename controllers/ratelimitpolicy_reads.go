package controllers

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// What a policy's pass reads, and which fleet events reach it. A policy's
// status depends on its domain alone: its verdict on the domain's policies
// and tenancy (readDomainTenancy: the fleets that list the domain, those
// that list none in a namespace with a policy of the domain, and the
// labels of those namespaces), and its fleets on those of that tenancy
// that serve it. Everything is read through the cache's indexes: the
// policy controller's domain index (indexPolicies) and the fleet
// controller's fleetDomainIndex (indexFleets, which Setup adds with the
// fleet controller). No pass lists every fleet or namespace.

// observe reads the policy's verdict and the fleets that serve it, with
// what their ready pods have loaded; complete is false while some pod has
// not answered yet. A fleet whose snapshot has no room for the policy
// turns the verdict into SnapshotFull.
func (r *RateLimitPolicyReconciler) observe(ctx context.Context, policy *v1beta1.RateLimitPolicy) (v verdict, fleets []fleetView, complete bool, err error) {
	var sameDomain v1beta1.RateLimitPolicyList
	if err := r.List(ctx, &sameDomain, client.MatchingFields{domainIndex: policy.Spec.Domain}); err != nil {
		return verdict{}, nil, false, err
	}
	tn, err := readDomainTenancy(ctx, r.Client, policy.Spec.Domain, sameDomain.Items)
	if err != nil {
		return verdict{}, nil, false, err
	}
	v = r.verdicts.get(policy.Spec.Domain, sameDomain.Items, tn)[client.ObjectKeyFromObject(policy)]
	fleets, full, complete := r.fleetViews(policy, v.Accepted, tn)
	if len(full) > 0 {
		slices.Sort(full)
		v = verdict{Reason: v1beta1.SnapshotFullReason, Message: strings.Join(full, "; ")}
	}
	return v, fleets, complete, nil
}

// fleetViews lists, sorted, the fleets of the domain's tenancy that serve
// the policy (fleetServes: only those can) with what their ready pods have
// loaded. full says why each fleet whose snapshot has no room for the
// policy refused it.
func (r *RateLimitPolicyReconciler) fleetViews(p *v1beta1.RateLimitPolicy, accepted bool, tn tenancy) (views []fleetView, full []string, complete bool) {
	if !accepted {
		return nil, nil, true
	}
	complete = true
	for i := range tn.fleets {
		f := &tn.fleets[i]
		if ok, err := fleetServes(f, p, tn.nsLabels[p.Namespace]); err != nil || !ok {
			continue // a bad selector is reported on the fleet
		}
		if msg, refused := r.Fits.refusal(client.ObjectKeyFromObject(f), client.ObjectKeyFromObject(p), p.Generation); refused {
			full = append(full, msg)
			continue
		}
		acks, done := r.Acks.Acks(client.ObjectKeyFromObject(f))
		ready := f.Status.Limiters != nil && f.Status.Limiters.Ready > 0
		if !done && (ready || len(acks) > 0) {
			complete = false
		}
		view := fleetView{Fleet: f, Pods: acks}
		if f.Status.Snapshot != nil {
			view.Version = f.Status.Snapshot.Version
		}
		views = append(views, view)
	}
	slices.SortFunc(views, func(a, b fleetView) int {
		return strings.Compare(a.Fleet.Namespace+"/"+a.Fleet.Name, b.Fleet.Namespace+"/"+b.Fleet.Name)
	})
	return views, full, complete
}

// servedNow lists the policies a fleet serves (fleetServes), those whose
// pass lists it among their fleets (fleetViews): of the domains it lists,
// or, listing none, of its own namespace, read through the domain index.
// A policy a fleet's selectors pick in a domain it does not serve there is
// not its. A bad selector serves nothing (the fleet's status reports it).
func (r *RateLimitPolicyReconciler) servedNow(ctx context.Context, fleet *v1beta1.LimiterFleet) ([]reconcile.Request, error) {
	var candidates []v1beta1.RateLimitPolicy
	// Read-only: names, labels and domains alone, no copy of the policies.
	if len(fleet.Spec.Domains) == 0 {
		var list v1beta1.RateLimitPolicyList
		if err := r.List(ctx, &list, client.InNamespace(fleet.Namespace), client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		candidates = list.Items
	}
	for _, d := range fleet.Spec.Domains {
		var list v1beta1.RateLimitPolicyList
		if err := r.List(ctx, &list, client.MatchingFields{domainIndex: d.Name}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		candidates = append(candidates, list.Items...)
	}
	nsLabels := map[string]map[string]string{}
	var out []reconcile.Request
	for i := range candidates {
		p := &candidates[i]
		labels, ok := nsLabels[p.Namespace]
		if !ok {
			ns := &corev1.Namespace{}
			if err := r.Get(ctx, client.ObjectKey{Name: p.Namespace}, ns); err != nil && !apierrors.IsNotFound(err) {
				return nil, err
			}
			labels = ns.Labels
			nsLabels[p.Namespace] = labels
		}
		if served, err := fleetServes(fleet, p, labels); err == nil && served {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
		}
	}
	return out, nil
}
