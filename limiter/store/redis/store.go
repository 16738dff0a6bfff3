package redis

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// Store is a Redis-backed store.Store. It is safe for concurrent use.
type Store struct {
	client  goredis.UniversalClient
	opts    Options
	log     *slog.Logger
	metrics *storeMetrics
	stop    chan struct{}  // closed by Close: the map loop and probes end
	bg      sync.WaitGroup // the map loop and breaker probes
	batch   *batcher
	shards  *shards
	slots   *slotSource // a cluster's (slotsource.go)
	warm    *warmth     // warm.go
	// multiMin is the fewest Takes of a round trip that share a multi
	// script run (multi.go): 2, or 1 in tests that send every Take so.
	multiMin int
}

// New connects to Redis. It does not wait for the server to answer: the
// first decisions will report any connection error.
func New(opts Options) (*Store, error) {
	if len(opts.Addrs) == 0 {
		return nil, errors.New("redis store: no address")
	}
	opts.setDefaults()
	s := &Store{
		opts:    opts,
		log:     logger(opts.Logger),
		metrics: newStoreMetrics(opts.Registerer),
		stop:    make(chan struct{}),
		warm:    newWarmth(),

		multiMin: 2,
	}
	s.batch = &batcher{workers: opts.Workers, maxBatch: opts.MaxBatch, timeout: opts.Timeout,
		overlapAfter: max(opts.OverlapAfter, 0), send: s.send}
	env := &breakerEnv{opts: opts.Breaker, metrics: s.metrics, log: s.log, probe: s.probeCommand,
		reload: s.refresh, routes: s.routesTo, stop: s.stop, bg: &s.bg}
	if opts.Cluster {
		s.newCluster(env)
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
		s.shards = newShards(env, opts.KeyPrefix, "standalone", s.log)
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			s.warmStandalone()
		}()
	}
	return s, nil
}

// Client is the underlying go-redis client.
func (s *Store) Client() goredis.UniversalClient { return s.client }

// RedisKey is the Redis key of a counter: the prefix, then the hashed key as
// the hash tag, so all of one counter's data lives in one slot.
func (s *Store) RedisKey(k store.Key) string {
	// One allocation: every decision names its counter.
	var buf [96]byte
	b := append(append(buf[:0], s.opts.KeyPrefix...), ":{"...)
	b = base64.RawURLEncoding.AppendEncode(b, k[:])
	return string(append(b, '}'))
}

// LogKey is the Redis key of SlidingLog counter k: a weighted log, one
// member per request (sliding_log_core.lua). Logs used to keep one
// member per unit under RedisKey: a new name, so that an old limiter and a
// new one never read each other's log during a rolling upgrade (each
// counts what it admitted on its own key), and old logs simply expire a
// period after their last write.
func (s *Store) LogKey(k store.Key) string {
	return s.RedisKey(k) + ":w"
}

// CounterKey is the Redis key a counter of algorithm a lives under:
// LogKey for SlidingLog, RedisKey for the others.
func (s *Store) CounterKey(k store.Key, a algo.Algorithm) string {
	if a == algo.SlidingLog {
		return s.LogKey(k)
	}
	return s.RedisKey(k)
}

// RecordsKey is the Redis key of counter k's idempotency records: a hash
// from each record's name (store.Key.String of the request's Idempotency)
// to the record, in the counter's slot.
func (s *Store) RecordsKey(k store.Key) string {
	return s.RedisKey(k) + ":i"
}

// RecordIndexKey is the Redis key of the index of counter k's records: a
// sorted set of their names by expiry (Unix µs), which bounds their number
// and drops the expired ones.
func (s *Store) RecordIndexKey(k store.Key) string {
	return s.RedisKey(k) + ":ix"
}

// PenaltyKey is the Redis key of counter k's penalty state
// (algo.PenaltyState): the counter's key, and so its slot, then ":x".
func (s *Store) PenaltyKey(k store.Key) string { return s.RedisKey(k) + ":x" }

