package controllers

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/observe"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// SetupWithManager registers the controller and what it watches. It reads
// policies through the cache's domain index, which the policy controller's
// SetupWithManager adds (indexPolicies), and adds its own of fleets.
func (r *LimiterFleetReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := indexFleets(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	r.children = newChildren(r.Client, r.Scheme, r.APIReader)
	notRedis := builder.WithPredicates(notRedisObject)
	b := ctrl.NewControllerManagedBy(mgr).
		// The other jobs' conditions, from which Ready follows.
		For(&v1beta1.LimiterFleet{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, jobConditionChanged))).
		Owns(&corev1.ConfigMap{}, notRedis).
		Owns(&corev1.Service{}, notRedis).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Owns(&appsv1.Deployment{}).
		Owns(&policyv1.PodDisruptionBudget{}, notRedis).
		Owns(&networkingv1.NetworkPolicy{}).
		// A policy changes the snapshots of the fleets of its domain alone.
		Watches(&v1beta1.RateLimitPolicy{}, eventsTo(r.fleetsOfPolicyEvent)).
		// A fleet's domains, and namespaces' labels, decide which policies
		// are allowed, and so which conflict: the snapshots of the fleets
		// whose passes read them may change (limiterfleet_tenancyevents.go).
		Watches(&v1beta1.LimiterFleet{}, eventsTo(r.fleetsOfFleet), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Namespace{}, eventsTo(r.fleetsOfNamespace), builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(r.fleetOfSlice)).
		// The owners of the pods behind the endpoints decide which count.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(observe.FleetOfLimiterObject), builder.WithPredicates(observe.LimiterOwnerChanged)).
		Watches(&appsv1.ReplicaSet{}, handler.EnqueueRequestsFromMapFunc(observe.FleetOfLimiterObject), builder.WithPredicates(observe.LimiterOwnerChanged)).
		WatchesRawSource(source.Channel(r.Acks.Subscribe(), &handler.EnqueueRequestForObject{}))
	if r.RedisAuthChanged != nil {
		// The limiters' Redis password changed: roll them.
		b = b.WatchesRawSource(source.Channel(r.RedisAuthChanged, &handler.EnqueueRequestForObject{}))
	}
	return b.Named("limiterfleet").Complete(r)
}

// jobConditionChanged passes the fleet updates that change a condition
// another controller writes and Ready follows (jobConditions), or its
// observedGeneration, which observedGeneration follows. The fleet
// controller's own status writes change none, so they do not come back
// to it.
var jobConditionChanged = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, okO := e.ObjectOld.(*v1beta1.LimiterFleet)
		n, okN := e.ObjectNew.(*v1beta1.LimiterFleet)
		if !okO || !okN {
			return false
		}
		for _, t := range jobConditions {
			a := meta.FindStatusCondition(o.Status.Conditions, t)
			b := meta.FindStatusCondition(n.Status.Conditions, t)
			if (a == nil) != (b == nil) || a != nil && (a.Status != b.Status || a.Reason != b.Reason ||
				a.Message != b.Message || a.ObservedGeneration != b.ObservedGeneration) {
				return true
			}
		}
		return false
	},
}

// fleetOfSlice maps an EndpointSlice to the fleet whose limiter Service it
// belongs to.
func (r *LimiterFleetReconciler) fleetOfSlice(ctx context.Context, obj client.Object) []reconcile.Request {
	svc := obj.GetLabels()[discoveryv1.LabelServiceName]
	if svc == "" {
		return nil
	}
	var fleets v1beta1.LimiterFleetList
	if err := r.List(ctx, &fleets, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil
	}
	for i := range fleets.Items {
		if resources.LimiterName(&fleets.Items[i]) == svc {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: fleets.Items[i].Name}}}
		}
	}
	return nil
}
