package controllers

import (
	"context"
	"errors"
	"net"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/redisfleet"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// RedisFleetReconciler owns a fleet's Redis store: in mode Cluster it runs
// the fleet's own Redis Cluster (controllers/redisfleet's Provisioner: the
// auth and TLS Secrets, StatefulSets, PodDisruptionBudgets, headless
// Service and ConfigMap, and one pass of the cluster engine); in other
// modes it deletes what it made. It writes its part of the fleet's status
// itself (RedisStatusFieldOwner): status.redis, RedisReady and
// RedisDataLoss. Its Provisioner also serves the redis-handover controller
// and the standbys' failoverWatch.
type RedisFleetReconciler struct {
	client.Client
	Scheme *runtime.Scheme
	// Acks is read for what the limiter pods report of their store; the
	// fleet controller tells it which pods to poll.
	Acks PodAcks
	// DefaultRedisImage is the Redis image of Cluster fleets that name
	// none; empty means v1beta1.DefaultRedisImage.
	DefaultRedisImage string
	// APIReader reads Secrets uncached; nil means Client.
	APIReader client.Reader
	// Recorder records Events for the commands sent to Redis; may be nil.
	Recorder record.EventRecorder
	// RedisDialer, when set, opens connections to Redis pods.
	RedisDialer func(ctx context.Context, network, addr string) (net.Conn, error)

	// redis runs the fleets' Redis Clusters (set by SetupWithManager).
	redis *redisfleet.Provisioner
	// authSeen is the limiters' auth hash each fleet's last pass wrote,
	// to tell the fleet controller when it changes.
	authSeen keyed[types.NamespacedName, string]
	// authChanged carries those changes (AuthChanged).
	authChanged chan event.GenericEvent
}

// NewRedisFleetReconciler returns a reconciler whose Provisioner is ready
// for SetupWithManager, failoverWatch and the redis-handover controller.
func NewRedisFleetReconciler(r *RedisFleetReconciler) *RedisFleetReconciler {
	r.authChanged = make(chan event.GenericEvent, 1024)
	r.redis = &redisfleet.Provisioner{Client: r.Client, Scheme: r.Scheme, APIReader: r.APIReader, Recorder: r.Recorder,
		RedisDialer: r.RedisDialer, DefaultRedisImage: r.DefaultRedisImage, Apply: newChildren(r.Client, r.Scheme, r.APIReader).apply,
		Confirm: r.Acks.Confirm}
	return r
}

// AuthChanged sends a fleet's name whenever a pass found its limiters'
// Redis password other than the last pass did: the fleet controller then
// reads the auth Secret and rolls the limiters.
func (r *RedisFleetReconciler) AuthChanged() <-chan event.GenericEvent { return r.authChanged }

// SetupWithManager registers the controller, and the redis-handover
// controller beside it, and what they watch.
func (r *RedisFleetReconciler) SetupWithManager(mgr ctrl.Manager) error {
	// The fast path of a Redis pod's deletion: the fleet's full pass may
	// be busy for longer than the pod's preStop sleep.
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("redis-handover").
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(fleetOfRedisPod), builder.WithPredicates(redisPodTerminating)).
		Complete(reconcile.Func(r.handOver)); err != nil {
		return err
	}
	redisOnly := builder.WithPredicates(redisObject)
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1beta1.LimiterFleet{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, redisfleet.DataLossAckChanged))).
		Owns(&appsv1.StatefulSet{}, redisOnly).
		Owns(&policyv1.PodDisruptionBudget{}, redisOnly).
		Owns(&corev1.Service{}, redisOnly).
		Owns(&corev1.ConfigMap{}, redisOnly).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(fleetOfRedisPod), builder.WithPredicates(redisPodChanged)).
		// RedisReady says whether the limiter pods reach their store.
		WatchesRawSource(source.Channel(r.Acks.Subscribe(), &handler.EnqueueRequestForObject{})).
		Named("redisfleet").
		Complete(r)
}