// Take implements store.Store. It waits for the round trip holding req (at
// most Timeout for it to start, then Timeout for the round trip) or for ctx
// to end.
// While the breaker of req's shard is open it returns an error wrapping
// store.ErrUnavailable at once.
func (s *Store) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	if req.Limit.Algorithm == algo.Concurrency || req.HasHold() {
		return s.takeHold(ctx, req)
	}
	if req.Limit.Algorithm < algo.TokenBucket || req.Limit.Algorithm > algo.SlidingLog {
		return algo.Result{}, fmt.Errorf("redis store: unknown algorithm %v", req.Limit.Algorithm)
	}
	c := calls.Get().(*call)
	c.req = req
	s.prepare(c)
	if err := s.decide(ctx, c); err != nil {
		// Not reused: a call whose caller stopped waiting may still be
		// in a round trip.
		return algo.Result{}, err
	}
	res := c.res
	c.reset()
	calls.Put(c)
	return res, nil
}

// calls are Take's calls, reused: a call that finished without error is
// in no batch any more, and its wake channel is empty (see batcher).
var calls = sync.Pool{New: func() any { return new(call) }}

// reset clears c for reuse, keeping its wake channel.
func (c *call) reset() {
	wake := c.wake
	*c = call{}
	c.wake = wake
}

// decide sends c through its shard's breaker and the batcher.
func (s *Store) decide(ctx context.Context, c *call) error {
	if s.opts.Tracing {
		return s.tracedDecide(ctx, c)
	}
	return s.route(ctx, c)
}

// route is decide, untraced.
func (s *Store) route(ctx context.Context, c *call) error {
	c.brk = s.shards.breakerFor(c.req.Key)
	if c.brk.State() != BreakerClosed {
		return c.brk.errOpen
	}
	return s.batch.do(ctx, c)
}

// newCluster makes a cluster's client, slot source and shard map, and
// starts the map loop.
func (s *Store) newCluster(env *breakerEnv) {
	opts := s.opts
	// One filter for every node, added before any command: see coverage.go.
	cov := &coverageFilter{now: time.Now}
	s.slots = newSlotSource(opts.Addrs, fetchTimeout(opts.Timeout), func(addr string) *goredis.Client {
		c := goredis.NewClient(&goredis.Options{Addr: addr, Username: opts.Username, Password: opts.Password,
			TLSConfig: opts.TLS, ContextTimeoutEnabled: true, PoolSize: 1, MaxRetries: -1,
			DialTimeout: fetchTimeout(opts.Timeout), DialerRetries: 1, DisableIdentity: true})
		c.AddHook(cov)
		return c
	})
	s.slots.onNewer = func() { s.refresh(triggerStale) }
	dial := goredis.NewDialer(&goredis.Options{DialTimeout: time.Second, TLSConfig: opts.TLS})
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{
		Addrs:        opts.Addrs,
		ClusterSlots: s.slots.forClient, // go-redis routes by the store's map
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dial(ctx, network, realAddr(addr))
		},
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
		DialTimeout:     time.Second, // a decision's dial has the round trip's deadline
		DialerRetries:   1,           // a refused connection fails now: the breaker decides
		// No CLIENT SETINFO on connect: Redis before 7.2 answers it
		// with an error, counted in its errorstats.
		DisableIdentity: true,
		// Every command is routed by its key's slot: no COMMAND asked of
		// random nodes first (a stopped one among them) for policies.
		DisableRoutingPolicies: true,
		// Redis Cluster sends no maintenance notifications (a Redis
		// Enterprise feature); go-redis's auto mode would look each
		// node's name up in DNS (loopbackName) when making its client.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	mv := &movedHook{refresh: s.refresh}
	cc.OnNewNode(func(c *goredis.Client) { c.AddHook(mv) })
	s.client = cc
	s.shards = newShards(env, opts.KeyPrefix, "0-"+strconv.Itoa(Slots-1), s.log)
	if opts.mapRefresh > 0 {
		s.shards.every = opts.mapRefresh
	}
	s.shards.warm = s.warmPrimaries
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		s.shards.loop(s.slots.fetch, func() { handMap(cc) }, s.stop)
	}()
}

// handMap has go-redis route by the slot map the store just took, now.
// ReloadState reloads lazily, at most once per 200ms: a second heir's map
// within 200ms of the first waited out the rest (TestHeirClosesTheBreaker
// saw 96-119ms). ForEachMaster reloads at once (its ClusterSlots returns
// the map taken, with no I/O), and sends nothing with a callback that does
// nothing.
func handMap(cc *goredis.ClusterClient) {
	_ = cc.ForEachMaster(context.Background(), func(context.Context, *goredis.Client) error { return nil })
}

