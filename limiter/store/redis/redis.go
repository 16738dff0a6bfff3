// Package redis is the shared counter store: one Lua script per algorithm,
// run with EVALSHA (falling back to EVAL on NOSCRIPT) against a standalone
// Redis or a Redis Cluster.
//
// Concurrent decisions are batched, with no goroutines of the store's own:
// a caller that finds fewer than Workers round trips in flight sends every
// pending request as one pipelined round trip (split per node by go-redis
// in cluster mode), and hands over to a waiting caller, who sends the next.
// Every round trip has a deadline of Timeout, and no decision waits longer
// than Timeout for its turn either.
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
	"crypto/sha1"
	"crypto/tls"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
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
var leaseScript = newScript(leaseLua)

// scripts holds one script per algorithm, indexed by algo.Algorithm. Each
// starts with the idempotency helpers it calls.
var scripts = [...]script{
	algo.TokenBucket:   newScript(idempotencyLua + tokenBucketLua),
	algo.GCRA:          newScript(idempotencyLua + gcraLua),
	algo.SlidingWindow: newScript(idempotencyLua + slidingWindowLua),
	algo.FixedWindow:   newScript(idempotencyLua + fixedWindowLua),
	algo.SlidingLog:    newScript(idempotencyLua + slidingLogLua),
}

// script is a Lua script, run with EVALSHA, or EVAL once a server answers
// NOSCRIPT.
type script struct{ src, sha string }

func newScript(src string) script {
	sum := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(sum[:])}
}

// call starts the arguments of a run of the script with numKeys KEYS,
// with room for n more arguments.
func (sc script) call(eval bool, numKeys, n int) []any {
	args := make([]any, 0, 3+n)
	if eval {
		return append(args, "eval", sc.src, numKeys)
	}
	return append(args, "evalsha", sc.sha, numKeys)
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
	stop    chan struct{}
	bg      sync.WaitGroup // the map loop and breaker probes

	mu       sync.Mutex
	pending  []*call        // asked, not yet sent
	slots    int            // round trips in flight or about to be sent
	closed   bool           // by Close: no more calls
	flushers sync.WaitGroup // one per slot

	shards    atomic.Pointer[shardMap]
	mapMu     sync.Mutex          // guards breakers, and installs maps one at a time
	breakers  map[string]*breaker // by shard name
	mapLoaded atomic.Bool
	refresh   chan struct{}
}

