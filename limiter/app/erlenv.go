package app

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
)

// ERLEnv is what `limiter --erl-env` takes from envoyproxy/ratelimit's
// (ERL's) environment variables, so that ERL's Deployment runs the
// limiter with its environment unchanged: each field is a flag's value,
// "" where the environment says nothing (the flag's default stands).
type ERLEnv struct {
	Policies, Store, RedisCAFile, GRPCAddr, HTTPAddr, AdminAddr, LogLevel, LogFormat, Enforcement string
	// Ignored are the variables set that change no answer (ERL's pools,
	// pipelines, statistics flushes), each with why.
	Ignored []string
}

// erlRefused are ERL's variables the limiter refuses when they ask for
// what it does not do, by the value that asks (""means any non-empty
// value), with what to use instead.
var erlRefused = []struct{ name, value, instead string }{
	{"BACKEND_TYPE", "memcache", "Sluice counts in Redis or in memory: --store redis://HOST:PORT or --store memory"},
	{"REDIS_SOCKET_TYPE", "unix", "Sluice reaches Redis over TCP: REDIS_SOCKET_TYPE=tcp with REDIS_URL=HOST:PORT, or --store redis://HOST:PORT"},
	{"REDIS_TYPE", "sentinel", "Sluice does not follow Sentinel: point --store redis://HOST:PORT at the primary, or run a Redis Cluster (--store redis-cluster://...)"},
	{"REDIS_PERSECOND", "true", "Sluice counts every unit in one store: drop REDIS_PERSECOND and its REDIS_PERSECOND_* settings"},
	{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true", "Sluice always verifies the certificate: name what it must carry with --redis-tls-server-name"},
	{"REDIS_TLS_CLIENT_CERT", "", "Sluice authenticates to Redis with an ACL user and password (REDIS_AUTH=USER:PASSWORD), not a client certificate"},
	{"CONFIG_TYPE", "grpc_xds", "Sluice reads files (--policies) or RateLimitPolicies through the operator (--snapshot-configmap)"},
	{"MERGE_DOMAIN_CONFIG", "true", "Sluice refuses a domain in two files: put each domain's descriptors in one file"},
	{"QUOTA_MODE", "true", "set quota_mode: true on the descriptors that are quotas"},
	{"RESPONSE_DYNAMIC_METADATA", "true", "Sluice's RLS dynamic metadata carries a denial's reason and policy, and always the descriptors' metadata under \"metadata\" (docs/reference/http-api.md); ERL's echo of the domain, descriptors and hitsAddend is not sent: unset it"},
	{"USE_STATSD", "true", "Sluice exports Prometheus metrics on --admin-addr /metrics (docs/guides/migrate-from-envoy-ratelimit.md maps ERL's counters): set USE_STATSD=false"},
	{"USE_DOG_STATSD", "true", "Sluice exports Prometheus metrics on --admin-addr /metrics: unset USE_DOG_STATSD"},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "", "ERL limits are decided exactly in the store; a RateLimitPolicy's localTier (two-tier mode) answers from memory within a stated bound: unset LOCAL_CACHE_SIZE_IN_BYTES or set it to 0"},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true", "Sluice counts denied hits of ERL limits as ERL does by default: unset it"},
	{"GRPC_UDS", "", "Sluice serves RLS on TCP: --grpc-addr"},
	{"GRPC_SERVER_USE_TLS", "true", "Sluice's RLS listener is plain gRPC: terminate TLS in the mesh (Istio's mTLS does)"},
	{"LIMIT_LIMIT_HEADER", "", "Sluice's headers are RateLimit, RateLimit-Policy and X-RateLimit-Limit/Remaining/Reset (docs/reference/headers.md)"},
	{"LIMIT_REMAINING_HEADER", "", "Sluice's headers are RateLimit, RateLimit-Policy and X-RateLimit-Limit/Remaining/Reset (docs/reference/headers.md)"},
	{"LIMIT_RESET_HEADER", "", "Sluice's headers are RateLimit, RateLimit-Policy and X-RateLimit-Limit/Remaining/Reset (docs/reference/headers.md)"},
	{"TRACING_ENABLED", "true", "Sluice does not export traces from the limiter: unset TRACING_ENABLED"},
}

