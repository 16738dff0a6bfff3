package controllers

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// Indexes of RateLimitPolicies in the manager's cache.
const (
	// domainIndex indexes policies by spec.domain: conflicts only happen
	// within a domain.
	domainIndex = "spec.domain"
	// servedByIndex indexes policies by the fleets their status.fleets
	// names ("namespace/name"): the fleets that served them at the last
	// write.
	servedByIndex = "status.fleets"
)

// policyWorkers is how many policies are reconciled at once.
const policyWorkers = 4

// RateLimitPolicyReconciler writes each policy's Accepted and Enforced
// conditions and the fleets that serve it.
type RateLimitPolicyReconciler struct {
	client.Client
	Scheme *runtime.Scheme
	Acks   PodAcks
	// Fits tells which fleets refused the policy for want of room in
	// their snapshot; nil refuses none.
	Fits *SnapshotFits

	verdicts verdictCache
	latency  applyLatency
}

// +kubebuilder:rbac:groups=ratelimit.sluice.dev,resources=ratelimitpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=ratelimit.sluice.dev,resources=ratelimitpolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ratelimit.sluice.dev,resources=limiterfleets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Reconcile recomputes the policy's status from what it observes.
func (r *RateLimitPolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	policy := &v1beta1.RateLimitPolicy{}
	if err := r.Get(ctx, req.NamespacedName, policy); err != nil {
		if apierrors.IsNotFound(err) {
			r.latency.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !policy.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	r.latency.saw(policy)
	v, fleets, complete, err := r.observe(ctx, policy)
	if err != nil {
		return ctrl.Result{}, err
	}

	next := policy.DeepCopy()
	st := &next.Status
	accepted := metav1.Condition{Type: v1beta1.AcceptedCondition, Status: metav1.ConditionFalse,
		Reason: v.Reason, Message: v.Message, ObservedGeneration: policy.Generation}
	if v.Accepted {
		accepted.Status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, accepted)
	// Until every selecting fleet's ready pods have answered once, a True
	// Enforced stays: an operator restart must not flap it. One that is
	// absent or False is written at once (False while a pod has not
	// answered: SnapshotPending, naming how many pods have the policy), so
	// a pod that never answers shows.
	if complete || !v.Accepted || !meta.IsStatusConditionTrue(policy.Status.Conditions, v1beta1.EnforcedCondition) {
		meta.SetStatusCondition(&st.Conditions, enforcedCondition(policy, v.Accepted, fleets))
		meta.SetStatusCondition(&st.Conditions, degradedCondition(policy, fleets))
		st.Fleets = fleetStatuses(policy, fleets)
	}
	st.ObservedGeneration = policy.Generation
	// A status entry an older release left is handed over first; then
	// this controller applies its condition types alone, so what it took
	// over, or owns, and no longer writes goes.
	migrated, err := handOverStatus(ctx, r.Client, policy, policyStatusOwners)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !migrated && !ownsUnwrittenCondition(policy.ManagedFields, PolicyStatusFieldOwner, policyConditionTypes) && !statusChanged(&policy.Status, &next.Status) {
		return ctrl.Result{}, nil
	}
	logf.FromContext(ctx).V(1).Info("Updating status", "accepted", accepted.Status)
	if err := applyConditions(ctx, r.Client, policy, st); err != nil {
		return ctrl.Result{}, err
	}
	r.latency.wrote(policy, st.Conditions)
	return ctrl.Result{}, nil
}

// statusChanged compares statuses, ignoring a change of the fleets'
// snapshot versions alone: every edit anywhere in a fleet makes a new
// snapshot, and rewriting every policy for it would not scale. The version
// is refreshed whenever the policy's status changes for its own reasons.
func statusChanged(old, next *v1beta1.RateLimitPolicyStatus) bool {
	cmp := next.DeepCopy()
	if len(cmp.Fleets) == len(old.Fleets) {
		for i := range cmp.Fleets {
			if cmp.Fleets[i].Namespace == old.Fleets[i].Namespace && cmp.Fleets[i].Name == old.Fleets[i].Name {
				cmp.Fleets[i].SnapshotVersion = old.Fleets[i].SnapshotVersion
			}
		}
	}
	return !equality.Semantic.DeepEqual(*old, *cmp)
}

func fleetStatuses(p *v1beta1.RateLimitPolicy, fleets []fleetView) []v1beta1.FleetStatus {
	var out []v1beta1.FleetStatus
	for _, f := range fleets {
		var synced int32
		for _, pod := range f.Pods {
			if pod.Generations[string(p.UID)] == p.Generation {
				synced++
			}
		}
		out = append(out, v1beta1.FleetStatus{
			Namespace:       f.Fleet.Namespace,
			Name:            f.Fleet.Name,
			SnapshotVersion: f.Version,
			PodsSynced:      ptr.To(synced),
			PodsReady:       ptr.To(int32(len(f.Pods))),
		})
	}
	return out
}

// SetupWithManager registers the controller, its indexes, and what it
// watches: policies of the same domain (a deletion can clear a conflict),
// fleets and pod acknowledgements, each mapped to the policies the fleet
// serves or served, and the fleets' domains and namespaces' labels, each
// mapped to the policies of the domains whose tenancy holds them. It reads
// fleets through the fleet controller's index (indexFleets).
func (r *RateLimitPolicyReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := indexPolicies(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1beta1.RateLimitPolicy{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, fallbacksChanged))).
		Watches(&v1beta1.RateLimitPolicy{}, handler.EnqueueRequestsFromMapFunc(r.sameDomain),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1beta1.LimiterFleet{}, handler.EnqueueRequestsFromMapFunc(r.policiesOfFleet)).
		// Domain ownership: a fleet's spec and namespaces' labels decide
		// which policies are allowed, and so which conflict.
		Watches(&v1beta1.LimiterFleet{}, handler.EnqueueRequestsFromMapFunc(r.policiesOfFleetDomains),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.policiesOfNamespace),
			builder.WithPredicates(predicate.LabelChangedPredicate{})).
		WatchesRawSource(source.Channel(r.Acks.Subscribe(), handler.EnqueueRequestsFromMapFunc(r.policiesOfAckedFleet))).
		WatchesRawSource(source.Channel(r.Fits.Subscribe(), &handler.EnqueueRequestForObject{})).
		Named("ratelimitpolicy").
		// Each reconcile is a few cache reads and at most one status
		// write: several at once keep a fleet event that touches
		// thousands of policies (a fleet deleted) from holding a new
		// policy's first status behind a slow API server's round trips.
		WithOptions(controller.Options{MaxConcurrentReconciles: policyWorkers}).
		Complete(r)
}

