package controllers

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/observe"
	"github.com/sluice-dev/sluice/controllers/redisfleet"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// SetupWithManager registers the controller and what it watches.
func (r *LimiterFleetReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.redis = &redisfleet.Provisioner{Client: r.Client, Scheme: r.Scheme, APIReader: r.APIReader, Recorder: r.Recorder,
		RedisDialer: r.RedisDialer, DefaultRedisImage: r.DefaultRedisImage, Apply: r.apply, Confirm: r.Acks.Confirm}
	allFleets := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		return r.allFleets(ctx)
	})
	// The fast path of a Redis pod's deletion: the fleet's full pass may
	// be busy for longer than the pod's preStop sleep.
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("redis-handover").
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(fleetOfRedisPod), builder.WithPredicates(redisPodTerminating)).
		Complete(reconcile.Func(r.handOver)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1beta1.LimiterFleet{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, redisfleet.DataLossAckChanged))).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Owns(&appsv1.Deployment{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(fleetOfRedisPod), builder.WithPredicates(redisPodChanged)).
		Watches(&v1beta1.RateLimitPolicy{}, allFleets).
		// Any fleet's domains decide which policies are allowed, and so
		// which conflict: every fleet's snapshot may change.
		Watches(&v1beta1.LimiterFleet{}, allFleets, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Namespace{}, allFleets, builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(r.fleetOfSlice)).
		// The owners of the pods behind the endpoints decide which count.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(observe.FleetOfLimiterObject), builder.WithPredicates(observe.LimiterOwnerChanged)).
		Watches(&appsv1.ReplicaSet{}, handler.EnqueueRequestsFromMapFunc(observe.FleetOfLimiterObject), builder.WithPredicates(observe.LimiterOwnerChanged)).
		WatchesRawSource(source.Channel(r.Acks.Subscribe(), &handler.EnqueueRequestForObject{})).
		Named("limiterfleet").
		Complete(r)
}

func (r *LimiterFleetReconciler) allFleets(ctx context.Context) []reconcile.Request {
	var fleets v1beta1.LimiterFleetList
	if err := r.List(ctx, &fleets); err != nil {
		logf.FromContext(ctx).Error(err, "Listing fleets")
		return nil
	}
	out := make([]reconcile.Request, len(fleets.Items))
	for i := range fleets.Items {
		out[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&fleets.Items[i])}
	}
	return out
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

// fleetOfRedisPod maps a Redis pod to its fleet by its instance label.
func fleetOfRedisPod(_ context.Context, obj client.Object) []reconcile.Request {
	l := obj.GetLabels()
	if l[resources.LabelName] != resources.RedisAppName || l[resources.LabelInstance] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: l[resources.LabelInstance]}}}
}

// redisPodChanged passes the pod events the Redis phase acts on: a Redis
// pod appears, goes, changes IP, phase or readiness, or restarts.
var redisPodChanged = predicate.Funcs{
	CreateFunc:  func(e event.CreateEvent) bool { return isRedisPod(e.Object) },
	DeleteFunc:  func(e event.DeleteEvent) bool { return isRedisPod(e.Object) },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, okO := e.ObjectOld.(*corev1.Pod)
		n, okN := e.ObjectNew.(*corev1.Pod)
		if !okO || !okN || !isRedisPod(n) {
			return false
		}
		return o.Status.PodIP != n.Status.PodIP || o.Status.Phase != n.Status.Phase ||
			o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero() ||
			podReady(o) != podReady(n) || restarts(o) != restarts(n)
	},
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

// redisPodTerminating passes the events of a Redis pod being deleted.
var redisPodTerminating = predicate.NewPredicateFuncs(func(obj client.Object) bool {
	return isRedisPod(obj) && !obj.GetDeletionTimestamp().IsZero()
})

// handOver has a terminating Redis master's replica take its slots over
// (redisfleet.Provisioner.HandOver), apart from the fleet's full pass.
func (r *LimiterFleetReconciler) handOver(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	fleet := &v1beta1.LimiterFleet{}
	if err := r.Get(ctx, req.NamespacedName, fleet); err != nil || !fleet.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	after, err := r.redis.HandOver(ctx, fleet)
	return reconcile.Result{RequeueAfter: after}, err
}

func isRedisPod(obj client.Object) bool {
	return obj.GetLabels()[resources.LabelName] == resources.RedisAppName
}
