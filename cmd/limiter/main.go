// Command limiter is a Sluice limiter: Envoy RLS v3 over gRPC and a JSON
// HTTP API, enforcing the RateLimitPolicies of a YAML file or of an
// operator's snapshot ConfigMap, reloaded on change, against an in-memory
// store or Redis.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/limiter/app"
	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/regions"
	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "convert-erl" {
		convertERL(os.Args[2:])
		return
	}
	fs := flag.NewFlagSet("limiter", flag.ExitOnError)
	var cfg app.Config
	fs.StringVar(&cfg.Policies, "policies", "", "RateLimitPolicy YAML or envoyproxy/ratelimit configuration to enforce, a `path` to a file or to a folder of either, reloaded on change (this or --snapshot-configmap)")
	fs.StringVar(&cfg.SnapshotConfigMap, "snapshot-configmap", "", "snapshot ConfigMap `NAMESPACE/NAME` to enforce, watched through the API server (this or --policies)")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "kubeconfig `file` for --snapshot-configmap and --admin-auth=kubernetes (default: $KUBECONFIG, the in-cluster config, ~/.kube/config)")
	fs.StringVar(&cfg.Store, "store", "memory", "counter store: memory, redis://[user:pass@]host:port[/db] or redis-cluster://host:port,host:port,...; rediss:// and rediss-cluster:// over TLS. Without user:pass@, the credentials come from $"+limiterwire.RedisUsernameEnv+" and $"+limiterwire.RedisPasswordEnv)
	fs.StringVar(&cfg.RedisCAFile, "redis-ca-file", "", "PEM `file` of the CA certificates that verify a rediss:// store (default: the system's)")
	fs.StringVar(&cfg.RedisTLSServerName, "redis-tls-server-name", "", "the `name` a rediss:// store's certificates must carry, instead of each node's address")
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", "127.0.0.1:8081", "Envoy RLS v3 and gRPC health listen `address`")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:8080", "HTTP data plane (check, forward-auth, status peek), /healthz and /readyz listen `address`")
	fs.StringVar(&cfg.AdminAddr, "admin-addr", "127.0.0.1:8082", "admin plane (/v1/admin/*, /metrics) listen `address`; keep it on loopback unless --admin-auth=kubernetes")
	fs.StringVar(&cfg.AdminAuth, "admin-auth", limiterwire.AdminAuthNone, "how the admin plane checks its callers: none (open) or kubernetes (a bearer token, reviewed by the API server with TokenReview and SubjectAccessReview on the non-resource URL)")
	fs.StringVar(&cfg.AdminTokenAudience, "admin-token-audience", limiterwire.AdminAudience, "with --admin-auth=kubernetes, the `audience` a token must be issued for to call /v1/admin/* (the operator renders each fleet's own, "+limiterwire.FleetAdminAudience("NAMESPACE", "FLEET")+"; \"\" accepts the API server's own); /metrics takes the API server's")
	fs.StringVar(&cfg.AdminTLSCert, "admin-tls-cert", "", "PEM certificate `file` of the admin plane, which then serves HTTPS only (with --admin-tls-key); reloaded when it changes")
	fs.StringVar(&cfg.AdminTLSKey, "admin-tls-key", "", "PEM private key `file` of --admin-tls-cert")
	fs.DurationVar(&cfg.RedisTimeout, "redis-timeout", 20*time.Millisecond, "deadline of every Redis round trip (and of the wait for the round trip to start); then the policy's failureMode decides")
	fs.IntVar(&cfg.MemoryMaxKeys, "memory-max-keys", 1_000_000, "most counters the memory store keeps; past it, a shard evicts the least recently used counter of the namespace over its share")
	memDefault, memSource := app.MemoryMaxBytesDefault()
	fs.Int64Var(&cfg.MemoryMaxBytes, "memory-max-bytes", memDefault, "most bytes of counters the memory store keeps (estimated: keys, states, SlidingLog entries), at least 16MiB; past it, it evicts as past --memory-max-keys. Default: half the container's memory limit (cgroup memory.max), or 256MiB without one; here "+memSource)
	enforcement := fs.String("enforcement", "enabled", "kill switch: disabled allows every request (decisions still counted, would-be denials as shadow_limited)")
	fs.StringVar(&cfg.IdempotencyEntry, "idempotency-entry", "idempotency_key", "RLS descriptor entry `key` whose value is an idempotency key (left out of matching)")
	fs.StringVar(&cfg.AcceptEntry, "accept-entry", "accept", "RLS descriptor entry `key` that carries the client's Accept header (a denial it asks problem details of gets them as its body)")
	fs.DurationVar(&cfg.IdempotencyTTL, "idempotency-ttl", store.DefaultIdempotencyTTL, "how long a first decision is replayed to retries with the same idempotency key, 1s to 24h")
	fs.Int64Var(&cfg.IdempotencyMaxRecords, "idempotency-max-records", store.DefaultIdempotencyMaxRecords, "most live idempotency records of one counter, 1 to 100000; one more drops the one closest to expiry, whose retries are then decided afresh")
	fs.Int64Var(&cfg.IdempotencyMaxReplays, "idempotency-max-replays", store.DefaultIdempotencyMaxReplays, "how many retries of one request (same domain, descriptor, cost and idempotency key) a first decision is replayed to; later retries are decided afresh")
	fs.IntVar(&cfg.LocalFallbackPods, "local-fallback-pods", 1, "limiter pods sharing each limit: failureMode Local enforces limit/N while Redis can't answer")
	fs.IntVar(&cfg.Top.K, "top-descriptors", 0, "report each policy's `K` hottest descriptor values per interval on /v1/admin/stats and /metrics, 0 (off, the default) to 20; values may be personal data")
	topValues := fs.String("top-descriptor-values", "hash", "how --top-descriptors shows values: hash (16 hex digits of an HMAC-SHA-256 keyed by the file $"+limiterwire.TopKeyFileEnv+" names, else by a random key of this process) or truncate")
	fs.IntVar(&cfg.Top.TruncateTo, "top-descriptor-truncate", 8, "bytes of each value that --top-descriptor-values=truncate keeps, 1 to 16")
	fs.DurationVar(&cfg.Top.Interval, "top-descriptor-interval", time.Minute, "what one --top-descriptors report covers, aligned to the clock, at least 1s")
	trusted := fs.String("trusted-proxies", "", "comma-separated `CIDRs` (or addresses) of proxies whose X-Forwarded-For and X-Real-IP forward-auth believes, such as 10.0.0.0/8,127.0.0.1")
	fs.IntVar(&cfg.MaxHeaderBytes, "max-header-bytes", server.DefaultMaxHeaderBytes, "most `bytes` of a data-plane HTTP request's head (request line and headers), 4096 or more; beyond it the limiter answers 431. Keep it above what your proxy passes to forward-auth: a proxy that fails open on the limiter's errors would admit such a request")
	fs.DurationVar(&cfg.DrainDelay, "drain-delay", server.DefaultDrainDelay, "on SIGTERM, how long to keep answering while /readyz fails and gRPC health is NOT_SERVING, before the listeners close: longer than endpoints take to drop the pod; 0 closes them at once")
	budgetMatches := fs.Int("tenant-max-policies-per-request", config.DefaultMaxPoliciesPerRequest, "with --policies: how many of a namespace's policies one request may match, 1 to 1024 (more is denied with a reason), or 0 for no limit; a fleet's snapshot carries its spec.tenantBudget")
	budgetCalls := fs.Int("tenant-store-calls-per-second", config.DefaultStoreCallsPerSecondPerNamespace, "with --policies: how many store calls per second this limiter makes for a namespace's policies, 1 to 1000000 (past it, decisions are made without the store: the store's last denials and this pod's share of each limit; failureMode Closed denies), or 0 for no limit")
	fs.BoolVar(&cfg.Tracing, "tracing", false, "export OpenTelemetry traces of decisions over OTLP/gRPC, configured by the standard OTEL_EXPORTER_OTLP_* and OTEL_SERVICE_NAME variables (default off)")
	fs.Float64Var(&cfg.TraceSampleRatio, "trace-sample-ratio", 0.01, "with --tracing, the share of decisions traced, 0 to 1, drawn by the limiter: a caller's sampled flag can't raise it")
	erlMax := fs.String("erl-max-override", "", "the most a request may set its own limit to (an RLS descriptor's limit field) in an envoyproxy/ratelimit domain, as `REQUESTS/UNIT` (unit second to year); above it the descriptor is denied with a reason. Empty: a request's own limit may not pass the ERL limit its descriptor matches")
	erlEnv := fs.Bool("erl-env", false, "take envoyproxy/ratelimit's environment variables (RUNTIME_ROOT, REDIS_URL, REDIS_AUTH, GRPC_PORT, ...) for the flags not given, refusing those that ask for what the limiter does not do (docs/guides/migrate-from-envoy-ratelimit.md)")
	fs.StringVar(&cfg.Region.Name, "region", "", "this limiter's region `name` (a DNS label), among regions sharing the policies of scope Global; without it Global policies count in --store as a region alone")
	fs.StringVar(&cfg.Region.CertFile, "peer-cert-file", "", "with --peer, this region's certificate `file` (PEM), its Common Name the --region name: the peer endpoint serves it and grant calls present it (mutual TLS)")
	fs.StringVar(&cfg.Region.KeyFile, "peer-key-file", "", "with --peer, the key `file` (PEM) of --peer-cert-file")
	fs.StringVar(&cfg.Region.CAFile, "peer-ca-file", "", "with --peer, the `file` (PEM) of the CA every region's certificate chains to")
	fs.BoolVar(&cfg.Region.InsecureLab, "peer-insecure-lab", false, "a lab only: allow http:// --peer endpoints and bearer tokens (--region-token-file, --peer-token-file), with which any holder of a token can act as any region")
	fs.StringVar(&cfg.Region.TokenFile, "region-token-file", "", "with --peer-insecure-lab, the `file` holding the token (at least 32 bytes) other regions must present on this region's peer endpoint")
	fs.StringVar(&cfg.Region.Addr, "peer-addr", app.DefaultPeerAddr, "with --region, the peer endpoint's listen `address`: other regions take grants of Global limits here")
	fs.IntVar(&cfg.Region.PartitionSharePercent, "partition-share", 0, "with --region, the `percent` of a Global limit this region admits per period for a key whose home region it can't reach (1 to 100; default 100 / regions)")
	fs.DurationVar(&cfg.Region.CallTimeout, "peer-timeout", regions.DefaultCallTimeout, "with --region, the deadline of a grant call to another region; a call that takes longer counts the region as unreachable (its partition share decides)")
	var peerURLs, peerTokens []string
	fs.Func("peer", "another region as `NAME=URL` (the base URL of its peer endpoint, https; http only with --peer-insecure-lab); repeat for each", func(v string) error {
		peerURLs = append(peerURLs, v)
		return nil
	})
	fs.Func("peer-token-file", "with --peer-insecure-lab, `NAME=FILE`: the file holding the token to present to region NAME (its --region-token-file's); one per --peer", func(v string) error {
		peerTokens = append(peerTokens, v)
		return nil
	})
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	format := fs.String("log-format", "text", "log format: text or json")
	_ = fs.Parse(os.Args[1:])
	if *erlEnv {
		applyERLEnv(fs, &cfg, map[string]*string{"log-level": level, "log-format": format, "enforcement": enforcement})
	}

	var lvl slog.Level
	switch {
	case (cfg.Policies == "") == (cfg.SnapshotConfigMap == ""):
		usage(fs, "give exactly one of --policies and --snapshot-configmap")
	case cfg.Kubeconfig != "" && cfg.SnapshotConfigMap == "" && cfg.AdminAuth != limiterwire.AdminAuthKubernetes:
		usage(fs, "--kubeconfig needs --snapshot-configmap or --admin-auth=kubernetes")
	case cfg.AdminAuth != limiterwire.AdminAuthNone && cfg.AdminAuth != limiterwire.AdminAuthKubernetes:
		usage(fs, fmt.Sprintf("--admin-auth %q: want %s or %s", cfg.AdminAuth, limiterwire.AdminAuthNone, limiterwire.AdminAuthKubernetes))
	case (cfg.AdminTLSCert == "") != (cfg.AdminTLSKey == ""):
		usage(fs, "give both --admin-tls-cert and --admin-tls-key, or neither")
	case fs.NArg() > 0:
		usage(fs, fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	case *erlMax != "" && parseERLRate(*erlMax, &cfg.ERLMaxOverride) != nil:
		usage(fs, fmt.Sprintf("--erl-max-override: %v", parseERLRate(*erlMax, &cfg.ERLMaxOverride)))
	case lvl.UnmarshalText([]byte(*level)) != nil:
		usage(fs, fmt.Sprintf("--log-level %q: want debug, info, warn or error", *level))
	case *format != "text" && *format != "json":
		usage(fs, fmt.Sprintf("--log-format %q: want text or json", *format))
	case cfg.RedisTimeout <= 0:
		usage(fs, "--redis-timeout must be positive")
	case cfg.MemoryMaxKeys < 1:
		usage(fs, "--memory-max-keys must be at least 1")
	case *enforcement != "enabled" && *enforcement != "disabled":
		usage(fs, fmt.Sprintf("--enforcement %q: want enabled or disabled", *enforcement))
	case cfg.IdempotencyEntry == "":
		usage(fs, "--idempotency-entry must not be empty")
	case cfg.AcceptEntry == "":
		usage(fs, "--accept-entry must not be empty")
	case cfg.AcceptEntry == cfg.IdempotencyEntry:
		usage(fs, fmt.Sprintf("--accept-entry and --idempotency-entry are both %q: they must differ", cfg.AcceptEntry))
	case cfg.IdempotencyTTL < time.Second || cfg.IdempotencyTTL > store.MaxIdempotencyTTL:
		usage(fs, fmt.Sprintf("--idempotency-ttl %v: want 1s to %v", cfg.IdempotencyTTL, store.MaxIdempotencyTTL))
	case cfg.IdempotencyMaxRecords < 1 || cfg.IdempotencyMaxRecords > store.MaxIdempotencyMaxRecords:
		usage(fs, fmt.Sprintf("--idempotency-max-records %d: want 1 to %d", cfg.IdempotencyMaxRecords, store.MaxIdempotencyMaxRecords))
	case cfg.IdempotencyMaxReplays < 1:
		usage(fs, "--idempotency-max-replays must be at least 1")
	case cfg.MaxHeaderBytes < 4096:
		usage(fs, fmt.Sprintf("--max-header-bytes %d: want 4096 or more", cfg.MaxHeaderBytes))
	case cfg.DrainDelay < 0:
		usage(fs, "--drain-delay must not be negative")
	case cfg.LocalFallbackPods < 1:
		usage(fs, "--local-fallback-pods must be at least 1")
	case cfg.Top.K < 0 || cfg.Top.K > service.MaxTopK:
		usage(fs, fmt.Sprintf("--top-descriptors %d: want 0 (off) to %d", cfg.Top.K, service.MaxTopK))
	case *topValues != string(service.TopHash) && *topValues != string(service.TopTruncate):
		usage(fs, fmt.Sprintf("--top-descriptor-values %q: want hash or truncate", *topValues))
	case cfg.Top.Interval < time.Second:
		usage(fs, fmt.Sprintf("--top-descriptor-interval %v: want at least 1s", cfg.Top.Interval))
	case !(cfg.TraceSampleRatio >= 0 && cfg.TraceSampleRatio <= 1):
		usage(fs, fmt.Sprintf("--trace-sample-ratio %v: want 0 to 1", cfg.TraceSampleRatio))
	case cfg.Top.TruncateTo < 1 || cfg.Top.TruncateTo > service.MaxTopTruncateTo:
		usage(fs, fmt.Sprintf("--top-descriptor-truncate %d: want 1 to %d bytes", cfg.Top.TruncateTo, service.MaxTopTruncateTo))
	}
	if (*budgetMatches == 0) != (*budgetCalls == 0) {
		usage(fs, "--tenant-max-policies-per-request and --tenant-store-calls-per-second are both 0 (no budget) or both set")
	}
	if *budgetMatches != 0 {
		if *budgetMatches < 1 || *budgetMatches > 1024 {
			usage(fs, fmt.Sprintf("--tenant-max-policies-per-request %d: want 1 to 1024, or 0 for no limit", *budgetMatches))
		}
		if *budgetCalls < 1 || *budgetCalls > 1_000_000 {
			usage(fs, fmt.Sprintf("--tenant-store-calls-per-second %d: want 1 to 1000000, or 0 for no limit", *budgetCalls))
		}
		cfg.TenantBudget = &config.Budgets{Default: config.NamespaceBudget{
			MaxPoliciesPerRequest: int32(*budgetMatches), StoreCallsPerSecond: int32(*budgetCalls)}}
	}
	cfg.Top.Values = service.TopValues(*topValues)
	var err error
	if cfg.Region.Peers, err = app.ParsePeers(peerURLs, peerTokens); err != nil {
		usage(fs, err.Error())
	}
	if cfg.TrustedProxies, err = app.ParsePrefixes(*trusted); err != nil {
		usage(fs, "--trusted-proxies: "+err.Error())
	}
	cfg.EnforcementDisabled = *enforcement == "disabled"
	hopts := &slog.HandlerOptions{Level: lvl}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, hopts))
	if *format == "json" {
		cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, hopts))
	}
	slog.SetDefault(cfg.Logger)
	klog.SetSlogLogger(cfg.Logger) // client-go logs through klog
	if p, ok := app.GCPercent(os.Getenv("GOGC"), debug.SetMemoryLimit(-1)); ok {
		debug.SetGCPercent(p)
		cfg.Logger.Info("Memory limit set and GOGC not: collecting less often", "GOGC", p, "GOMEMLIMIT", debug.SetMemoryLimit(-1))
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "limiter: %v\n", err)
		stop()
		os.Exit(1)
	}
}

