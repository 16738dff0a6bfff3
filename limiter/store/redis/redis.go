// Package redis is the shared counter store: one Lua script per algorithm,
// run with EVALSHA (falling back to EVAL on NOSCRIPT) against a standalone
// Redis or a Redis Cluster.
//
// Concurrent decisions are batched: a few workers drain a queue of pending
// requests and send each batch as one pipelined round trip (split per node
// by go-redis in cluster mode). Every round trip has a deadline of Timeout,
// and no decision waits longer than Timeout for a worker either.
//
// Every shard (the slots of one primary; a standalone server is one shard)
// has a circuit breaker. Timeouts, connection errors, CLUSTERDOWN, TRYAGAIN,
// MASTERDOWN and LOADING replies open it; while it is open, decisions on the
// shard's keys fail in microseconds with store.ErrUnavailable, without
// touching Redis, and the caller's failure mode decides. Opening reloads the
// cluster's slot map, so a promoted replica is found at once; probes close
// the breaker as soon as the shard answers.
package redis

import (
	"context"
	"crypto/tls"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

var (
	//go:embed scripts/idempotency.lua
	idempotencyLua string
	//go:embed scripts/token_bucket.lua
	tokenBucketLua string
	//go:embed scripts/gcra.lua
	gcraLua string
	//go:embed scripts/sliding_window.lua
	slidingWindowLua string
	//go:embed scripts/fixed_window.lua
	fixedWindowLua string
	//go:embed scripts/sliding_log.lua
	slidingLogLua string
	//go:embed scripts/lease.lua
	leaseLua string
)

// leaseScript is two-tier mode's lease call, for every algorithm but
// SlidingLog (see lease.go).
var leaseScript = goredis.NewScript(leaseLua)

// scripts holds one script per algorithm, indexed by algo.Algorithm. Each
// starts with the idempotency helpers it calls.
var scripts = [...]*goredis.Script{
	algo.TokenBucket:   goredis.NewScript(idempotencyLua + tokenBucketLua),
	algo.GCRA:          goredis.NewScript(idempotencyLua + gcraLua),
	algo.SlidingWindow: goredis.NewScript(idempotencyLua + slidingWindowLua),
	algo.FixedWindow:   goredis.NewScript(idempotencyLua + fixedWindowLua),
	algo.SlidingLog:    goredis.NewScript(idempotencyLua + slidingLogLua),
}

// keyEncoding is store.Key.String's encoding.
var keyEncoding = base64.RawURLEncoding

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
	// decision waits for a free worker; 0 means 20ms.
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
	// Workers is the number of concurrent pipelines; 0 means 4×GOMAXPROCS.
	Workers int
	// PinnedClock, when set, replaces Redis TIME inside the scripts. It
	// exists so that conformance tests can step a synthetic clock against a
	// real server; production leaves it nil and time comes from Redis.
	PinnedClock store.Clock
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

// Store is a Redis-backed store.Store. It is safe for concurrent use.
type Store struct {
	client  goredis.UniversalClient
	opts    Options
	log     *slog.Logger
	metrics *storeMetrics
	queue   chan *call
	stop    chan struct{}
	stopped chan struct{}
	bg      sync.WaitGroup // the map loop and breaker probes

	shards    atomic.Pointer[shardMap]
	mapMu     sync.Mutex          // guards breakers, and installs maps one at a time
	breakers  map[string]*breaker // by shard name
	mapLoaded atomic.Bool
	refresh   chan struct{}
}

// call is one pending decision.
type call struct {
	ctx  context.Context
	req  store.Request
	brk  *breaker
	enq  time.Time // when it was asked
	res  algo.Result
	err  error
	done chan struct{}

	// lease, when set, makes this a lease call (see Lease), answered in
	// grant.
	lease *store.LeaseRequest
	grant store.Lease
}

type storeMetrics struct {
	state  *prometheus.GaugeVec
	opened *prometheus.CounterVec
	errors *prometheus.CounterVec
}

func newStoreMetrics(reg prometheus.Registerer) *storeMetrics {
	m := &storeMetrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_redis_breaker_state",
			Help: "Circuit breaker of each Redis shard (named by its slot ranges, or standalone): 0 closed, 1 open, 2 half-open (probing).",
		}, []string{"shard"}),
		opened: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_redis_breaker_opened_total",
			Help: "Times the circuit breaker of each Redis shard opened.",
		}, []string{"shard"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_redis_errors_total",
			Help: "Redis calls that failed because the shard could not answer, by class: timeout, connection, clusterdown, tryagain, masterdown, loading.",
		}, []string{"class"}),
	}
	if reg != nil {
		reg.MustRegister(m.state, m.opened, m.errors)
	}
	return m
}

