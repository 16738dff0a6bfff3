// Package app assembles a standalone limiter process: it loads the policy
// file or watches the snapshot ConfigMap, opens the store, builds the
// service and its servers, and hot-reloads the policies. cmd/limiter parses
// flags and calls Run.
package app

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"strings"
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
	"github.com/sluice-dev/sluice/limiter/store"
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
	if rs, ok := pinger.(*redis.Store); ok {
		reg.MustRegister(rs.Collectors()...)
		redis.LogClientTo(log)
		readiness["store"] = storeCheck(rs)
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

// openStore opens the store named by cfg.Store. pinger is the store when it
// is remote (readiness pings it); desc describes it without credentials.
func openStore(cfg Config) (st store.Store, pinger server.Pinger, desc string, err error) {
	switch {
	case cfg.Store == "" || cfg.Store == "memory":
		if cfg.MemoryMaxBytes != 0 && cfg.MemoryMaxBytes < MinMemoryMaxBytes {
			return nil, nil, "", fmt.Errorf("--memory-max-bytes %d is below the least the memory store works with, %d (16MiB): each of its 64 shards must hold a full SlidingLog", cfg.MemoryMaxBytes, MinMemoryMaxBytes)
		}
		return memory.New(memory.Options{MaxKeys: cfg.MemoryMaxKeys, MaxBytes: cfg.MemoryMaxBytes}), nil, "memory", nil
	case isRedisURL(cfg.Store):
		opts, err := redis.ParseURL(cfg.Store)
		if err != nil {
			return nil, nil, "", err
		}
		if opts.Username == "" && opts.Password == "" {
			opts.Username, opts.Password = os.Getenv(limiterwire.RedisUsernameEnv), os.Getenv(limiterwire.RedisPasswordEnv)
		}
		if err := redisTLS(&opts, cfg); err != nil {
			return nil, nil, "", err
		}
		opts.Timeout = cfg.RedisTimeout
		opts.Tracing = cfg.Tracing
		opts.Logger = cfg.Logger
		if opts.Logger == nil {
			opts.Logger = slog.Default()
		}
		rs, err := redis.New(opts)
		if err != nil {
			return nil, nil, "", err
		}
		scheme, _, _ := strings.Cut(cfg.Store, "://")
		return rs, rs, scheme + "://" + strings.Join(opts.Addrs, ","), nil
	default:
		return nil, nil, "", fmt.Errorf("--store %q: want memory, redis://host:port or redis-cluster://host:port,... (rediss:// and rediss-cluster:// for TLS)", redactURL(cfg.Store))
	}
}

func isRedisURL(s string) bool {
	for _, scheme := range []string{"redis://", "rediss://", "redis-cluster://", "rediss-cluster://"} {
		if strings.HasPrefix(s, scheme) {
			return true
		}
	}
	return false
}

// redisTLS applies --redis-ca-file and --redis-tls-server-name to a TLS
// store's options.
func redisTLS(opts *redis.Options, cfg Config) error {
	if opts.TLS == nil {
		if cfg.RedisCAFile != "" || cfg.RedisTLSServerName != "" {
			return fmt.Errorf("--redis-ca-file and --redis-tls-server-name need a TLS store, rediss:// or rediss-cluster://, not %s", redactURL(cfg.Store))
		}
		return nil
	}
	opts.TLS.ServerName = cfg.RedisTLSServerName
	if cfg.RedisCAFile == "" {
		return nil
	}
	pem, err := os.ReadFile(cfg.RedisCAFile)
	if err != nil {
		return fmt.Errorf("--redis-ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("--redis-ca-file %s: no PEM certificate in it", cfg.RedisCAFile)
	}
	opts.TLS.RootCAs = pool
	return nil
}

// redactURL hides a password in a store address.
func redactURL(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	if user, host, ok := strings.Cut(rest, "@"); ok {
		name, _, _ := strings.Cut(user, ":")
		return scheme + "://" + name + ":xxxxx@" + host
	}
	return s
}

// reloader installs the snapshots that config.Watch or kube.Watch loads and
// keeps the reload metrics, readiness detail and admin status. The watch
// calls it from one goroutine at a time.
type reloader struct {
	src source
	svc *service.Service
	srv *server.Server
	log *slog.Logger

	errors      prometheus.Counter
	info        *prometheus.GaugeVec
	lastSuccess prometheus.Gauge
	lastOK      prometheus.Gauge

	mu      sync.Mutex
	lastErr error // the last reload's error, nil after a good one
	noWatch error // why hot reload is off, if it is
	// The snapshot ConfigMap: known once it has been found, found invalid
	// or found missing; until then unreachable is why it can't be listed.
	known       bool
	missing     bool
	unreachable error
}

func newReloader(src source, svc *service.Service, reg prometheus.Registerer, log *slog.Logger) *reloader {
	r := &reloader{
		src: src,
		svc: svc,
		log: log,
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_config_reload_errors_total",
			Help: "Policy loads that failed (unreadable or invalid policy file or snapshot ConfigMap); the previous policies stayed in force.",
		}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_config_info",
			Help: "The loaded policy snapshot: 1 for its version.",
		}, []string{"version"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_last_reload_success_timestamp_seconds",
			Help: "When the policies were last loaded successfully, in Unix seconds.",
		}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_last_reload_successful",
			Help: "1 if the last attempt to load the policies succeeded, else 0.",
		}),
	}
	reg.MustRegister(r.errors, r.info, r.lastSuccess, r.lastOK)
	return r
}