// call is one pending decision.
type call struct {
	ctx context.Context
	req store.Request
	brk *breaker
	enq time.Time // when it was asked
	res algo.Result
	err error

	// wake tells the caller that its call is done (false), or that it is
	// to send the next round trip (true; see handOff). It can hold both.
	wake chan bool
	// promoted and abandoned, guarded by Store.mu: the caller was told to
	// send a round trip; it stopped waiting.
	promoted, abandoned bool

	// keys and argv are a Take's script KEYS and ARGV (see prepare); they
	// are sent by pointer, which boxes them without copying.
	keys  [2]string
	nkeys int
	argv  [6]int64
	nargv int

	// cmd is the call's script run, in the last round trip.
	cmd *goredis.Cmd

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
			Help: "Redis calls that failed because the shard could not answer, by class: timeout, connection, clusterdown, tryagain, masterdown, loading; and redirect, a MOVED or ASK not followed in time (no shard failure).",
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
		opts.KeyPrefix = defaultKeyPrefix
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	if opts.Workers <= 0 {
		opts.Workers = 2
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
		stop:    make(chan struct{}),
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
			// Follow MOVED and ASK at once: the reply names the node, and
			// go-redis's default backoff (10ms, then 20ms) outlasts the
			// whole deadline. The store backs off itself on TRYAGAIN.
			MinRetryBackoff: -1,
			DialTimeout:     time.Second,
			DialerRetries:   1, // a refused connection fails now: the breaker decides
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

// Take implements store.Store. It waits for the round trip holding req (at
// most Timeout for it to start, then Timeout for the round trip) or for ctx
// to end.
// While the breaker of req's shard is open it returns an error wrapping
// store.ErrUnavailable at once.
func (s *Store) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	if req.Limit.Algorithm < algo.TokenBucket || req.Limit.Algorithm > algo.SlidingLog {
		return algo.Result{}, fmt.Errorf("redis store: unknown algorithm %v", req.Limit.Algorithm)
	}
	c := &call{ctx: ctx, req: req}
	s.prepare(c)
	if err := s.do(ctx, c); err != nil {
		return algo.Result{}, err
	}
	return c.res, nil
}

// errClosed fails calls asked of a closed store.
var errClosed = errors.New("redis store: closed")

// do queues c and waits for its reply (at most Timeout for its round trip
// to start, then Timeout for the round trip) or for ctx to end. While the
// breaker of c's shard is open it fails at once.
//
// A caller that finds a slot free (fewer than Workers round trips in
// flight) sends every pending call itself, its own among them, while the
// others wait. Then it hands its slot to the first caller still waiting,
// who sends the next round trip. So batches grow with the load, and no
// goroutine of the store's stands between a caller and Redis.
func (s *Store) do(ctx context.Context, c *call) error {
	c.brk = s.breakerFor(c.req.Key)
	if c.brk.State() != BreakerClosed {
		return c.brk.errOpen
	}
	c.enq, c.wake = time.Now(), make(chan bool, 2)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	s.pending = append(s.pending, c)
	lead := s.slots < s.opts.Workers
	if lead {
		s.slots++
		s.flushers.Add(1)
	}
	s.mu.Unlock()
	if lead {
		s.flush()
	}
	return s.await(ctx, c)
}

// await waits for c's reply, sending round trips when told to (see
// handOff), or for ctx to end.
func (s *Store) await(ctx context.Context, c *call) error {
	led := false
	for {
		select {
		case promoted := <-c.wake:
			if !promoted {
				return c.err
			}
			led = true
			s.flush()
		case <-ctx.Done():
			s.mu.Lock()
			c.abandoned = true
			mustLead := c.promoted && !led
			s.mu.Unlock()
			if mustLead { // the slot was handed to us: pass it on
				s.flush()
			}
			return ctx.Err()
		}
	}
}

// flush sends one round trip of pending calls (at most MaxBatch), then
// hands its slot over.
func (s *Store) flush() {
	s.mu.Lock()
	n := min(len(s.pending), s.opts.MaxBatch)
	batch := slices.Clone(s.pending[:n])
	rest := copy(s.pending, s.pending[n:])
	clear(s.pending[rest:])
	s.pending = s.pending[:rest]
	s.mu.Unlock()
	if n > 0 {
		s.run(batch)
	}
	s.mu.Lock()
	s.handOff()
	s.mu.Unlock()
}

// handOff gives a slot to the first pending caller still waiting and not
// yet told, or frees it. s.mu must be held.
func (s *Store) handOff() {
	for _, c := range s.pending {
		if !c.promoted && !c.abandoned {
			c.promoted = true
			c.wake <- true
			return
		}
	}
	s.slots--
	s.flushers.Done()
}

// errQueued completes a call that waited Timeout for its round trip to
// start: the store is overloaded, which is no shard's fault.
var errQueued = fmt.Errorf("redis store: no round trip started within the deadline: %w", context.DeadlineExceeded)

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
			c.wake <- false
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()

	s.pipeline(ctx, live, false)
	s.retry(ctx, live, isNoScript)
	for wait := tryAgainBackoff; anyErr(live, isTryAgain) && ctx.Err() == nil; wait = min(2*wait, 8*tryAgainBackoff) {
		// A slot being migrated answers TRYAGAIN to a script over a key
		// that is there and one that is not: the script did not run, and
		// the slot closes within a few round trips. Resend until the
		// deadline, waiting 5, 10, 20, then 40ms.
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		s.retry(ctx, live, isTryAgain)
	}
	var outcomes [8]outcome
	seen := outcomes[:0]
	for _, c := range live {
		class := FailureClass(c.cmd.Err())
		switch {
		case class != "":
			s.metrics.errors.WithLabelValues(class).Inc()
		case isRedirect(c.cmd.Err()):
			s.metrics.errors.WithLabelValues(ClassRedirect).Inc()
		}
		seen = noteOutcome(seen, c.brk, class != "")
		if c.lease != nil {
			c.grant, c.err = parseLease(c.cmd)
		} else {
			c.res, c.err = parseResult(c.cmd)
		}
		c.wake <- false
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
func (s *Store) pipeline(ctx context.Context, calls []*call, eval bool) {
	_, _ = s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, c := range calls {
			if c.lease != nil {
				c.cmd = s.leaseCmd(ctx, p, c.lease, eval)
			} else {
				c.cmd = p.Do(ctx, takeArgs(eval, c)...)
			}
		}
		return nil
	})
}