// New connects to Redis. It does not wait for the server to answer: the
// first decisions will report any connection error.
func New(opts Options) (*Store, error) {
	if len(opts.Addrs) == 0 {
		return nil, errors.New("redis store: no address")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 20 * time.Millisecond
	}
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = "sl"
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	if opts.Workers <= 0 {
		opts.Workers = 4 * runtime.GOMAXPROCS(0)
	}
	if opts.Breaker.Failures <= 0 {
		opts.Breaker.Failures = 5
	}
	if opts.Breaker.Cooldown <= 0 {
		opts.Breaker.Cooldown = 250 * time.Millisecond
	}
	if opts.Breaker.Span <= 0 {
		opts.Breaker.Span = 100 * time.Millisecond
	}
	s := &Store{
		opts:    opts,
		log:     logger(opts.Logger),
		metrics: newStoreMetrics(opts.Registerer),
		queue:   make(chan *call, 4*opts.MaxBatch),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
		refresh: make(chan struct{}, 1),
	}
	if opts.Cluster {
		s.client = goredis.NewClusterClient(&goredis.ClusterOptions{
			Addrs:                 opts.Addrs,
			Username:              opts.Username,
			Password:              opts.Password,
			TLSConfig:             opts.TLS,
			ContextTimeoutEnabled: true,
			PoolSize:              opts.Workers + 4,
			MaxRetries:            1,
			DialTimeout:           time.Second,
			DialerRetries:         1, // a refused connection fails now: the breaker decides
			// No CLIENT SETINFO on connect: Redis before 7.2 answers it
			// with an error, counted in its errorstats.
			DisableIdentity: true,
		})
		s.shards.Store(s.initialMap("0-" + strconv.Itoa(Slots-1)))
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			s.mapLoop(s.client.(*goredis.ClusterClient))
		}()
	} else {
		s.client = goredis.NewClient(&goredis.Options{
			Addr:                  opts.Addrs[0],
			Username:              opts.Username,
			Password:              opts.Password,
			TLSConfig:             opts.TLS,
			DB:                    opts.DB,
			ContextTimeoutEnabled: true,
			PoolSize:              opts.Workers + 4,
			MaxRetries:            1,
			DialTimeout:           time.Second,
			DialerRetries:         1, // a refused connection fails now: the breaker decides
			// No CLIENT SETINFO on connect: Redis before 7.2 answers it
			// with an error, counted in its errorstats.
			DisableIdentity: true,
		})
		s.shards.Store(s.initialMap("standalone"))
	}
	workers := make(chan struct{}, opts.Workers)
	for range opts.Workers {
		go func() {
			s.work()
			workers <- struct{}{}
		}()
	}
	go func() {
		for range opts.Workers {
			<-workers
		}
		close(s.stopped)
	}()
	return s, nil
}

// Client is the underlying go-redis client.
func (s *Store) Client() goredis.UniversalClient { return s.client }

// RedisKey is the Redis key of a counter: the prefix, then the hashed key as
// the hash tag, so all of one counter's data lives in one slot.
func (s *Store) RedisKey(k store.Key) string {
	return s.opts.KeyPrefix + ":{" + k.String() + "}"
}

// RecordKey is the Redis key of an idempotency record of counter k: the
// counter's key (and so its slot), then the record's hashed name.
func (s *Store) RecordKey(k, idempotency store.Key) string {
	return s.RedisKey(k) + ":i:" + idempotency.String()
}

