package controllers

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/observe"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// Options configure the operator's controllers.
type Options struct {
	// LimiterImage is the image of fleets that name none.
	LimiterImage string
	// RedisImage is the Redis image of Cluster fleets that name none
	// (spec.store.cluster.image); empty means v1beta1.DefaultRedisImage.
	RedisImage string
	// AckClient, when set, is the base of the calls to limiter pods' admin
	// endpoint: its *http.Transport (dialer, timeouts) and Timeout, to
	// which each fleet's TLS is added.
	AckClient *http.Client
	// AdminServiceAccount is the operator's own ServiceAccount: for each
	// fleet, the operator mints a token of it for that fleet's audience
	// (limiterwire.FleetAdminAudience, which the fleet's limiters require
	// and the API server itself refuses) with the TokenRequest API, and
	// sends it to that fleet's pods only.
	AdminServiceAccount types.NamespacedName
	// AdminTokenFile, when set, replaces the minted tokens with one for
	// every fleet, read from a file (and again as it changes): for
	// limiters started with one audience by hand, as in tests.
	AdminTokenFile string
	// EnforcementWindow is the window of status.enforcement; 0 means
	// DefaultEnforcementWindow (5m).
	EnforcementWindow time.Duration
	// CollectInterval is how often the collector reads the limiter pods'
	// stats; 0 means DefaultCollectInterval (5s).
	CollectInterval time.Duration
	// EnforcementMinWrite is the least time between two writes of one
	// policy's status.enforcement; 0 means DefaultEnforcementMinWrite (10s).
	EnforcementMinWrite time.Duration
	// CollectTimeout bounds one pod's stats answer; 0 means 2s.
	CollectTimeout time.Duration
	// RedisDialer, when set, opens the operator's connections to Redis pods
	// (tests route pod IPs with it); nil dials TCP.
	RedisDialer func(ctx context.Context, network, addr string) (net.Conn, error)
	// NetworkPolicies say who the operator is and which namespace scrapes
	// the limiters, for the NetworkPolicies it renders for each fleet; with
	// no OperatorNamespace, it renders none.
	NetworkPolicies resources.NetworkPolicyOptions
}

// Leader election and events.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// The limiter pods' admin plane (--admin-auth=kubernetes authorizes the
// operator's token for these non-resource URLs).
// +kubebuilder:rbac:urls=/v1/admin/*,verbs=get

// The operator's own /metrics reviews its callers' tokens (cmd/operator).
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Setup adds the acknowledgement tracker, the enforcement stats collector
// and the controllers to mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	// The admin plane is HTTPS only, each fleet's pods verified with the
	// fleet's CA (admin_tls.go): the token never crosses in clear.
	tokens, err := adminTokens(mgr, opts)
	if err != nil {
		return err
	}
	admin, err := observe.NewAdminClients(opts.AckClient, opts.AdminTokenFile, tokens)
	if err != nil {
		return err
	}
	acks := observe.NewAckTracker()
	acks.Admin = admin
	if err := mgr.Add(acks); err != nil {
		return err
	}
	collector := &observe.Collector{Client: mgr.GetClient(), WriteEnforcement: func(ctx context.Context, pol *v1beta1.RateLimitPolicy, e *v1beta1.EnforcementStatus) error {
		return applyEnforcement(ctx, mgr.GetClient(), pol, e)
	}, WriteRegions: func(ctx context.Context, fleet *v1beta1.LimiterFleet, regions []v1beta1.RegionStatus, cond *metav1.Condition) error {
		return applyFleetRegions(ctx, mgr.GetClient(), fleet, regions, cond)
	}, Acks: acks, Admin: admin, Interval: opts.CollectInterval,
		Window: opts.EnforcementWindow, MinWrite: opts.EnforcementMinWrite, Timeout: opts.CollectTimeout}
	if err := mgr.Add(collector); err != nil {
		return err
	}
	redis := NewRedisFleetReconciler(&RedisFleetReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Acks: acks, DefaultRedisImage: opts.RedisImage,
		APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorderFor("sluice-operator"), RedisDialer: opts.RedisDialer})
	if err := redis.SetupWithManager(mgr); err != nil {
		return err
	}
	fits := NewSnapshotFits()
	fleets := &LimiterFleetReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Acks: acks, Fits: fits, DefaultImage: opts.LimiterImage,
		APIReader: mgr.GetAPIReader(), RedisAuthChanged: redis.AuthChanged()}
	fleets.NetworkPolicies = opts.NetworkPolicies
	if err := fleets.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	if err := (&AdminTLSReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), APIReader: mgr.GetAPIReader(), Admin: admin}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&authDelegationReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := mgr.Add(&failoverWatch{client: mgr.GetClient(), redis: redis.redis, elected: mgr.Elected(),
		every: time.Second, timeout: 500 * time.Millisecond}); err != nil {
		return err
	}
	return (&RateLimitPolicyReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Acks: acks, Fits: fits}).SetupWithManager(ctx, mgr)
}

// CacheByObject restricts the manager's cache of Pods to the Redis and
// limiter pods of fleets, and of ReplicaSets to the limiters': the operator
// watches Redis pods for IP changes, checks that limiter pods are the
// fleet's own (observe.TrustedEndpoints), and reads no other Pod or ReplicaSet. Of
// every other kind it renders, the cache holds only the objects labelled as
// the operator's own (see ownership.go).
func CacheByObject() map[client.Object]cache.ByObject {
	byObject := managedByObject()
	byObject[&corev1.Pod{}] = cache.ByObject{Label: fleetPods}
	byObject[&appsv1.ReplicaSet{}] = cache.ByObject{Label: labels.SelectorFromSet(labels.Set{resources.LabelName: resources.LimiterAppName})}
	return byObject
}

// fleetPods selects the Redis and limiter pods of every fleet.
var fleetPods = func() labels.Selector {
	req, err := labels.NewRequirement(resources.LabelName, selection.In, []string{resources.RedisAppName, resources.LimiterAppName})
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*req)
}()

// adminTokens is the source of each fleet's admin token: nil when
// opts.AdminTokenFile sends one token to every fleet. Minting needs create
// on serviceaccounts/token of that one ServiceAccount, which the chart
// grants with a Role naming it (no kubebuilder marker: the generated
// ClusterRole would let the operator mint any ServiceAccount's token).
func adminTokens(mgr ctrl.Manager, opts Options) (observe.TokenSource, error) {
	sa := opts.AdminServiceAccount
	if opts.AdminTokenFile != "" || sa.Name == "" {
		return nil, nil
	}
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("the admin token minter: %w", err)
	}
	return &observe.TokenMinter{ServiceAccounts: cs.CoreV1().ServiceAccounts(sa.Namespace), Name: sa.Name}, nil
}
