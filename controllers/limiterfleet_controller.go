package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/observe"
	"github.com/sluice-dev/sluice/controllers/redisfleet"
	"github.com/sluice-dev/sluice/controllers/resources"
	"github.com/sluice-dev/sluice/limiter/config"
)

// FieldOwner is the server-side apply field manager of everything the
// operator renders.
const FieldOwner = "sluice-operator"

// LimiterFleetReconciler compiles the policies a fleet selects into a
// snapshot ConfigMap, renders the fleet's limiter Deployment, Service and
// RBAC, and reports what the fleet's ready pods have loaded. The fleet's
// Redis store is RedisFleetReconciler's job, its admin TLS
// AdminTLSReconciler's; this controller reads the RedisReady and
// AdminTLSReady they write to decide Ready.
type LimiterFleetReconciler struct {
	client.Client
	Scheme *runtime.Scheme
	// Acks tracks which snapshot each ready limiter pod has loaded.
	Acks PodAcks
	// DefaultImage is the limiter image of fleets that name none.
	DefaultImage string
	// APIReader reads Secrets uncached; nil means Client.
	APIReader client.Reader
	// RedisAuthChanged tells when RedisFleetReconciler wrote a fleet's
	// Redis auth Secret anew (RedisFleetReconciler.AuthChanged); nil: none.
	RedisAuthChanged <-chan event.GenericEvent

	// NetworkPolicies say who the operator is, for the fleets'
	// NetworkPolicies; none are rendered when it is empty.
	NetworkPolicies resources.NetworkPolicyOptions

	// children applies the fleet's limiter objects (set by SetupWithManager).
	children *children
	topKKeys topKKeysMade
	// apiServer are the API server's endpoints, read at apiServerRead.
	apiServerMu   sync.Mutex
	apiServer     []string
	apiServerRead time.Time
	verdicts      verdictCache
	// Fits shares each fleet's snapshot refusals with the policy
	// controller; nil keeps them to the fleet's status.
	Fits *SnapshotFits
}

// +kubebuilder:rbac:groups=ratelimit.sluice.dev,resources=limiterfleets,verbs=get;list;watch
// +kubebuilder:rbac:groups=ratelimit.sluice.dev,resources=limiterfleets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ratelimit.sluice.dev,resources=ratelimitpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps;services;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=replicasets,verbs=get;list;watch

// fleetScope carries one reconcile pass's observations to the status.
type fleetScope struct {
	fleet        *v1beta1.LimiterFleet
	document     []byte
	version      string
	policies     int
	compiled     bool
	refused      int // selected policies left out: the snapshot is full
	storeErr     error
	endpoints    []string
	acks         []observe.PodAck
	complete     bool // every ready pod has answered at least once
	requeueAfter time.Duration
	// served maps the UID of each policy the fleet serves to its
	// "namespace/name": the only policies its pods may report on.
	served map[string]string
	// untrusted are the ready endpoints that are not the fleet's own
	// pods, with why: the operator neither polls nor counts them.
	untrusted []string
}

