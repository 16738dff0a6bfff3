package controllers

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// Domain ownership: a platform team says on each LimiterFleet, which
// tenants can't write, which namespaces may use each rate limit domain the
// fleet serves (spec.domains). A fleet serves a policy only when it allows
// the policy's namespace to use the policy's domain and its selectors pick
// the policy; a policy that no fleet allows is not accepted, and conflicts
// are decided only among policies that one fleet allows. So a tenant who
// may write policies in one namespace can neither squat on nor deny
// another tenant's domain.

// fleetAllows reports whether the fleet allows the policy's namespace,
// whose labels are nsLabels, to use the policy's domain: the domain is
// listed in spec.domains and its allowedNamespaces admit the namespace, or
// the fleet lists no domains and the policy is in the fleet's namespace.
// A bad selector allows nothing, and is returned.
func fleetAllows(fleet *v1beta1.LimiterFleet, p *v1beta1.RateLimitPolicy, nsLabels map[string]string) (bool, error) {
	return domainAllowed(fleet, p.Spec.Domain, p.Namespace, nsLabels)
}

func domainAllowed(fleet *v1beta1.LimiterFleet, domain, namespace string, nsLabels map[string]string) (bool, error) {
	if len(fleet.Spec.Domains) == 0 {
		return namespace == fleet.Namespace, nil
	}
	for i := range fleet.Spec.Domains {
		d := &fleet.Spec.Domains[i]
		if d.Name != domain {
			continue
		}
		switch d.AllowedNamespaces.EffectiveFrom() {
		case v1beta1.NamespacesFromAll:
			return true, nil
		case v1beta1.NamespacesFromSelector:
			if d.AllowedNamespaces.Selector == nil {
				return false, nil // the API server refuses it
			}
			ok, err := selectorMatches(d.AllowedNamespaces.Selector, nsLabels)
			if err != nil {
				return false, fmt.Errorf("spec.domains[%s].allowedNamespaces.selector: %w", domain, err)
			}
			return ok, nil
		default:
			return namespace == fleet.Namespace, nil
		}
	}
	return false, nil
}

// fleetServes reports whether a fleet serves a policy: it allows the
// policy's domain for its namespace (fleetAllows) and selects it
// (fleetSelects).
func fleetServes(fleet *v1beta1.LimiterFleet, p *v1beta1.RateLimitPolicy, nsLabels map[string]string) (bool, error) {
	ok, err := fleetAllows(fleet, p, nsLabels)
	if err != nil || !ok {
		return false, err
	}
	return fleetSelects(fleet, p, nsLabels)
}

// tenancy is what the acceptance of policies depends on beyond the
// policies themselves: the fleets (which allow domains to namespaces) and
// the labels of namespaces.
type tenancy struct {
	fleets   []v1beta1.LimiterFleet
	nsLabels map[string]map[string]string
}

// readDomainTenancy reads the tenancy of one domain's policies alone,
// through the cache's indexes (the fleet controller's fleetDomainIndex):
// the fleets that list the domain, those that list none in a namespace of
// the policies, and the labels of those namespaces. A domain's verdicts
// read no other fleet or namespace (allowedBy, notAllowedMessage and
// fleetEntryConflict see only fleets that allow or list the domain), so
// they are the ones the whole cluster's fleets and namespaces give (the
// parity test TestPolicyPassReadsItsDomainOnly holds them together). The fleets are sorted by namespace and name, so that what is
// decided from them does not depend on the cache's order.
func readDomainTenancy(ctx context.Context, c client.Reader, domain string, policies []v1beta1.RateLimitPolicy) (tenancy, error) {
	var listing v1beta1.LimiterFleetList
	if err := c.List(ctx, &listing, client.MatchingFields{fleetDomainIndex: domain}); err != nil {
		return tenancy{}, err
	}
	tn := tenancy{fleets: listing.Items, nsLabels: map[string]map[string]string{}}
	namespaces := make([]string, 0, len(policies))
	for i := range policies {
		namespaces = append(namespaces, policies[i].Namespace)
	}
	slices.Sort(namespaces)
	for _, ns := range slices.Compact(namespaces) {
		var own v1beta1.LimiterFleetList
		if err := c.List(ctx, &own, client.InNamespace(ns), client.MatchingFields{fleetDomainIndex: ownNamespaceDomains}); err != nil {
			return tenancy{}, err
		}
		tn.fleets = append(tn.fleets, own.Items...)
		var n corev1.Namespace
		switch err := c.Get(ctx, client.ObjectKey{Name: ns}, &n); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return tenancy{}, err
		default:
			tn.nsLabels[ns] = n.Labels
		}
	}
	slices.SortFunc(tn.fleets, func(a, b v1beta1.LimiterFleet) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return tn, nil
}

