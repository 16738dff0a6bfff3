// Package app assembles a standalone limiter process: it loads the policy
// file or watches the snapshot ConfigMap, opens the store, builds the
// service and its servers, and hot-reloads the policies. cmd/limiter parses
// flags and calls Run.
package app

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/limiter/adminauth"
	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/config/kube"
	"github.com/sluice-dev/sluice/limiter/regions"
	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store/localtier"
	"github.com/sluice-dev/sluice/limiter/store/memory"
	"github.com/sluice-dev/sluice/limiter/store/redis"
	"github.com/sluice-dev/sluice/limiter/tracing"
)

// Config is what a limiter process is told on its command line.
type Config struct {
	// Policies is the RateLimitPolicy YAML or envoyproxy/ratelimit file,
	// or a folder of either (config.LoadPath), watched for changes.
	// Exactly one of Policies and SnapshotConfigMap is set.
	Policies string
	// SnapshotConfigMap is the NAMESPACE/NAME of the snapshot ConfigMap an
	// operator writes, watched through the API server.
	SnapshotConfigMap string
	// Kubeconfig is the kubeconfig file for SnapshotConfigMap; empty means
	// $KUBECONFIG, the in-cluster config, or ~/.kube/config.
	Kubeconfig string
	// Store is "memory", redis://[user:pass@]host:port[/db] or
	// redis-cluster://[user:pass@]host:port,host:port,...
	Store string
	// GRPCAddr and HTTPAddr are the data plane listeners' addresses.
	GRPCAddr, HTTPAddr string
	// Region places the limiter in one of several regions sharing the
	// Global policies (regions.go); zero: none.
	Region RegionConfig
	// AdminAddr is the admin plane listener's address (/v1/admin/*,
	// /metrics); empty means server.DefaultAdminAddr.
	AdminAddr string
	// AdminAuth guards the admin plane: limiterwire.AdminAuthNone (open,
	// for a limiter on loopback) or limiterwire.AdminAuthKubernetes (a
	// bearer token that the API server of Kubeconfig reviews). Empty means
	// none.
	AdminAuth string
	// AdminTokenAudience is the audience of the tokens that may call
	// /v1/admin/* with AdminAuth kubernetes ("": the API server's own);
	// /metrics takes tokens for the API server's audiences.
	AdminTokenAudience string
	// AdminTLSCert and AdminTLSKey, when set (both), make the admin plane
	// serve HTTPS only with this certificate and key, reloaded on change.
	AdminTLSCert, AdminTLSKey string
	// RedisTimeout is the deadline of every Redis round trip.
	RedisTimeout time.Duration
	// RedisCAFile is a PEM file of the CA certificates that a rediss://
	// store's server certificates are verified against; empty means the
	// system's.
	RedisCAFile string
	// RedisTLSServerName, when set, is the name a rediss:// store's server
	// certificates must carry, instead of each node's address.
	RedisTLSServerName string
	// MemoryMaxKeys bounds the memory store; 0 means its default.
	MemoryMaxKeys int
	// MemoryMaxBytes bounds the memory store's counters by their estimated
	// bytes (memory.Options.MaxBytes); 0 means DefaultMemoryMaxBytes.
	MemoryMaxBytes int64
	// EnforcementDisabled is this pod's kill switch (--enforcement=disabled):
	// every request allowed, would-be denials counted as shadow.
	EnforcementDisabled bool
	// IdempotencyEntry is the RLS descriptor entry key that carries an
	// idempotency key; empty means service.DefaultIdempotencyEntry.
	IdempotencyEntry string
	// AcceptEntry is the RLS descriptor entry key that carries the
	// client's Accept header; empty means service.DefaultAcceptEntry.
	AcceptEntry string
	// IdempotencyTTL is how long a first decision is replayed to retries;
	// 0 means 24h.
	IdempotencyTTL time.Duration
	// IdempotencyMaxReplays is how many times a first decision is replayed
	// to retries; 0 means store.DefaultIdempotencyMaxReplays.
	IdempotencyMaxReplays int64
	// IdempotencyMaxRecords bounds the live idempotency records of one
	// counter; 0 means store.DefaultIdempotencyMaxRecords.
	IdempotencyMaxRecords int64
	// LocalFallbackPods is the number of limiter pods sharing each limit
	// (failureMode Local enforces limit/LocalFallbackPods); 0 means 1.
	LocalFallbackPods int
	// TenantBudget is each namespace's budget when the policies come from
	// a file (a fleet's snapshot carries the fleet's spec.tenantBudget);
	// nil enforces none.
	TenantBudget *config.Budgets
	// Top turns on each policy's hottest descriptor values on the admin
	// stats endpoint and /metrics (--top-descriptors); off by default.
	Top service.TopOptions
	// ERLMaxOverride bounds a request's own limit in an ERL domain
	// (service.Options.MaxOwnLimit).
	ERLMaxOverride compiled.UnitRate
	// TrustedProxies are the peers whose X-Forwarded-For forward-auth
	// believes (--trusted-proxies).
	TrustedProxies []netip.Prefix
	// MaxHeaderBytes bounds the head of a data-plane HTTP request
	// (--max-header-bytes; 0: server.DefaultMaxHeaderBytes).
	MaxHeaderBytes int
	// DrainDelay is how long the limiter keeps answering, unready, after
	// it is told to stop and before its listeners close (--drain-delay).
	DrainDelay time.Duration
	// Tracing turns on OpenTelemetry traces of decisions (--tracing; see
	// limiter/tracing), exported over OTLP/gRPC as the standard OTEL_*
	// variables say. Off by default.
	Tracing bool
	// TraceSampleRatio is the share of decisions traced with Tracing, 0
	// to 1, drawn by the limiter whatever the caller's traceparent says.
	TraceSampleRatio float64
	// Logger receives every log; nil means slog.Default().
	Logger *slog.Logger
	// warmup, when set, replaces storeWarmup (tests).
	warmup time.Duration
}