// prepare fills c's script KEYS and ARGV: limit, period_us, burst, cost,
// now_us, and with an idempotency record, its TTL in ms.
func (s *Store) prepare(c *call) {
	r := &c.req
	var now int64
	if s.opts.PinnedClock != nil {
		now = s.opts.PinnedClock().UnixMicro()
	}
	c.keys[0], c.nkeys = s.RedisKey(r.Key), 1
	c.argv, c.nargv = [6]int64{r.Limit.Limit, r.Limit.PeriodMicros(), r.Limit.Burst, r.Cost, now}, 5
	if r.HasIdempotency() {
		c.keys[1], c.nkeys = s.RecordKey(r.Key, r.Idempotency), 2
		c.argv[5], c.nargv = max(1, r.EffectiveIdempotencyTTL().Milliseconds()), 6
	}
}

// takeArgs are the arguments of one Take's script call.
func takeArgs(eval bool, c *call) []any {
	args := scripts[c.req.Limit.Algorithm].call(eval, c.nkeys, c.nkeys+c.nargv)
	for i := range c.nkeys {
		args = append(args, &c.keys[i])
	}
	for i := range c.nargv {
		args = append(args, &c.argv[i])
	}
	return args
}

// tryAgainBackoff is the first wait before calls that got TRYAGAIN are
// sent again; it doubles, four sends at most, within the batch's deadline.
const tryAgainBackoff = 5 * time.Millisecond

// retry sends again, with EVAL (which also caches the script on that node),
// the calls whose script run failed with an error that match picks.
func (s *Store) retry(ctx context.Context, live []*call, match func(error) bool) {
	var again []*call
	for _, c := range live {
		if match(c.cmd.Err()) {
			again = append(again, c)
		}
	}
	if len(again) > 0 {
		s.pipeline(ctx, again, true)
	}
}

// anyErr reports whether a call's script run failed with an error that
// match picks.
func anyErr(calls []*call, match func(error) bool) bool {
	for _, c := range calls {
		if match(c.cmd.Err()) {
			return true
		}
	}
	return false
}

func isTryAgain(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "TRYAGAIN")
}

// isRedirect reports a MOVED or ASK reply that go-redis did not follow
// within the deadline: the script did not run.
func isRedirect(err error) bool {
	return err != nil && (strings.HasPrefix(err.Error(), "MOVED ") || strings.HasPrefix(err.Error(), "ASK "))
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// parseResult reads a script's reply {allowed, remaining, reset_us,
// retry_us[, replayed]}.
func parseResult(cmd *goredis.Cmd) (algo.Result, error) {
	var buf [5]int64
	v, err := int64s(buf[:0], cmd)
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

// int64s appends to dst the integers of cmd's array reply, as
// goredis.Cmd.Int64Slice reads them, without a slice of its own.
func int64s(dst []int64, cmd *goredis.Cmd) ([]int64, error) {
	reply, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	vals, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("redis: unexpected type=%T for []int64", reply)
	}
	for _, v := range vals {
		switch v := v.(type) {
		case int64:
			dst = append(dst, v)
		case string:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, err
			}
			dst = append(dst, n)
		default:
			return nil, fmt.Errorf("redis: unexpected type=%T for Int64", v)
		}
	}
	return dst, nil
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

// Close fails pending calls, waits for the round trips in flight, and
// closes the connections.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for _, c := range s.pending {
		c.err = errClosed
		c.wake <- false
	}
	s.pending = nil
	s.mu.Unlock()
	s.flushers.Wait()
	close(s.stop)
	s.bg.Wait()
	return s.client.Close()
}

var _ store.Store = (*Store)(nil)