// erlIgnored are ERL's variables that change no answer.
var erlIgnored = map[string]string{
	"REDIS_POOL_SIZE": "the Redis client's pool is sized by itself", "REDIS_PIPELINE_WINDOW": "requests are batched by themselves",
	"REDIS_PIPELINE_LIMIT": "requests are batched by themselves", "REDIS_TIMEOUT": "use --redis-timeout",
	"EXPIRATION_JITTER_MAX_SECONDS": "keys expire with their window", "NEAR_LIMIT_RATIO": "no near_limit statistic",
	"CACHE_KEY_PREFIX": "Sluice's counter keys are its own", "STATS_FLUSH_INTERVAL": "metrics are scraped",
	"STATSD_HOST": "no statsd", "STATSD_PORT": "no statsd", "EXTRA_TAGS": "no statsd", "DISABLE_STATS": "metrics are scraped",
	"USE_PROMETHEUS": "/metrics is always on --admin-addr", "PROMETHEUS_ADDR": "use --admin-addr", "PROMETHEUS_PATH": "always /metrics",
	"RUNTIME_IGNOREDOTFILES": "dot files are always ignored", "LIMIT_RESPONSE_HEADERS_ENABLED": "Sluice always adds its rate-limit headers",
	"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "/readyz is ready once a configuration loaded", "GRPC_MAX_CONNECTION_AGE": "not set",
	"GRPC_MAX_CONNECTION_AGE_GRACE": "not set", "FORCE_START_WITHOUT_INITIAL_CONFIG": "a bad configuration stops the start",
}

// ReadERLEnv maps ERL's environment (getenv) to the limiter's flags,
// refusing, with what to use instead, a variable that asks for what the
// limiter does not do. ERL's defaults apply where a variable is unset:
// the configuration folder is RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/
// RUNTIME_APPDIRECTORY (whatever RUNTIME_WATCH_ROOT says: ERL reads the
// same files either way), the ports 8081 (gRPC), 8080 (HTTP) and 6070
// (debug, here the admin plane and /metrics), on 0.0.0.0.
func ReadERLEnv(getenv func(string) string) (ERLEnv, error) {
	var e ERLEnv
	for _, r := range erlRefused {
		v := getenv(r.name)
		if v == "" || (r.value != "" && !strings.EqualFold(v, r.value)) || (r.name == "LOCAL_CACHE_SIZE_IN_BYTES" && v == "0") {
			continue
		}
		return e, fmt.Errorf("--erl-env: %s=%s is not supported: %s", r.name, v, r.instead)
	}
	def := func(name, d string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return d
	}
	e.Policies = filepath.Join(def("RUNTIME_ROOT", "/srv/runtime_data/current"), getenv("RUNTIME_SUBDIRECTORY"), def("RUNTIME_APPDIRECTORY", "config"))
	e.GRPCAddr = net.JoinHostPort(def("GRPC_HOST", "0.0.0.0"), def("GRPC_PORT", "8081"))
	e.HTTPAddr = net.JoinHostPort(def("HOST", "0.0.0.0"), def("PORT", "8080"))
	e.AdminAddr = net.JoinHostPort(def("DEBUG_HOST", "0.0.0.0"), def("DEBUG_PORT", "6070"))
	switch lvl := strings.ToLower(def("LOG_LEVEL", "warn")); lvl {
	case "debug", "info", "warn", "error":
		e.LogLevel = lvl
	case "trace":
		e.LogLevel = "debug"
	case "warning":
		e.LogLevel = "warn"
	default: // fatal, panic
		e.LogLevel = "error"
	}
	if strings.EqualFold(getenv("LOG_FORMAT"), "json") {
		e.LogFormat = "json"
	}
	if strings.EqualFold(getenv("SHADOW_MODE"), "true") {
		e.Enforcement = "disabled"
	}
	store, err := erlStore(getenv)
	if err != nil {
		return e, err
	}
	e.Store, e.RedisCAFile = store, getenv("REDIS_TLS_CACERT")
	var ignored []string
	for name, why := range erlIgnored {
		if getenv(name) != "" {
			ignored = append(ignored, name+" ("+why+")")
		}
	}
	sort.Strings(ignored)
	e.Ignored = ignored
	return e, nil
}

// erlStore is the --store of ERL's Redis settings: REDIS_URL (host:port,
// or for a cluster host:port,host:port,...), REDIS_TYPE (single or
// cluster), REDIS_TLS, REDIS_AUTH (PASSWORD or USER:PASSWORD).
func erlStore(getenv func(string) string) (string, error) {
	addr := getenv("REDIS_URL")
	if addr == "" || strings.HasPrefix(addr, "/") {
		return "", fmt.Errorf("--erl-env: REDIS_URL=%q is no TCP address: set REDIS_URL=HOST:PORT (and REDIS_SOCKET_TYPE=tcp), or give --store", addr)
	}
	scheme := "redis"
	switch t := strings.ToLower(getenv("REDIS_TYPE")); t {
	case "", "single":
	case "cluster":
		scheme = "redis-cluster"
	default:
		return "", fmt.Errorf("--erl-env: REDIS_TYPE=%s is not supported: single or cluster", t)
	}
	if strings.EqualFold(getenv("REDIS_TLS"), "true") {
		scheme = strings.Replace(scheme, "redis", "rediss", 1)
	}
	u := url.URL{Scheme: scheme, Host: addr}
	if auth := getenv("REDIS_AUTH"); auth != "" {
		if user, pass, ok := strings.Cut(auth, ":"); ok {
			u.User = url.UserPassword(user, pass)
		} else {
			u.User = url.UserPassword("", auth)
		}
	}
	return u.String(), nil
}