// Run serves until ctx ends, then shuts down gracefully. It fails before
// serving when the policy file is invalid (the error names the file,
// document, object and field), the ConfigMap name or kubeconfig is, the
// store address is malformed, or a listener can't be opened. A snapshot
// ConfigMap is loaded once serving: until it is, the limiter is unready.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	var err error
	if cfg.Top, err = topKey(cfg.Top, log); err != nil {
		return err
	}
	src, snap, err := openSource(cfg)
	if err != nil {
		return err
	}
	st, pinger, desc, err := openStore(cfg)
	if err != nil {
		return err
	}
	defer st.Close()

	// The local tier credits its grants back to the store when it closes,
	// so it closes first.
	tier := localtier.New(st, localtier.Options{Logger: log})
	defer tier.Close()
	fallback := memory.New(memory.Options{MaxKeys: localFallbackMaxKeys})
	defer fallback.Close()
	bg, stopBackground := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopBackground()
	var topClock func() time.Time
	if cfg.Top.K > 0 {
		clock := service.NewCoarseClock()
		wg.Go(func() { clock.Run(bg) })
		topClock = clock.Now
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		localtier.NewCollector(tier))
	rg, err := startRegions(bg, cfg.Region, st, reg, &wg, log)
	if err != nil {
		return err
	}
	if rg != nil {
		defer rg.Close()
	}
	if ms, ok := st.(*memory.Store); ok {
		reg.MustRegister(memoryCollectors(ms)...)
	}
	tracer, err := openTracer(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer shutdownTracer(tracer, log)
	svc := service.New(st, service.Options{Registerer: reg, Logger: log, Tracing: tracer != nil,
		IdempotencyEntry: cfg.IdempotencyEntry, AcceptEntry: cfg.AcceptEntry, IdempotencyTTL: cfg.IdempotencyTTL, IdempotencyMaxReplays: cfg.IdempotencyMaxReplays, IdempotencyMaxRecords: cfg.IdempotencyMaxRecords,
		ReadyPods: cfg.LocalFallbackPods, EnforcementDisabled: cfg.EnforcementDisabled,
		Top: cfg.Top, TopClock: topClock, LocalTier: tier, Fallback: fallback, Budgets: cfg.TenantBudget, MaxOwnLimit: cfg.ERLMaxOverride, Regions: rg})
	rl := newReloader(src, svc, reg, log)
	srv, err := newServer(cfg, svc, rl, pinger, reg, log, tracer, rg)
	if err != nil {
		return err
	}
	rl.srv = srv
	log.Info("Starting limiter", "source", src.String(), "store", desc)
	if snap != nil {
		rl.onLoad(snap)
	}

	wg.Go(func() {
		if err := src.watch(bg, rl); err != nil {
			rl.watchFailed(err)
		}
	})
	err = srv.Run(ctx)
	stopBackground()
	wg.Wait()
	log.Info("Stopped")
	return err
}