// fetchTimeout bounds one node's CLUSTER SLOTS answer, dial (and TLS
// handshake) included: a few decision deadlines, between 500ms and
// mapLoadTimeout. No decision waits on it, and a node that does not answer
// is asked once at a time (slotsource.go).
func fetchTimeout(timeout time.Duration) time.Duration {
	return min(max(4*timeout, 500*time.Millisecond), mapLoadTimeout)
}

// refresh asks for a cluster's slot map at once, saying why: the map loop
// loads it from every node that may answer (one load at a time, at most
// one per mapMinGap) and hands it to go-redis, so that a promoted replica
// is found at once.
func (s *Store) refresh(trigger string) {
	if s.opts.Cluster {
		s.shards.reload(trigger)
	}
}

// routesTo reports whether a cluster client sends a command on key to the
// node at addr, by its slot map (no command is sent).
func (s *Store) routesTo(key, addr string) bool {
	cc, ok := s.client.(*goredis.ClusterClient)
	if !ok {
		return true
	}
	c, err := cc.MasterForKey(context.Background(), key)
	return err == nil && realAddr(c.Options().Addr) == addr
}

// Ping checks that Redis answers as decisions reach it: for a cluster,
// the primary of each shard of the store's map, found as a decision finds
// it (the client's slot map, not reloaded first), all at once. Replicas
// are not asked: no decision reaches them, and one that is down (a pod
// being replaced, a node stopped) leaves every decision answered.
func (s *Store) Ping(ctx context.Context) error {
	cc, ok := s.client.(*goredis.ClusterClient)
	if !ok {
		return s.client.Ping(ctx).Err()
	}
	m := s.shards.current.Load()
	errs := make([]error, len(m.breakers)) // in the map's order
	var wg sync.WaitGroup
	for i, b := range m.breakers {
		wg.Go(func() {
			c, err := cc.MasterForKey(ctx, b.probeKey)
			if err == nil {
				err = c.Ping(ctx).Err()
			}
			if err != nil {
				errs[i] = fmt.Errorf("shard %s: %w", b.name, err)
			}
		})
	}
	wg.Wait()
	return joinErrs(errs)
}

// joinErrs wraps the errors that are not nil on one line, "; " between
// them (errors.Join puts newlines in a status message), or returns nil.
func joinErrs(errs []error) error {
	var failed []any
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf(strings.TrimSuffix(strings.Repeat("%w; ", len(failed)), "; "), failed...)
}

// Status describes the store for readiness detail: whether every shard
// answers a ping within ctx, and each breaker that is not closed.
func (s *Store) Status(ctx context.Context) (detail string, ok bool) {
	var parts []string
	ok = true
	if err := s.Ping(ctx); err != nil {
		ok = false
		parts = append(parts, "ping failed: "+err.Error())
	} else {
		parts = append(parts, "ping ok")
	}
	open := 0
	for _, b := range s.Breakers() {
		if b.State != BreakerClosed {
			open++
			parts = append(parts, fmt.Sprintf("shard %s breaker %s since %s", b.Shard, b.State, b.Since.UTC().Format(time.RFC3339)))
		}
	}
	if open == 0 {
		parts = append(parts, fmt.Sprintf("%d breakers closed", len(s.Breakers())))
	}
	return strings.Join(parts, "; "), ok && open == 0
}

// GathersCalls marks the store a store.Gatherer: the calls of a
// store.Gather share round trips (see batcher).
func (s *Store) GathersCalls() {}

var _ store.Gatherer = (*Store)(nil)

// Close fails pending calls, waits for the round trips in flight, and
// closes the connections.
func (s *Store) Close() error {
	if !s.batch.close() {
		return nil // closed already
	}
	close(s.stop)
	s.bg.Wait()
	if s.slots != nil {
		s.slots.close()
	}
	return s.client.Close()
}

// logger returns l, or a logger that discards.
func logger(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}

// LogClientTo sends go-redis's own log lines (a failed dial, one line per
// attempt) to l at debug level: the store logs what matters, once per
// breaker change. go-redis's logger is process-wide.
func LogClientTo(l *slog.Logger) { goredis.SetLogger(clientLogger{l}) }

type clientLogger struct{ l *slog.Logger }

func (c clientLogger) Printf(ctx context.Context, format string, v ...any) {
	c.l.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}

var _ store.Holder = (*Store)(nil)