// Take implements store.Store. It waits for the batch holding req (at most
// Timeout for a worker, then Timeout for the round trip) or for ctx to end.
// While the breaker of req's shard is open it returns an error wrapping
// store.ErrUnavailable at once.
func (s *Store) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	if req.Limit.Algorithm < algo.TokenBucket || req.Limit.Algorithm > algo.SlidingLog {
		return algo.Result{}, fmt.Errorf("redis store: unknown algorithm %v", req.Limit.Algorithm)
	}
	c := &call{ctx: ctx, req: req}
	if err := s.do(ctx, c); err != nil {
		return algo.Result{}, err
	}
	return c.res, nil
}

// do queues c for a worker and waits for its reply (at most Timeout for a
// worker, then Timeout for the round trip) or for ctx to end. While the
// breaker of c's shard is open it fails at once.
func (s *Store) do(ctx context.Context, c *call) error {
	c.brk = s.breakerFor(c.req.Key)
	if c.brk.State() != BreakerClosed {
		return c.brk.errOpen
	}
	c.enq, c.done = time.Now(), make(chan struct{})
	select {
	case s.queue <- c:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stop:
		return errors.New("redis store: closed")
	}
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stopped: // enqueued as the workers stopped: nobody will run it
		return errors.New("redis store: closed")
	}
}

// work drains the queue: it blocks for one call, takes whatever else is
// already waiting (up to MaxBatch), and sends them as one pipeline.
func (s *Store) work() {
	batch := make([]*call, 0, s.opts.MaxBatch)
	for {
		select {
		case <-s.stop:
			return
		case c := <-s.queue:
			batch = append(batch[:0], c)
		}
	drain:
		for len(batch) < s.opts.MaxBatch {
			select {
			case c := <-s.queue:
				batch = append(batch, c)
			default:
				break drain
			}
		}
		s.run(batch)
		for i := range batch {
			batch[i] = nil
		}
	}
}

// errQueued completes a call that waited Timeout for a worker: the store is
// overloaded, which is no shard's fault.
var errQueued = fmt.Errorf("redis store: no worker free within the deadline: %w", context.DeadlineExceeded)

// run sends one batch with EVALSHA, retries NOSCRIPT replies with EVAL
// (which also caches the script on that node) and TRYAGAIN replies (a slot
// in migration) after a short backoff, completes every call, and
// tells each shard's breaker how its round trip went.
func (s *Store) run(batch []*call) {
	now := time.Now()
	live := batch[:0:0]
	for _, c := range batch {
		err := c.ctx.Err()
		if err == nil && now.Sub(c.enq) >= s.opts.Timeout {
			err = errQueued
		}
		if err != nil {
			c.err = err
			close(c.done)
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()

	cmds := s.pipeline(ctx, live, false)
	s.retry(ctx, live, cmds, isNoScript)
	for wait := tryAgainBackoff; wait <= 8*tryAgainBackoff && anyErr(cmds, isTryAgain) && ctx.Err() == nil; wait *= 2 {
		// A slot being migrated answers TRYAGAIN to a script over a key
		// that is there and one that is not: the script did not run, and
		// the slot closes within a few round trips.
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		s.retry(ctx, live, cmds, isTryAgain)
	}
	var outcomes [8]outcome
	seen := outcomes[:0]
	for i, c := range live {
		class := FailureClass(cmds[i].Err())
		if class != "" {
			s.metrics.errors.WithLabelValues(class).Inc()
		}
		seen = noteOutcome(seen, c.brk, class != "")
		if c.lease != nil {
			c.grant, c.err = parseLease(cmds[i])
		} else {
			c.res, c.err = parseResult(cmds[i])
		}
		close(c.done)
	}
	for _, o := range seen {
		o.b.record(!o.failed)
	}
}

// outcome is how one round trip went for one shard.
type outcome struct {
	b      *breaker
	failed bool
}

func noteOutcome(seen []outcome, b *breaker, failed bool) []outcome {
	for i := range seen {
		if seen[i].b == b {
			seen[i].failed = seen[i].failed || failed
			return seen
		}
	}
	return append(seen, outcome{b: b, failed: failed})
}

// pipeline sends one EVALSHA (or EVAL) per call in one round trip.
func (s *Store) pipeline(ctx context.Context, calls []*call, eval bool) []*goredis.Cmd {
	cmds := make([]*goredis.Cmd, len(calls))
	_, _ = s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, c := range calls {
			if c.lease != nil {
				cmds[i] = s.leaseCmd(ctx, p, c.lease, eval)
				continue
			}
			script := scripts[c.req.Limit.Algorithm]
			var keys []string
			if c.req.HasIdempotency() {
				keys = []string{s.RedisKey(c.req.Key), s.RecordKey(c.req.Key, c.req.Idempotency)}
			} else {
				keys = []string{s.RedisKey(c.req.Key)}
			}
			args := s.args(c.req)
			if eval {
				cmds[i] = script.Eval(ctx, p, keys, args...)
			} else {
				cmds[i] = script.EvalSha(ctx, p, keys, args...)
			}
		}
		return nil
	})
	return cmds
}

