package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/limiter/store"
)

// BreakerState is the state of a shard's circuit breaker, and the value of
// the sluice_redis_breaker_state gauge.
type BreakerState int32

const (
	// BreakerClosed sends decisions to the shard.
	BreakerClosed BreakerState = 0
	// BreakerOpen fails decisions at once with store.ErrUnavailable.
	BreakerOpen BreakerState = 1
	// BreakerHalfOpen is an open breaker probing the shard: decisions
	// still fail at once until the probe answers.
	BreakerHalfOpen BreakerState = 2
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return "BreakerState(" + strconv.Itoa(int(s)) + ")"
}

// BreakerOptions tune the circuit breaker of every shard.
type BreakerOptions struct {
	// Failures is the number of consecutive failed round trips to a shard
	// that open its breaker, once they span Span; 0 means 5. A round trip
	// fails when a call in it times out, cannot reach the shard, or is
	// answered CLUSTERDOWN, TRYAGAIN, MASTERDOWN or LOADING. Script errors
	// and nil replies are answers, not failures.
	Failures int
	// Span is how long the failures must have lasted, from the first of
	// them; 0 means 100ms. A stall of this process (a GC pause, CPU
	// throttling) times out every round trip in flight at once, on every
	// shard: that is not a shard failing, and it does not last.
	Span time.Duration
	// Cooldown is how long an open breaker waits before probing the
	// shard, and between probes; 0 means 250ms. A probe is one command
	// routed to the shard like a decision, with the store's Timeout.
	Cooldown time.Duration
}

// Failure classes, the "class" label of sluice_redis_errors_total.
const (
	ClassTimeout     = "timeout"
	ClassConnection  = "connection"
	ClassClusterDown = "clusterdown"
	ClassTryAgain    = "tryagain"
	ClassMasterDown  = "masterdown"
	ClassLoading     = "loading"
	// ClassRedirect counts MOVED and ASK replies that reached a decision:
	// the slot moved and was not followed within the deadline. It is no
	// shard failure, so it never opens a breaker.
	ClassRedirect = "redirect"
)

// FailureClass says why err shows that a shard cannot answer, or returns ""
// when the shard did answer, if only with an error reply (a script error, a
// nil, WRONGTYPE...), or when the caller gave up (context canceled).
func FailureClass(err error) string {
	switch {
	case err == nil, errors.Is(err, goredis.Nil), errors.Is(err, context.Canceled), errors.Is(err, goredis.ErrClosed):
		return ""
	case errors.Is(err, context.DeadlineExceeded):
		return ClassTimeout
	}
	var reply goredis.Error
	if errors.As(err, &reply) {
		msg := strings.TrimPrefix(reply.Error(), "ERR ")
		for _, p := range [...]struct{ prefix, class string }{
			{"CLUSTERDOWN", ClassClusterDown},
			{"TRYAGAIN", ClassTryAgain},
			{"MASTERDOWN", ClassMasterDown},
			{"LOADING", ClassLoading},
		} {
			if strings.HasPrefix(msg, p.prefix) {
				return p.class
			}
		}
		return ""
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ClassTimeout
	}
	switch {
	case errors.Is(err, goredis.ErrPoolTimeout):
		return ClassTimeout
	case ne != nil, errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return ClassConnection
	}
	// Anything else that is not a reply comes from the client failing to
	// reach the shard (no node for the slot, a pool exhausted...).
	return ClassConnection
}

// breaker is the circuit breaker of one shard: a set of slot ranges owned
// by one primary. Its name is the ranges, so it survives a failover, where
// a replica takes over the same slots.
type breaker struct {
	s        *Store
	name     string
	probeKey string // a key in the shard's slots
	errOpen  error  // returned while open: no allocation per decision

	state     atomic.Int32
	fails     atomic.Int32 // consecutive failed round trips while closed
	firstFail atomic.Int64 // Unix ns of the first of them
	since     atomic.Int64 // Unix ns of the last state change

	retired chan struct{} // closed when the shard leaves the map
}

func newBreaker(s *Store, name, probeKey string) *breaker {
	b := &breaker{
		s:        s,
		name:     name,
		probeKey: probeKey,
		errOpen:  fmt.Errorf("redis store: shard %s: circuit breaker open: %w", name, store.ErrUnavailable),
		retired:  make(chan struct{}),
	}
	b.since.Store(time.Now().UnixNano())
	s.metrics.state.WithLabelValues(name).Set(float64(BreakerClosed))
	return b
}

func (b *breaker) State() BreakerState { return BreakerState(b.state.Load()) }

