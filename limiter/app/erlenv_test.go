package app

import (
	"strings"
	"testing"
)

// TestReadERLEnv: ERL's settings map to the limiter's flags with ERL's
// defaults; what the limiter does not do is refused with what to use
// instead.
func TestReadERLEnv(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	// Istio's sample (samples/ratelimit/rate-limit-service.yaml).
	e, err := ReadERLEnv(env("LOG_LEVEL", "debug", "REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", "redis:6379", "USE_STATSD", "false",
		"RUNTIME_ROOT", "/data", "RUNTIME_SUBDIRECTORY", "ratelimit", "RUNTIME_WATCH_ROOT", "false", "RUNTIME_IGNOREDOTFILES", "true"))
	if err != nil {
		t.Fatal(err)
	}
	want := ERLEnv{Policies: "/data/ratelimit/config", Store: "redis://redis:6379", GRPCAddr: "0.0.0.0:8081", HTTPAddr: "0.0.0.0:8080",
		AdminAddr: "0.0.0.0:6070", LogLevel: "debug", Ignored: []string{"RUNTIME_IGNOREDOTFILES (dot files are always ignored)"}}
	if e.Policies != want.Policies || e.Store != want.Store || e.GRPCAddr != want.GRPCAddr || e.HTTPAddr != want.HTTPAddr ||
		e.AdminAddr != want.AdminAddr || e.LogLevel != want.LogLevel || strings.Join(e.Ignored, ";") != strings.Join(want.Ignored, ";") {
		t.Fatalf("Istio's sample:\n got %+v\nwant %+v", e, want)
	}
	e, err = ReadERLEnv(env("REDIS_URL", "r1:7000,r2:7000", "REDIS_TYPE", "cluster", "REDIS_TLS", "true", "REDIS_AUTH", "limiter:p@ss",
		"GRPC_PORT", "9000", "GRPC_HOST", "127.0.0.1", "SHADOW_MODE", "true", "LOG_LEVEL", "WARN", "LOG_FORMAT", "json", "REDIS_TLS_CACERT", "/ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Store != "rediss-cluster://limiter:p%40ss@r1:7000,r2:7000" || e.GRPCAddr != "127.0.0.1:9000" || e.Enforcement != "disabled" ||
		e.LogLevel != "warn" || e.LogFormat != "json" || e.RedisCAFile != "/ca.pem" || e.Policies != "/srv/runtime_data/current/config" {
		t.Fatalf("a TLS cluster: %+v", e)
	}
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"REDIS_URL", "/var/run/nutcracker/ratelimit.sock"}, "is no TCP address"},
		{[]string{}, "REDIS_URL=\"\" is no TCP address"},
		{[]string{"REDIS_URL", "r:6379", "REDIS_SOCKET_TYPE", "unix"}, "REDIS_SOCKET_TYPE=unix is not supported: Sluice reaches Redis over TCP"},
		{[]string{"REDIS_URL", "r:6379", "USE_STATSD", "true"}, "set USE_STATSD=false"},
		{[]string{"REDIS_URL", "r:6379", "LOCAL_CACHE_SIZE_IN_BYTES", "1000000"}, "localTier"},
		{[]string{"REDIS_URL", "r:6379", "BACKEND_TYPE", "memcache"}, "--store memory"},
		{[]string{"REDIS_URL", "r:6379", "MERGE_DOMAIN_CONFIG", "true"}, "one file"},
		{[]string{"REDIS_URL", "r:6379", "RESPONSE_DYNAMIC_METADATA", "true"}, "not supported"},
		{[]string{"REDIS_URL", "r:6379", "REDIS_TYPE", "sentinel"}, "Sentinel"},
	} {
		if _, err := ReadERLEnv(env(tc.env...)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error containing %q", tc.env, err, tc.want)
		}
	}
	if _, err := ReadERLEnv(env("REDIS_URL", "r:6379", "LOCAL_CACHE_SIZE_IN_BYTES", "0", "USE_STATSD", "false")); err != nil {
		t.Errorf("ERL's defaults written out: %v", err)
	}
}