// args are every script's ARGV: limit, period_us, burst, cost, now_us, and
// with an idempotency record, its TTL in ms.
func (s *Store) args(r store.Request) []any {
	var now int64
	if s.opts.PinnedClock != nil {
		now = s.opts.PinnedClock().UnixMicro()
	}
	if r.HasIdempotency() {
		return []any{r.Limit.Limit, r.Limit.PeriodMicros(), r.Limit.Burst, r.Cost, now, max(1, r.EffectiveIdempotencyTTL().Milliseconds())}
	}
	return []any{r.Limit.Limit, r.Limit.PeriodMicros(), r.Limit.Burst, r.Cost, now}
}

// tryAgainBackoff is the first wait before calls that got TRYAGAIN are
// sent again; it doubles, four sends at most, within the batch's deadline.
const tryAgainBackoff = 5 * time.Millisecond

// retry sends again, with EVAL (which also caches the script on that node),
// the calls whose command failed with an error that match picks, and
// replaces their commands in cmds.
func (s *Store) retry(ctx context.Context, live []*call, cmds []*goredis.Cmd, match func(error) bool) {
	var again []*call
	var at []int
	for i, cmd := range cmds {
		if match(cmd.Err()) {
			again, at = append(again, live[i]), append(at, i)
		}
	}
	if len(again) == 0 {
		return
	}
	for j, cmd := range s.pipeline(ctx, again, true) {
		cmds[at[j]] = cmd
	}
}

// anyErr reports whether a command failed with an error match picks.
func anyErr(cmds []*goredis.Cmd, match func(error) bool) bool {
	for _, c := range cmds {
		if match(c.Err()) {
			return true
		}
	}
	return false
}

func isTryAgain(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "TRYAGAIN")
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// parseResult reads a script's reply {allowed, remaining, reset_us,
// retry_us[, replayed]}.
func parseResult(cmd *goredis.Cmd) (algo.Result, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		return algo.Result{}, fmt.Errorf("redis store: %w", err)
	}
	if len(v) != 4 && len(v) != 5 {
		return algo.Result{}, fmt.Errorf("redis store: script returned %d values, want 4 or 5", len(v))
	}
	r := algo.Result{
		Allowed:    v[0] == 1,
		Remaining:  v[1],
		ResetAfter: time.Duration(v[2]) * time.Microsecond,
		RetryAfter: time.Duration(v[3]) * time.Microsecond,
		Replayed:   len(v) == 5 && v[4] == 1,
	}
	if v[3] < 0 {
		r.RetryAfter = algo.Never
	}
	return r, nil
}

// Ping checks that Redis answers (every node, for a cluster).
func (s *Store) Ping(ctx context.Context) error {
	if cc, ok := s.client.(*goredis.ClusterClient); ok {
		return cc.ForEachShard(ctx, func(ctx context.Context, c *goredis.Client) error {
			return c.Ping(ctx).Err()
		})
	}
	return s.client.Ping(ctx).Err()
}

// Close stops the workers and closes the connections. Pending calls
// complete with an error.
func (s *Store) Close() error {
	select {
	case <-s.stop:
		return nil
	default:
		close(s.stop)
	}
	<-s.stopped
	s.bg.Wait()
	for {
		select {
		case c := <-s.queue:
			c.err = errors.New("redis store: closed")
			close(c.done)
		default:
			return s.client.Close()
		}
	}
}

var _ store.Store = (*Store)(nil)