// record counts the outcome of one round trip to the shard. Only a closed
// breaker counts; an open one changes state through its probes alone.
func (b *breaker) record(ok bool) {
	if b.State() != BreakerClosed {
		return
	}
	if ok {
		if b.fails.Load() != 0 {
			b.fails.Store(0)
		}
		return
	}
	now := time.Now().UnixNano()
	n := b.fails.Add(1)
	if n == 1 {
		b.firstFail.Store(now)
	}
	if int(n) >= b.s.opts.Breaker.Failures && now-b.firstFail.Load() >= int64(b.s.opts.Breaker.Span) {
		b.open()
	}
}

func (b *breaker) set(st BreakerState) {
	b.state.Store(int32(st))
	b.since.Store(time.Now().UnixNano())
	b.s.metrics.state.WithLabelValues(b.name).Set(float64(st))
}

// open trips the breaker, once, and starts probing the shard.
func (b *breaker) open() {
	select {
	case <-b.retired: // its shard left the map; a late round trip reported
		return
	default:
	}
	if !b.state.CompareAndSwap(int32(BreakerClosed), int32(BreakerOpen)) {
		return
	}
	b.set(BreakerOpen)
	b.s.metrics.opened.WithLabelValues(b.name).Inc()
	b.s.log.Warn("Redis shard unavailable: circuit breaker open; its decisions follow each policy's failureMode",
		"shard", b.name, "failures", b.fails.Load())
	b.s.reloadCluster()
	b.s.bg.Add(1)
	go func() {
		defer b.s.bg.Done()
		b.probe()
	}()
}

// probe waits Cooldown, then asks the shard one routed command, until it
// answers; then it closes the breaker.
func (b *breaker) probe() {
	t := time.NewTimer(b.s.opts.Breaker.Cooldown)
	defer t.Stop()
	opened := time.Now()
	for {
		select {
		case <-b.s.stop:
			return
		case <-b.retired:
			return
		case <-t.C:
		}
		b.set(BreakerHalfOpen)
		ctx, cancel := context.WithTimeout(context.Background(), b.s.opts.Timeout)
		err := b.s.client.Exists(ctx, b.probeKey).Err()
		cancel()
		if class := FailureClass(err); class == "" {
			b.fails.Store(0)
			b.set(BreakerClosed)
			b.s.log.Info("Redis shard answers again: circuit breaker closed", "shard", b.name, "open_for", time.Since(opened).Round(time.Millisecond))
			return
		} else {
			b.s.metrics.errors.WithLabelValues(class).Inc()
		}
		b.set(BreakerOpen)
		b.s.reloadCluster()
		t.Reset(b.s.opts.Breaker.Cooldown)
	}
}

// shardMap maps every hash slot to its shard's breaker.
type shardMap struct {
	index    [Slots]uint16
	breakers []*breaker
}

// BreakerStatus is one shard's breaker, for readiness detail and tests.
type BreakerStatus struct {
	// Shard names the shard by its slot ranges ("0-5460"), or "standalone".
	Shard string
	State BreakerState
	// Since is when the breaker entered State.
	Since time.Time
}

// Breakers lists the breakers of the shards the store knows, by shard.
func (s *Store) Breakers() []BreakerStatus {
	m := s.shards.Load()
	out := make([]BreakerStatus, len(m.breakers))
	for i, b := range m.breakers {
		out[i] = BreakerStatus{Shard: b.name, State: b.State(), Since: time.Unix(0, b.since.Load())}
	}
	slices.SortFunc(out, func(a, b BreakerStatus) int { return firstSlot(a.Shard) - firstSlot(b.Shard) })
	return out
}

// firstSlot is the first slot of a shard name such as "5461-10921", or 0.
func firstSlot(name string) int {
	end := strings.IndexAny(name, "-,")
	if end < 0 {
		end = len(name)
	}
	n, _ := strconv.Atoi(name[:end])
	return n
}

// breakerFor returns the breaker of k's shard.
func (s *Store) breakerFor(k store.Key) *breaker {
	m := s.shards.Load()
	if len(m.breakers) == 1 {
		return m.breakers[0]
	}
	return m.breakers[m.index[keySlot(k)]]
}

// keySlot is the hash slot of RedisKey(k): the CRC of the key's hash tag,
// its base64 form, computed without allocating.
func keySlot(k store.Key) int {
	var tag [22]byte
	keyEncoding.Encode(tag[:], k[:])
	return int(crc16(tag[:]) % Slots)
}

// reloadCluster asks the cluster client to reload its slot map, and the
// store to reload its map of shards: a replica promoted after a failover
// is then found at once.
func (s *Store) reloadCluster() {
	cc, ok := s.client.(*goredis.ClusterClient)
	if !ok {
		return
	}
	cc.ReloadState(context.Background()) // asynchronous
	select {
	case s.refresh <- struct{}{}:
	default:
	}
}

const (
	mapRefreshEvery = 10 * time.Second
	mapRetryEvery   = time.Second
	mapLoadTimeout  = time.Second
)