func (r *reloader) onLoad(snap *config.Snapshot) {
	r.mu.Lock()
	wasBad := r.lastErr != nil || r.missing
	r.lastErr, r.known, r.missing, r.unreachable = nil, true, false, nil
	r.mu.Unlock()
	r.lastSuccess.SetToCurrentTime()
	r.lastOK.Set(1)
	if cur := r.svc.Snapshot(); cur != nil && cur.Version == snap.Version {
		if wasBad {
			r.log.Info(r.src.kind()+" is valid again; policies unchanged", "source", r.src.String(), "version", snap.Version)
		}
		return
	}
	if snap.Pods > 0 {
		r.svc.SetReadyPods(int(snap.Pods)) // the operator's count wins over --local-fallback-pods
	}
	r.srv.Swap(snap)
	r.info.Reset()
	r.info.WithLabelValues(snap.Version).Set(1)
	r.log.Info("Loaded policies", "source", r.src.String(), "version", snap.Version, "policies", len(snap.Policies))
}

func (r *reloader) onError(err error) {
	r.mu.Lock()
	r.lastErr, r.known, r.missing, r.unreachable = err, true, false, nil
	r.mu.Unlock()
	r.errors.Inc()
	r.lastOK.Set(0)
	if cur := r.svc.Snapshot(); cur != nil {
		r.log.Error(r.src.kind()+" not reloaded; keeping the loaded policies", "source", r.src.String(), "version", cur.Version, "error", err)
		return
	}
	r.log.Error(r.src.kind()+" invalid; no policies loaded, not ready", "source", r.src.String(), "error", err)
}

func (r *reloader) watchFailed(err error) {
	r.mu.Lock()
	r.noWatch = err
	r.mu.Unlock()
	r.log.Error("Cannot watch the policies: changes will not be loaded until restart", "source", r.src.String(), "error", err)
}

// check is the "config" readiness check. Once policies are loaded it
// passes: they stay in force after a bad reload or with the ConfigMap gone,
// and the detail says so. Before, it fails with what the limiter waits for.
func (r *reloader) check(context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.svc.Snapshot() == nil {
		return "", fmt.Errorf("waiting for %s: %s", r.src.name(), r.problem())
	}
	var parts []string
	if r.lastErr != nil {
		parts = append(parts, "last reload failed, previous policies in force: "+r.lastErr.Error())
	}
	if r.missing {
		parts = append(parts, r.src.name()+" not found (deleted?), previous policies in force")
	}
	if r.noWatch != nil {
		parts = append(parts, "hot reload off: "+r.noWatch.Error())
	}
	if len(parts) == 0 {
		return r.src.String() + " loaded", nil
	}
	return strings.Join(parts, "; "), nil
}

// status is the source and its last error, for the admin endpoint.
func (r *reloader) status() (source, lastError string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.problem(); p != "" {
		lastError = p
	} else if r.noWatch != nil {
		lastError = "hot reload off: " + r.noWatch.Error()
	}
	return r.src.String(), lastError
}

// problem says why the source gives no snapshot, or "" when it does.
func (r *reloader) problem() string {
	switch {
	case r.lastErr != nil:
		return "invalid: " + r.lastErr.Error()
	case r.missing:
		return "not found"
	case r.unreachable != nil:
		return r.unreachable.Error()
	case !r.known && r.src.client != nil:
		return "not listed yet"
	}
	return ""
}