// fingerprint identifies the tenancy for the verdict cache: each fleet's
// identity and generation (its spec), and the labels of namespaces.
func (tn tenancy) fingerprint(namespaces []string) string {
	var b strings.Builder
	keys := make([]string, 0, len(tn.fleets))
	for i := range tn.fleets {
		f := &tn.fleets[i]
		keys = append(keys, fmt.Sprintf("%s/%s/%s/%d/%t", f.Namespace, f.Name, f.UID, f.Generation, f.DeletionTimestamp != nil))
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(';')
	}
	b.WriteByte('|')
	slices.Sort(namespaces)
	for _, ns := range slices.Compact(namespaces) {
		b.WriteString(ns)
		for _, k := range slices.Sorted(maps.Keys(tn.nsLabels[ns])) {
			fmt.Fprintf(&b, ",%q=%q", k, tn.nsLabels[ns][k])
		}
		b.WriteByte(';')
	}
	return b.String()
}

// allowedBy lists, sorted, the fleets ("namespace/name") that allow
// namespace to use domain. Fleets being deleted allow nothing.
func (tn tenancy) allowedBy(domain, namespace string) []string {
	var out []string
	for i := range tn.fleets {
		f := &tn.fleets[i]
		if f.DeletionTimestamp != nil {
			continue
		}
		if ok, _ := domainAllowed(f, domain, namespace, tn.nsLabels[namespace]); ok {
			out = append(out, f.Namespace+"/"+f.Name)
		}
	}
	slices.Sort(out)
	return out
}

// maxNamedFleets bounds the fleets a DomainNotAllowed message names.
const maxNamedFleets = 3

// notAllowedMessage says why no fleet serves domain to namespace, and what
// would: the fleets that list the domain for other namespaces, by name
// only (the tenant may not read them), or how a fleet would list it.
func (tn tenancy) notAllowedMessage(domain, namespace string) string {
	var listing []string
	for i := range tn.fleets {
		f := &tn.fleets[i]
		if f.DeletionTimestamp != nil {
			continue
		}
		for _, d := range f.Spec.Domains {
			if d.Name == domain {
				listing = append(listing, f.Namespace+"/"+f.Name)
			}
		}
	}
	slices.Sort(listing)
	if len(listing) > 0 {
		names := strings.Join(listing[:min(len(listing), maxNamedFleets)], ", ")
		if len(listing) > maxNamedFleets {
			names += fmt.Sprintf(" and %d more", len(listing)-maxNamedFleets)
		}
		return fmt.Sprintf("domain %q is not allowed for namespace %q: LimiterFleet %s lists it in spec.domains for other namespaces; "+
			"to allow it, the fleet's administrators must admit namespace %q in that domain's allowedNamespaces",
			domain, namespace, names, namespace)
	}
	return fmt.Sprintf("domain %q is not allowed for namespace %q: no LimiterFleet serves it there (a fleet serves the domains its spec.domains lists "+
		"to the namespaces their allowedNamespaces admit, and a fleet that lists none serves its own namespace only); "+
		"to allow it, a fleet's administrators must list {name: %q} in spec.domains with allowedNamespaces that admit namespace %q",
		domain, namespace, domain, namespace)
}

// policiesOfFleetDomains maps a change of a fleet's spec (or its creation
// or deletion) to the policies whose acceptance it may change: every
// policy of a domain the fleet lists, or of a domain used in the fleet's
// namespace (which a fleet that lists no domains serves). An update maps
// both the old and the new fleet.
func (r *RateLimitPolicyReconciler) policiesOfFleetDomains(ctx context.Context, obj client.Object) []reconcile.Request {
	fleet, ok := obj.(*v1beta1.LimiterFleet)
	if !ok {
		return nil
	}
	domains := map[string]bool{}
	for _, d := range fleet.Spec.Domains {
		domains[d.Name] = true
	}
	r.domainsIn(ctx, fleet.Namespace, domains)
	return r.policiesOfDomains(ctx, domains)
}

// policiesOfNamespace maps a change of a namespace's labels, which
// allowedNamespaces selectors read, to every policy of the domains used
// in that namespace.
func (r *RateLimitPolicyReconciler) policiesOfNamespace(ctx context.Context, obj client.Object) []reconcile.Request {
	domains := map[string]bool{}
	r.domainsIn(ctx, obj.GetName(), domains)
	return r.policiesOfDomains(ctx, domains)
}

// domainsIn adds the domains of the policies in namespace to domains.
func (r *RateLimitPolicyReconciler) domainsIn(ctx context.Context, namespace string, domains map[string]bool) {
	var list v1beta1.RateLimitPolicyList
	// Read-only: domains alone, no copy of the policies.
	if err := r.List(ctx, &list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		logf.FromContext(ctx).Error(err, "Listing policies", "namespace", namespace)
		return
	}
	for i := range list.Items {
		domains[list.Items[i].Spec.Domain] = true
	}
}

// policiesOfDomains lists every policy of the domains, sorted.
func (r *RateLimitPolicyReconciler) policiesOfDomains(ctx context.Context, domains map[string]bool) []reconcile.Request {
	var out []reconcile.Request
	for _, d := range slices.Sorted(maps.Keys(domains)) {
		out = append(out, r.policies(ctx, client.MatchingFields{domainIndex: d})...)
	}
	return out
}