// newServer opens the limiter's listeners for svc: readiness from the
// reloader, the store and the service; the admin plane guarded as cfg says.
func newServer(cfg Config, svc *service.Service, rl *reloader, pinger server.Pinger, reg *prometheus.Registry, log *slog.Logger, tracer *tracing.Tracer, rg *regions.Regions) (*server.Server, error) {
	reg.MustRegister(server.ERLStats(svc)) // the edge's names for the service's hit statistics
	var regionStatus func() any
	if rg != nil {
		regionStatus = func() any { return rg.Status() }
	}
	readiness := map[string]server.ReadinessChecker{"config": rl.check,
		"degraded": degradedCheck(svc), "enforcement": enforcementCheck(svc)}
	var storeStatus func(context.Context) (string, bool)
	var warming func() bool
	if rs, ok := pinger.(*redis.Store); ok {
		reg.MustRegister(rs.Collectors()...)
		redis.LogClientTo(log)
		w := newWarmup(rs, cmp.Or(cfg.warmup, storeWarmup))
		readiness["store"], warming = w.check, w.warming
		storeStatus = rs.Status
	} else if pinger != nil {
		readiness["store"] = server.PingCheck(pinger)
	}
	authz, err := openAdminAuth(cfg, reg, log)
	if err != nil {
		return nil, err
	}
	var adminAuth func(http.Handler) http.Handler
	var policyAccess func(*http.Request, string) (bool, error)
	if authz != nil {
		adminAuth, policyAccess = authz.Wrap, authz.CanGetPolicies
	}
	var adminTLS *tls.Config
	if cfg.AdminTLSCert != "" || cfg.AdminTLSKey != "" {
		if adminTLS, err = adminauth.ServerTLS(cfg.AdminTLSCert, cfg.AdminTLSKey, log); err != nil {
			return nil, fmt.Errorf("%s and %s: %w", limiterwire.AdminTLSCertFlag, limiterwire.AdminTLSKeyFlag, err)
		}
	}
	srv, err := server.New(svc, server.Options{
		GRPCAddr:  cfg.GRPCAddr,
		HTTPAddr:  cfg.HTTPAddr,
		AdminAddr: cfg.AdminAddr,
		AdminAuth: adminAuth,
		AdminTLS:  adminTLS,
		Metrics:   reg,
		Readiness: readiness,
		Warming:   warming,
		Logger:    log,

		SnapshotSource: rl.status,
		StoreStatus:    storeStatus,
		TrustedProxies: cfg.TrustedProxies,
		MaxHeaderBytes: cfg.MaxHeaderBytes,
		DrainDelay:     cfg.DrainDelay,
		Tracer:         tracer,
		PolicyAccess:   policyAccess,
		RegionStatus:   regionStatus,
	})
	if err != nil {
		return nil, err
	}
	if adminAuth != nil && adminTLS == nil && !isLoopback(srv.AdminAddr()) {
		log.Warn("The admin plane takes bearer tokens over plain HTTP: callers' tokens cross the network in clear; give it --admin-tls-cert and --admin-tls-key",
			"admin", srv.AdminAddr())
	}
	if adminAuth == nil && !isLoopback(srv.AdminAddr()) {
		log.Warn("The admin plane is open to anyone who can reach it: use --admin-auth=kubernetes, or an --admin-addr on loopback",
			"admin", srv.AdminAddr())
	}
	return srv, nil
}

// openAdminAuth returns the admin plane's authorizer that cfg.AdminAuth names,
// nil for none.
func openAdminAuth(cfg Config, reg prometheus.Registerer, log *slog.Logger) (*adminauth.Authorizer, error) {
	switch cfg.AdminAuth {
	case "", limiterwire.AdminAuthNone:
		return nil, nil
	case limiterwire.AdminAuthKubernetes:
		rc, err := kube.RESTConfig(cfg.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--admin-auth=kubernetes: %w", err)
		}
		a, err := adminauth.New(rc, adminauth.Options{Registerer: reg, Logger: log,
			Audience: cfg.AdminTokenAudience, APIAudiencePaths: []string{limiterwire.MetricsPath}})
		if err != nil {
			return nil, fmt.Errorf("--admin-auth=kubernetes: %w", err)
		}
		return a, nil
	default:
		return nil, fmt.Errorf("--admin-auth %q: want %s or %s", cfg.AdminAuth, limiterwire.AdminAuthNone, limiterwire.AdminAuthKubernetes)
	}
}

// topKey sets the key of top's hashed values: the file that
// $SLUICE_TOPK_KEY_FILE names (on Kubernetes, the fleet's Secret, so that
// every pod of the fleet shows a value alike), else a random key of this
// process. It is needed only for hashed hottest values.
func topKey(top service.TopOptions, log *slog.Logger) (service.TopOptions, error) {
	if top.K == 0 || top.Values == service.TopTruncate || len(top.Key) > 0 {
		return top, top.Validate()
	}
	if file := os.Getenv(limiterwire.TopKeyFileEnv); file != "" {
		key, err := os.ReadFile(file)
		if err != nil {
			return top, fmt.Errorf("$%s: %w", limiterwire.TopKeyFileEnv, err)
		}
		if len(key) < service.MinTopKeyBytes {
			return top, fmt.Errorf("$%s: %s holds %d bytes, want at least %d", limiterwire.TopKeyFileEnv, file, len(key), service.MinTopKeyBytes)
		}
		top.Key = key
		return top, top.Validate()
	}
	top.Key = make([]byte, 32)
	_, _ = rand.Read(top.Key) // never fails
	log.Info("Hottest descriptor values are hashed with a key of this process: other processes show other digits for one value; set $"+limiterwire.TopKeyFileEnv+" to share one",
		"topDescriptors", top.K)
	return top, top.Validate()
}

// isLoopback reports whether the listener address addr is on loopback only.
func isLoopback(addr string) bool {
	ap, err := netip.ParseAddrPort(addr)
	return err == nil && ap.Addr().IsLoopback()
}

// localFallbackMaxKeys bounds the counters of failureMode Local.
const localFallbackMaxKeys = 100_000