// Reconcile runs the phases in order and always ends with one status patch.
func (r *LimiterFleetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	fleet := &v1beta1.LimiterFleet{}
	if err := r.Get(ctx, req.NamespacedName, fleet); err != nil {
		if apierrors.IsNotFound(err) {
			r.Acks.Forget(req.NamespacedName)
			r.Fits.forget(ctx, req.NamespacedName)
			forgetFleetMetrics(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !fleet.DeletionTimestamp.IsZero() {
		r.Acks.Forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	s := &fleetScope{fleet: fleet}
	var err error
	for _, phase := range []func(context.Context, *fleetScope) error{
		r.observeEndpoints,
		r.reconcileSnapshot,
		r.reconcileTopKKey,
		r.reconcileLimiters,
		r.reconcileNetworkPolicies,
		r.observeAcks,
	} {
		if err = phase(ctx, s); err != nil {
			break
		}
	}
	if isObjectInTheWay(err) {
		// Reported in Ready; retrying sooner would not move it.
		return ctrl.Result{RequeueAfter: ObjectInTheWayRetry}, r.patchStatus(ctx, s, err)
	}
	return ctrl.Result{RequeueAfter: s.requeueAfter}, errors.Join(err, r.patchStatus(ctx, s, err))
}

// reconcileSnapshot compiles the accepted policies the fleet selects and
// writes the snapshot ConfigMap, only when its content changed.
func (r *LimiterFleetReconciler) reconcileSnapshot(ctx context.Context, s *fleetScope) error {
	selected, err := r.selectPolicies(ctx, s.fleet)
	if err != nil {
		return err
	}
	s.served = observe.ServedPolicies(selected)
	enforcement := config.EnforcementEnabled
	if s.fleet.Spec.EffectiveEnforcement() == v1beta1.EnforcementDisabled {
		enforcement = config.EnforcementDisabled
	}
	started := time.Now()
	fit, err := r.fitSnapshot(ctx, s, selected, enforcement)
	if err != nil {
		return err
	}
	fleetLabel := s.fleet.Namespace + "/" + s.fleet.Name
	snapshotCompileSeconds.WithLabelValues(fleetLabel).Observe(time.Since(started).Seconds())
	snapshotBytes.WithLabelValues(fleetLabel).Set(float64(len(s.document)))
	desired := fit.cm
	if err := controllerutil.SetControllerReference(s.fleet, desired, r.Scheme); err != nil {
		return err
	}
	existing := &corev1.ConfigMap{}
	found, err := r.children.readOwned(ctx, s.fleet, desired, existing)
	switch {
	case err != nil:
		return err
	case !found:
		logf.FromContext(ctx).Info("Writing snapshot", "configMap", desired.Name, "version", s.version, "policies", s.policies)
		return r.Create(ctx, desired)
	}
	if configMapMatches(existing, desired) {
		return nil
	}
	// Replace rather than apply, so hand edits (extra keys too) are undone.
	logf.FromContext(ctx).Info("Writing snapshot", "configMap", desired.Name, "version", s.version, "policies", s.policies)
	existing.Data, existing.BinaryData = desired.Data, desired.BinaryData
	existing.Labels = mergeStrings(existing.Labels, desired.Labels)
	existing.Annotations = mergeStrings(existing.Annotations, desired.Annotations)
	existing.OwnerReferences = desired.OwnerReferences
	return r.Update(ctx, existing)
}

func configMapMatches(existing, desired *corev1.ConfigMap) bool {
	return maps.Equal(existing.Data, desired.Data) &&
		maps.EqualFunc(existing.BinaryData, desired.BinaryData, slices.Equal) &&
		equality.Semantic.DeepEqual(existing.OwnerReferences, desired.OwnerReferences) &&
		subset(desired.Labels, existing.Labels) && subset(desired.Annotations, existing.Annotations)
}

func subset(want, have map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func mergeStrings(dst, src map[string]string) map[string]string {
	if dst == nil {
		dst = map[string]string{}
	}
	maps.Copy(dst, src)
	return dst
}

// selectPolicies returns the accepted policies the fleet serves (allows
// and selects), sorted. It reads only the policies of the domains the
// fleet may serve (fleetDomains), each domain's through the cache's
// domain index, with the fleets and namespaces their acceptance depends
// on (readDomainTenancy), and decides their acceptance per domain, as the
// policy controller does: conflicts are decided within a domain. No pass
// lists every policy, fleet or namespace.
func (r *LimiterFleetReconciler) selectPolicies(ctx context.Context, fleet *v1beta1.LimiterFleet) ([]v1beta1.RateLimitPolicy, error) {
	domains, err := r.fleetDomains(ctx, fleet)
	if err != nil || len(domains) == 0 {
		return nil, err
	}
	var out []v1beta1.RateLimitPolicy
	for _, domain := range domains {
		var list v1beta1.RateLimitPolicyList
		if err := r.List(ctx, &list, client.MatchingFields{domainIndex: domain}); err != nil {
			return nil, err
		}
		tn, err := readDomainTenancy(ctx, r.Client, domain, list.Items)
		if err != nil {
			return nil, err
		}
		verdicts := r.verdicts.get(domain, list.Items, tn)
		for i := range list.Items {
			p := &list.Items[i]
			if !verdicts[client.ObjectKeyFromObject(p)].Accepted {
				continue
			}
			ok, err := fleetServes(fleet, p, tn.nsLabels[p.Namespace])
			if err != nil {
				return nil, fmt.Errorf("fleet selectors: %w", err)
			}
			if ok {
				out = append(out, *p)
			}
		}
	}
	slices.SortFunc(out, func(a, b v1beta1.RateLimitPolicy) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

// fleetDomains lists, sorted, the domains whose policies the fleet may
// serve: those spec.domains lists, or, when it lists none, those used in
// the fleet's own namespace (the only one it then serves).
func (r *LimiterFleetReconciler) fleetDomains(ctx context.Context, fleet *v1beta1.LimiterFleet) ([]string, error) {
	var out []string
	for _, d := range fleet.Spec.Domains {
		out = append(out, d.Name)
	}
	if len(fleet.Spec.Domains) == 0 {
		var list v1beta1.RateLimitPolicyList
		// Read-only: domains alone, no copy of the policies.
		if err := r.List(ctx, &list, client.InNamespace(fleet.Namespace), client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		for i := range list.Items {
			out = append(out, list.Items[i].Spec.Domain)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// reconcileLimiters applies the limiter ServiceAccount, Role, RoleBinding,
// Services (ClusterIP and headless), Deployment and PodDisruptionBudget,
// each owned by the fleet.
func (r *LimiterFleetReconciler) reconcileLimiters(ctx context.Context, s *fleetScope) error {
	storeURL, err := resources.StoreURL(s.fleet)
	if err != nil {
		return nil // RedisFleetReconciler reports it in RedisReady; the snapshot stays served
	}
	auth, err := r.limiterAuthHash(ctx, s)
	if err != nil {
		return err
	}
	objs := []client.Object{
		resources.BuildLimiterServiceAccount(s.fleet),
		resources.BuildLimiterRole(s.fleet),
		resources.BuildLimiterRoleBinding(s.fleet),
		resources.BuildLimiterService(s.fleet),
		resources.BuildLimiterHeadlessService(s.fleet),
		resources.BuildLimiterPDB(s.fleet),
	}
	if auth != awaitingRedisAuth {
		objs = append(objs, resources.BuildLimiterDeployment(s.fleet, resources.LimiterDeploymentOptions{DefaultImage: r.DefaultImage, StoreURL: storeURL, RedisAuth: auth}))
	} else if s.requeueAfter == 0 || s.requeueAfter > awaitRedisAuthRetry {
		// RedisFleetReconciler tells when it wrote the Secret
		// (RedisAuthChanged); the retry covers a missed word.
		s.requeueAfter = awaitRedisAuthRetry
	}
	for _, obj := range objs {
		if err := r.children.apply(ctx, s.fleet, obj); err != nil {
			return fmt.Errorf("applying %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return nil
}

// awaitingRedisAuth is limiterAuthHash's answer for a Cluster fleet whose
// limiter Deployment is not made yet and whose Redis auth Secret is not
// written yet: the Deployment waits for it, rather than being made without
// the Secret's hash and rolled once the Redis controller writes it.
const awaitingRedisAuth = "\x00awaiting"

// awaitRedisAuthRetry is how often a fleet awaiting its Redis auth Secret
// is looked at again without word from RedisFleetReconciler.
const awaitRedisAuthRetry = 5 * time.Second

// limiterAuthHash is the limiter pods' RedisLimiterAuthAnnotation:
// redisfleet.RedisLimiterAuthHash of the fleet's Redis auth Secret, read by
// name through the API reader (Secrets are not cached), or, when the Secret
// could not be read (or is not the fleet's, or has no limiter user yet),
// the one the Deployment has, so that a passing read error never rolls
// the limiters; awaitingRedisAuth when there is no Deployment yet either.
// "" outside mode Cluster.
func (r *LimiterFleetReconciler) limiterAuthHash(ctx context.Context, s *fleetScope) (string, error) {
	if s.fleet.Spec.EffectiveStoreType() != v1beta1.StoreCluster {
		return "", nil
	}
	secret := &corev1.Secret{}
	err := r.secretReader().Get(ctx, client.ObjectKey{Namespace: s.fleet.Namespace, Name: resources.RedisAuthSecretName(s.fleet)}, secret)
	if err == nil && metav1.IsControlledBy(secret, s.fleet) {
		if hash := redisfleet.RedisLimiterAuthHash(secret); hash != "" {
			return hash, nil
		}
	}
	var dep appsv1.Deployment
	err = r.Get(ctx, client.ObjectKey{Namespace: s.fleet.Namespace, Name: resources.LimiterName(s.fleet)}, &dep)
	if apierrors.IsNotFound(err) {
		return awaitingRedisAuth, nil
	}
	return dep.Spec.Template.Annotations[resources.RedisLimiterAuthAnnotation], err
}

// patchStatus computes this controller's part of the status from this
// pass's observations and applies it once, only when it changed.
func (r *LimiterFleetReconciler) patchStatus(ctx context.Context, s *fleetScope, reconcileErr error) error {
	latest := &v1beta1.LimiterFleet{}
	if err := r.Get(ctx, client.ObjectKeyFromObject(s.fleet), latest); err != nil {
		return client.IgnoreNotFound(err)
	}
	next := latest.DeepCopy()
	computeFleetStatus(next, s, reconcileErr)
	return writeFleetStatus(ctx, r.Client, latest, next, FleetStatusFieldOwner)
}

func (r *LimiterFleetReconciler) secretReader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}
