package redis

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/limiter/store"
)

// Options configure a Store.
type Options struct {
	// Addrs are host:port addresses: one for a standalone server, or any
	// number of seed nodes of a cluster.
	Addrs []string
	// Cluster selects Redis Cluster.
	Cluster bool
	// Username and Password authenticate (AUTH), when set.
	Username, Password string
	// TLS, when set, connects over TLS with this configuration (the
	// rediss:// and rediss-cluster:// schemes).
	TLS *tls.Config
	// DB selects a standalone database.
	DB int
	// Timeout is the deadline of every round trip, and bounds how long a
	// decision waits for its round trip to start; 0 means 20ms.
	Timeout time.Duration
	// Breaker tunes the circuit breaker of every shard.
	Breaker BreakerOptions
	// Registerer receives the store's metrics (breaker state by shard,
	// Redis errors by class); nil registers none.
	Registerer prometheus.Registerer
	// Logger logs breaker changes; nil discards.
	Logger *slog.Logger
	// KeyPrefix starts every key; empty means "sl".
	KeyPrefix string
	// MaxBatch bounds the requests sent in one pipeline; 0 means 256.
	MaxBatch int
	// Workers bounds the round trips in flight at once; 0 means 2. More
	// send smaller batches.
	Workers int
	// OverlapAfter gates every round trip but the first: another starts
	// beside those in flight only once the newest of them has been out
	// this long (it stalled: a slow server, a lost packet) or the waiting
	// calls fill a batch. Until then calls wait for the trip in flight and
	// go together in the next, so each round trip carries more decisions:
	// fewer script runs and syscalls per decision. 0 means 500µs; a
	// negative value starts one at once whenever a slot is free.
	OverlapAfter time.Duration
	// PinnedClock, when set, replaces Redis TIME inside the scripts. It
	// exists so that conformance tests can step a synthetic clock against a
	// real server; production leaves it nil and time comes from Redis.
	PinnedClock store.Clock
	// mapRefresh, when set, replaces mapRefreshEvery (tests: a failover
	// must be followed without the periodic load).
	mapRefresh time.Duration
	// Tracing adds each call's shard, breaker state, script and sends to
	// the span of its context, when that records (see trace.go). Off, a
	// call never looks for a span.
	Tracing bool
}

// ParseURL parses a store address: redis://[user:pass@]host:port[/db] for a
// standalone server, or redis-cluster://[user:pass@]host:port,host:port,...
// for a cluster; rediss:// and rediss-cluster:// are the same over TLS,
// verified against the system's CA certificates (set Options.TLS.RootCAs
// for others).
func ParseURL(raw string) (Options, error) {
	var o Options
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return o, fmt.Errorf("store %q: want redis://host:port or redis-cluster://host:port,...", raw)
	}
	switch scheme {
	case "redis", "rediss":
	case "redis-cluster", "rediss-cluster":
		o.Cluster = true
	default:
		return o, fmt.Errorf("store %q: unknown scheme %q, want redis, rediss, redis-cluster or rediss-cluster", raw, scheme)
	}
	if strings.HasPrefix(scheme, "rediss") {
		o.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 { // a host has no @; a password may
		user, host := rest[:at], rest[at+1:]
		u, p, _ := strings.Cut(user, ":")
		var err error
		if o.Username, err = url.PathUnescape(u); err != nil {
			return o, fmt.Errorf("store %q: username: %w", raw, err)
		}
		if o.Password, err = url.PathUnescape(p); err != nil {
			return o, fmt.Errorf("store %q: password: %w", raw, err)
		}
		rest = host
	}
	if hosts, db, ok := strings.Cut(rest, "/"); ok {
		rest = hosts
		if db != "" {
			n, err := strconv.Atoi(db)
			if err != nil || n < 0 || o.Cluster {
				return o, fmt.Errorf("store %q: bad database %q", raw, db)
			}
			o.DB = n
		}
	}
	for _, a := range strings.Split(rest, ",") {
		if a == "" {
			continue
		}
		if _, port, ok := strings.Cut(a, ":"); !ok || port == "" {
			return o, fmt.Errorf("store %q: address %q has no port", raw, a)
		}
		o.Addrs = append(o.Addrs, a)
	}
	if len(o.Addrs) == 0 {
		return o, fmt.Errorf("store %q: no address", raw)
	}
	if !o.Cluster && len(o.Addrs) > 1 {
		return o, fmt.Errorf("store %q: redis:// takes one address; use redis-cluster:// for several", raw)
	}
	return o, nil
}

// defaultOverlapAfter is OverlapAfter's default: about two round trips of
// a loaded limiter beside its Redis, so that a round trip overlaps another
// only when it is late.
const defaultOverlapAfter = 500 * time.Microsecond

// defaultMaxBatch is MaxBatch's default.
const defaultMaxBatch = 256

// setDefaults fills the options left zero.
func (o *Options) setDefaults() {
	if o.Timeout <= 0 {
		o.Timeout = 20 * time.Millisecond
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = defaultKeyPrefix
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = defaultMaxBatch
	}
	if o.Workers <= 0 {
		o.Workers = 2
	}
	if o.OverlapAfter == 0 {
		o.OverlapAfter = defaultOverlapAfter
	}
	o.Breaker.setDefaults()
}
