// Command operator is the Sluice operator: it compiles RateLimitPolicies
// into versioned snapshots that limiter pods hot-load, renders each
// LimiterFleet's limiters, and writes what is enforced back into status.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers"
	"github.com/sluice-dev/sluice/controllers/observe"
)

func main() {
	var (
		metricsAddr  string
		probeAddr    string
		leaderElect  bool
		leaderNS     string
		limiterImage string
		redisImage   string
		watchNS      string
		window       time.Duration
		tokenFile    string
		adminSA      string
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Prometheus metrics `address` (0 disables), served over HTTPS to callers whose bearer token the API server authenticates and authorizes for get on the non-resource URL /metrics")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "/healthz and /readyz `address`")
	flag.BoolVar(&leaderElect, "leader-elect", false, "elect a leader, so that only one replica reconciles")
	flag.StringVar(&leaderNS, "leader-election-namespace", "", "namespace of the leader election Lease (default: the pod's)")
	flag.StringVar(&limiterImage, "limiter-image", "ghcr.io/sluice-dev/sluice-limiter:latest", "limiter `image` of fleets that name none")
	flag.StringVar(&redisImage, "redis-image", v1beta1.DefaultRedisImage, "Redis `image` of the Redis Cluster of fleets that name none (spec.store.cluster.image)")
	flag.StringVar(&watchNS, "watch-namespaces", "", "comma-separated `namespaces` whose policies and fleets the operator watches (default: all)")
	flag.DurationVar(&window, "enforcement-window", observe.DefaultEnforcementWindow, "`window` of the decision counts in each policy's status.enforcement")
	flag.StringVar(&adminSA, "admin-token-service-account", "", "`namespace/name` of the operator's own ServiceAccount: for each fleet, the operator mints a token of it for that fleet's audience ("+limiterwire.FleetAdminAudience("NAMESPACE", "FLEET")+") and sends it (over TLS) to that fleet's limiter pods only")
	flag.StringVar(&tokenFile, "limiter-token-file", "", "`file` of one bearer token sent to every fleet's admin plane instead of minted ones (for limiters started by hand with one --admin-token-audience; the operator's fleets require their own)")
	netpol := networkPolicyFlags(flag.CommandLine)
	timing := leaderTimingFlags(flag.CommandLine)
	webhookOpts := webhookFlags(flag.CommandLine)
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	// The operator reads and writes v1beta1 only; v1alpha1 is in the scheme
	// for the conversion webhook alone, which converts with it for
	// v1alpha1 clients.
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	utilruntime.Must(v1beta1.AddToScheme(scheme))

	if err := timing.validate(); err != nil {
		log.Error(err, "Bad flags")
		os.Exit(2)
	}
	cfg := ctrl.GetConfigOrDie()
	var leaderLock resourcelock.Interface
	if leaderElect {
		var err error
		if leaderLock, err = newLeaderLock(cfg, leaderNS); err != nil {
			log.Error(err, "Unable to make the leader election lock")
			os.Exit(1)
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		// The metrics are not open to every pod: HTTPS (a self-signed
		// certificate), and a token the API server reviews (TokenReview,
		// SubjectAccessReview of get /metrics), as kube-rbac-proxy does.
		Metrics: metricsserver.Options{BindAddress: metricsAddr, SecureServing: true,
			FilterProvider: metricsAuth},
		HealthProbeBindAddress:              probeAddr,
		LeaderElection:                      leaderElect,
		LeaderElectionID:                    leaderElectionID,
		LeaderElectionNamespace:             leaderNS,
		LeaderElectionResourceLockInterface: leaderLock,
		LeaseDuration:                       &timing.LeaseDuration,
		RenewDeadline:                       &timing.RenewDeadline,
		RetryPeriod:                         &timing.RetryPeriod,
		// Hand the Lease over on SIGTERM rather than let the next leader
		// wait out its LeaseDuration: main exits as soon as the manager
		// returns.
		LeaderElectionReleaseOnCancel: true,
		// The release comes after every runnable stopped: bound that
		// well inside the pod's terminationGracePeriodSeconds (30).
		GracefulShutdownTimeout: ptr.To(10 * time.Second),
		Cache:                   cache.Options{DefaultNamespaces: watchNamespaces(watchNS), ByObject: controllers.CacheByObject()},
	})
	if err != nil {
		log.Error(err, "Unable to create the manager")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	// Never the pod's own ServiceAccount token: the API server takes it,
	// so a limiter pod could act with it as the operator.
	sa, err := serviceAccountFlag(adminSA)
	if err != nil {
		log.Error(err, "Bad flags")
		os.Exit(2)
	}
	if tokenFile == "" && sa.Name == "" {
		log.Error(nil, "No token for the limiters' admin plane: they will refuse the operator's calls; name the operator's ServiceAccount with --admin-token-service-account")
	}
	np, err := netpol()
	if err != nil {
		log.Error(err, "Bad flags")
		os.Exit(2)
	}
	wh, serveWebhook, err := webhookOpts(np.OperatorNamespace)
	if err != nil {
		log.Error(err, "Bad flags")
		os.Exit(2)
	}
	if err := controllers.Setup(ctx, mgr, controllers.Options{LimiterImage: limiterImage, RedisImage: redisImage, EnforcementWindow: window, AdminTokenFile: tokenFile, AdminServiceAccount: sa, NetworkPolicies: np}); err != nil {
		log.Error(err, "Unable to set up the controllers")
		os.Exit(1)
	}
	utilruntime.Must(mgr.AddHealthzCheck("healthz", healthz.Ping))
	utilruntime.Must(mgr.AddReadyzCheck("readyz", healthz.Ping))
	if serveWebhook {
		ready, err := controllers.SetupConversionWebhook(ctx, mgr, wh)
		if err != nil {
			log.Error(err, "Unable to set up the conversion webhook")
			os.Exit(1)
		}
		utilruntime.Must(mgr.AddReadyzCheck("conversion-webhook", ready))
	}
	log.Info("Starting the manager")
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "The manager stopped")
		os.Exit(1)
	}
}

// serviceAccountFlag parses --admin-token-service-account, namespace/name;
// "" is none.
func serviceAccountFlag(v string) (types.NamespacedName, error) {
	if v == "" {
		return types.NamespacedName{}, nil
	}
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("--admin-token-service-account %q: want namespace/name", v)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// watchNamespaces turns --watch-namespaces into the cache's namespaces: nil
// (every namespace) when the flag is empty. Cluster-scoped objects, such as
// Namespaces, are watched either way.
func watchNamespaces(flagValue string) map[string]cache.Config {
	var namespaces map[string]cache.Config
	for _, ns := range strings.Split(flagValue, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			if namespaces == nil {
				namespaces = map[string]cache.Config{}
			}
			namespaces[ns] = cache.Config{}
		}
	}
	return namespaces
}