func usage(fs *flag.FlagSet, msg string) {
	fmt.Fprintf(os.Stderr, "limiter: %s\n", msg)
	fs.Usage()
	os.Exit(2)
}

// parseERLRate parses --erl-max-override into r.
func parseERLRate(s string, r *compiled.UnitRate) error {
	v, err := config.ParseERLRate(s)
	*r = v
	return err
}

// applyERLEnv sets, from envoyproxy/ratelimit's environment, the flags the
// command line does not give (strs holds the flags main keeps as
// strings).
func applyERLEnv(fs *flag.FlagSet, cfg *app.Config, strs map[string]*string) {
	e, err := app.ReadERLEnv(os.Getenv)
	if err != nil {
		usage(fs, err.Error())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for name, v := range map[string]struct {
		dst *string
		val string
	}{
		"store": {&cfg.Store, e.Store}, "redis-ca-file": {&cfg.RedisCAFile, e.RedisCAFile}, "grpc-addr": {&cfg.GRPCAddr, e.GRPCAddr},
		"http-addr": {&cfg.HTTPAddr, e.HTTPAddr}, "admin-addr": {&cfg.AdminAddr, e.AdminAddr},
		"log-level": {strs["log-level"], e.LogLevel}, "log-format": {strs["log-format"], e.LogFormat}, "enforcement": {strs["enforcement"], e.Enforcement},
	} {
		if !given[name] && v.val != "" {
			*v.dst = v.val
		}
	}
	if !given["policies"] && cfg.SnapshotConfigMap == "" {
		cfg.Policies = e.Policies
	}
	for _, ig := range e.Ignored {
		fmt.Fprintf(os.Stderr, "limiter: --erl-env: ignoring %s\n", ig)
	}
}

// convertERL is `limiter convert-erl [--namespace NS] PATH`: it prints the
// RateLimitPolicies of envoyproxy/ratelimit files (config.ConvertERL).
func convertERL(args []string) {
	fs := flag.NewFlagSet("limiter convert-erl", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: limiter convert-erl [--namespace NS] PATH\n\nPrints a v1beta1 RateLimitPolicy per rate limit of the envoyproxy/ratelimit files at PATH (a file or a folder), with a comment on what has no exact equivalent, and the LimiterFleet domains entries.\n\n")
		fs.PrintDefaults()
	}
	ns := fs.String("namespace", "default", "the `namespace` of the policies")
	_ = fs.Parse(args)
	if fs.NArg() != 1 {
		fs.Usage()
		os.Exit(2)
	}
	if err := config.ConvertERL(fs.Arg(0), *ns, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "limiter convert-erl: %v\n", err)
		os.Exit(1)
	}
}
