package controllers

import (
	"context"
	"net"
	"net/http"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Options configure the operator's controllers.
type Options struct {
	// LimiterImage is the image of fleets that name none.
	LimiterImage string
	// RedisImage is the Redis image of Cluster fleets that name none
	// (spec.redis.image); empty means v1alpha1.DefaultRedisImage.
	RedisImage string
	// AckClient, when set, makes the calls to limiter pods' admin endpoint.
	AckClient *http.Client
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
	NetworkPolicies NetworkPolicyOptions
}

// Leader election and events.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Setup adds the acknowledgement tracker, the enforcement stats collector
// and both controllers to mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	acks := NewAckTracker()
	acks.Client = opts.AckClient
	if err := mgr.Add(acks); err != nil {
		return err
	}
	collector := &Collector{Client: mgr.GetClient(), Acks: acks, HTTP: opts.AckClient, Interval: opts.CollectInterval,
		Window: opts.EnforcementWindow, MinWrite: opts.EnforcementMinWrite, Timeout: opts.CollectTimeout}
	if err := mgr.Add(collector); err != nil {
		return err
	}
	fleets := &LimiterFleetReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Acks: acks, DefaultImage: opts.LimiterImage, DefaultRedisImage: opts.RedisImage,
		APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorderFor("sluice-operator"), RedisDialer: opts.RedisDialer}
	fleets.NetworkPolicies = opts.NetworkPolicies
	if err := fleets.SetupWithManager(mgr); err != nil {
		return err
	}
	return (&RateLimitPolicyReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Acks: acks}).SetupWithManager(ctx, mgr)
}

// CacheByObject restricts the manager's cache of Pods to the Redis and
// limiter pods of fleets, and of ReplicaSets to the limiters': the operator
// watches Redis pods for IP changes, checks that limiter pods are the
// fleet's own (trustedEndpoints), and reads no other Pod or ReplicaSet.
func CacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}:        {Label: fleetPods},
		&appsv1.ReplicaSet{}: {Label: labels.SelectorFromSet(labels.Set{LabelName: LimiterAppName})},
	}
}

// fleetPods selects the Redis and limiter pods of every fleet.
var fleetPods = func() labels.Selector {
	req, err := labels.NewRequirement(LabelName, selection.In, []string{RedisAppName, LimiterAppName})
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*req)
}()
