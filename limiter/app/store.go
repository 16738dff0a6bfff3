package app

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/memory"
	"github.com/sluice-dev/sluice/limiter/store/redis"
)

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