// mapLoop keeps the cluster's map of shards: loaded at start, every
// mapRefreshEvery (slots move when shards are added), and at once when a
// breaker opens.
func (s *Store) mapLoop(cc *goredis.ClusterClient) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-s.refresh:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), mapLoadTimeout)
		slots, err := cc.ClusterSlots(ctx).Result()
		cancel()
		next := mapRefreshEvery
		if err != nil || len(slots) == 0 {
			if s.mapLoaded.Load() {
				s.log.Debug("Could not reload the Redis Cluster slot map; keeping the last one", "error", err)
			}
			next = mapRetryEvery
		} else {
			s.installMap(slots)
		}
		t.Reset(next)
	}
}

// installMap groups slots by the primary that owns them (unassigned slots
// form a group of their own) and installs a breaker per group, keeping the
// breakers of groups whose slots did not change.
func (s *Store) installMap(slots []goredis.ClusterSlot) {
	owner := make([]string, Slots)
	for i := range owner {
		owner[i] = "" // unassigned
	}
	for _, r := range slots {
		if len(r.Nodes) == 0 || r.Start < 0 || r.End >= Slots || r.Start > r.End {
			continue
		}
		id := r.Nodes[0].ID
		if id == "" {
			id = r.Nodes[0].Addr
		}
		for i := r.Start; i <= r.End; i++ {
			owner[i] = "node:" + id
		}
	}
	// Ranges per owner, in slot order.
	ranges := map[string][]string{}
	var order []string
	for i := 0; i < Slots; {
		j := i
		for j+1 < Slots && owner[j+1] == owner[i] {
			j++
		}
		o := owner[i]
		if _, ok := ranges[o]; !ok {
			order = append(order, o)
		}
		if i == j {
			ranges[o] = append(ranges[o], strconv.Itoa(i))
		} else {
			ranges[o] = append(ranges[o], strconv.Itoa(i)+"-"+strconv.Itoa(j))
		}
		i = j + 1
	}
	m := &shardMap{}
	idx := map[string]uint16{}
	s.mapMu.Lock()
	defer s.mapMu.Unlock()
	kept := map[string]bool{}
	for _, o := range order {
		name := strings.Join(ranges[o], ",")
		idx[o] = uint16(len(m.breakers))
		b := s.breakers[name]
		if b == nil {
			b = newBreaker(s, name, "")
			s.breakers[name] = b
		}
		kept[name] = true
		m.breakers = append(m.breakers, b)
	}
	for i := range m.index {
		m.index[i] = idx[owner[i]]
	}
	for _, b := range m.breakers {
		if b.probeKey == "" {
			b.probeKey = s.probeKey(m, b)
		}
	}
	for name, b := range s.breakers {
		if !kept[name] {
			close(b.retired)
			delete(s.breakers, name)
			s.metrics.state.DeleteLabelValues(name)
			s.metrics.opened.DeleteLabelValues(name)
		}
	}
	prev := s.shards.Swap(m)
	s.mapLoaded.Store(true)
	if len(prev.breakers) != len(m.breakers) || !slices.Equal(prev.index[:], m.index[:]) {
		names := make([]string, len(m.breakers))
		for i, b := range m.breakers {
			names[i] = b.name
		}
		s.log.Info("Redis Cluster shards", "shards", names)
	}
}

// probeKey finds a key in b's slots, for its probes.
func (s *Store) probeKey(m *shardMap, b *breaker) string {
	for i := 0; ; i++ {
		tag := "probe-" + strconv.Itoa(i)
		slot := int(crc16([]byte(tag)) % Slots)
		if m.breakers[m.index[slot]] == b {
			return s.opts.KeyPrefix + ":{" + tag + "}"
		}
	}
}

// initialMap is the map before the cluster's is known (or for a standalone
// server): every slot on one breaker.
func (s *Store) initialMap(name string) *shardMap {
	b := newBreaker(s, name, s.opts.KeyPrefix+":{probe}")
	s.breakers = map[string]*breaker{name: b}
	return &shardMap{breakers: []*breaker{b}}
}

// logger returns l, or a logger that discards.
func logger(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}

// Collectors are the store's metrics, for a registry that did not exist
// when the store was made (Options.Registerer registers them at once).
func (s *Store) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.metrics.state, s.metrics.opened, s.metrics.errors}
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

// LogClientTo sends go-redis's own log lines (a failed dial, one line per
// attempt) to l at debug level: the store logs what matters, once per
// breaker change. go-redis's logger is process-wide.
func LogClientTo(l *slog.Logger) { goredis.SetLogger(clientLogger{l}) }

type clientLogger struct{ l *slog.Logger }

func (c clientLogger) Printf(ctx context.Context, format string, v ...any) {
	c.l.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}