// indexPolicies adds the policy indexes to a cache.
func indexPolicies(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &v1beta1.RateLimitPolicy{}, domainIndex, func(o client.Object) []string {
		return []string{o.(*v1beta1.RateLimitPolicy).Spec.Domain}
	}); err != nil {
		return err
	}
	return indexer.IndexField(ctx, &v1beta1.RateLimitPolicy{}, servedByIndex, func(o client.Object) []string {
		var out []string
		for _, f := range o.(*v1beta1.RateLimitPolicy).Status.Fleets {
			out = append(out, types.NamespacedName{Namespace: f.Namespace, Name: f.Name}.String())
		}
		return out
	})
}

// policies lists the names of the policies opts select.
func (r *RateLimitPolicyReconciler) policies(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	var list v1beta1.RateLimitPolicyList
	// Read-only: names alone, no copy of the policies.
	if err := r.List(ctx, &list, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
		logf.FromContext(ctx).Error(err, "Listing policies")
		return nil
	}
	out := make([]reconcile.Request, len(list.Items))
	for i := range list.Items {
		out[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
	}
	return out
}

func (r *RateLimitPolicyReconciler) sameDomain(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.policies(ctx, client.MatchingFields{domainIndex: obj.(*v1beta1.RateLimitPolicy).Spec.Domain})
}

// policiesOfFleet maps a fleet event to the policies whose status the
// fleet decides: those it serves (servedNow), and those whose
// status.fleets names it (it served them, and may no longer: a selector, a
// namespace's labels or a policy's labels changed, or the fleet is gone).
// An update maps both the old and the new fleet.
func (r *RateLimitPolicyReconciler) policiesOfFleet(ctx context.Context, obj client.Object) []reconcile.Request {
	fleet := obj.(*v1beta1.LimiterFleet)
	served := r.servedBy(ctx, client.ObjectKeyFromObject(fleet))
	serving, err := r.servedNow(ctx, fleet)
	if err != nil {
		logf.FromContext(ctx).Error(err, "Listing the policies a fleet serves", "fleet", client.ObjectKeyFromObject(fleet))
	}
	out := slices.Concat(served, serving)
	slices.SortFunc(out, func(a, b reconcile.Request) int { return strings.Compare(a.String(), b.String()) })
	return slices.Compact(out)
}

// policiesOfAckedFleet maps a pod acknowledgement, which names its fleet
// alone, to the policies of that fleet.
func (r *RateLimitPolicyReconciler) policiesOfAckedFleet(ctx context.Context, obj client.Object) []reconcile.Request {
	key := client.ObjectKeyFromObject(obj)
	fleet := &v1beta1.LimiterFleet{}
	if err := r.Get(ctx, key, fleet); err != nil {
		if !apierrors.IsNotFound(err) {
			logf.FromContext(ctx).Error(err, "Reading an acknowledged fleet", "fleet", key)
		}
		return r.servedBy(ctx, key) // gone: the policies it served
	}
	return r.policiesOfFleet(ctx, fleet)
}

// servedBy lists the policies whose status.fleets names the fleet.
func (r *RateLimitPolicyReconciler) servedBy(ctx context.Context, fleet types.NamespacedName) []reconcile.Request {
	return r.policies(ctx, client.MatchingFields{servedByIndex: fleet.String()})
}