// Reconcile runs one Redis pass (redisfleet.Provisioner.Reconcile) and
// writes its part of the status once.
func (r *RedisFleetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	fleet := &v1beta1.LimiterFleet{}
	if err := r.Get(ctx, req.NamespacedName, fleet); err != nil {
		if apierrors.IsNotFound(err) {
			r.redis.Forget(req.NamespacedName)
			r.authSeen.delete(req.NamespacedName)
			redisfleet.ForgetFleet(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !fleet.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	s := &redisScope{fleet: fleet}
	_, s.storeErr = resources.StoreURL(fleet)
	pass, err := r.redis.Reconcile(ctx, fleet)
	if err == nil {
		s.redis = pass.Scope
		r.tellAuth(ctx, req.NamespacedName, pass.LimiterAuth)
	}
	s.acks, _ = r.Acks.Acks(req.NamespacedName)
	statusErr := r.patchStatus(ctx, s, err)
	if isObjectInTheWay(err) {
		// Reported in RedisReady; retrying sooner would not move it.
		return ctrl.Result{RequeueAfter: ObjectInTheWayRetry}, statusErr
	}
	return ctrl.Result{RequeueAfter: pass.RequeueAfter}, errors.Join(err, statusErr)
}

// tellAuth sends the fleet on AuthChanged when its limiters' auth hash is
// not the one the last pass saw ("": the Secret was not read, no news).
func (r *RedisFleetReconciler) tellAuth(ctx context.Context, fleet types.NamespacedName, hash string) {
	if last, ok := r.authSeen.load(fleet); hash == "" || (ok && last == hash) {
		return
	}
	r.authSeen.store(fleet, hash)
	ev := event.GenericEvent{Object: &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: fleet.Namespace, Name: fleet.Name}}}
	select {
	case r.authChanged <- ev:
	case <-ctx.Done():
	}
}

// patchStatus computes this controller's part of the status from the
// pass and applies it, only when it changed.
func (r *RedisFleetReconciler) patchStatus(ctx context.Context, s *redisScope, reconcileErr error) error {
	latest := &v1beta1.LimiterFleet{}
	if err := r.Get(ctx, client.ObjectKeyFromObject(s.fleet), latest); err != nil {
		return client.IgnoreNotFound(err)
	}
	next := latest.DeepCopy()
	computeRedisStatus(next, s, reconcileErr)
	return writeFleetStatus(ctx, r.Client, latest, next, RedisStatusFieldOwner)
}

// handOver has a terminating Redis master's replica take its slots over
// (redisfleet.Provisioner.HandOver), apart from the fleet's full pass.
func (r *RedisFleetReconciler) handOver(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	fleet := &v1beta1.LimiterFleet{}
	if err := r.Get(ctx, req.NamespacedName, fleet); err != nil || !fleet.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	after, err := r.redis.HandOver(ctx, fleet)
	return reconcile.Result{RequeueAfter: after}, err
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
	CreateFunc:  func(e event.CreateEvent) bool { return isRedisObject(e.Object) },
	DeleteFunc:  func(e event.DeleteEvent) bool { return isRedisObject(e.Object) },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, okO := e.ObjectOld.(*corev1.Pod)
		n, okN := e.ObjectNew.(*corev1.Pod)
		if !okO || !okN || !isRedisObject(n) {
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
	return isRedisObject(obj) && !obj.GetDeletionTimestamp().IsZero()
})

// redisObject passes the events of the objects RedisFleetReconciler
// makes (labelled as Redis's); notRedisObject the others'.
var (
	redisObject    = predicate.NewPredicateFuncs(isRedisObject)
	notRedisObject = predicate.NewPredicateFuncs(func(obj client.Object) bool { return !isRedisObject(obj) })
)

func isRedisObject(obj client.Object) bool {
	return obj.GetLabels()[resources.LabelName] == resources.RedisAppName
}
