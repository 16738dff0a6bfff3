package redis

// Breaker: the circuit breaker of one shard. Invariants:
//   - Closed, it counts consecutive failed round trips (see FailureClass);
//     a success resets the count. It opens at Failures failures that span
//     Span from the first, so one stall of this process does not open it.
//   - Open, decisions on its shard fail at once with errOpen, and only its
//     probe changes its state: every Cooldown the probe sends one command
//     routed like a decision (half-open while it waits), and closes the
//     breaker when the shard answers. Round trips still in flight when it
//     opened do not count.
//   - It opens at most once per closing, and each opening starts one probe
//     goroutine, which ends when the breaker closes, retires or the store
//     closes.
//   - Opening and every failed probe tell the store to reload the slot
//     map, so that a promoted replica is found at once. A map that names a
//     new primary for the shard kicks the probe: it probes now, and again
//     every kickRetry for kickFor after the kick, while go-redis has not
//     taken the new map and while the new primary refuses (a replica
//     promoted while most primaries were lost answers CLUSTERDOWN for its
//     rejoin delay, up to 5s), so the breaker closes within a kickRetry of
//     the new primary's first answer, never a cool-down after it. The
//     probe stays one command at a time, and a kick at most kickFor/kickRetry
//     of them; past kickFor it is paced by Cooldown again. A kick that came
//     while the breaker was closed is spent once a round trip to the shard
//     succeeds after it: a later opening waits its cool-down.
//   - A retired breaker (its shard left the slot map) never opens again.
//
// sony/gobreaker's two-step breaker was considered: its half-open state
// lets real requests through as probes (each would wait a round trip
// instead of failing in microseconds) and it has no notion of a span, so
// it would take wrappers of the same size as this file.

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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

func (o *BreakerOptions) setDefaults() {
	if o.Failures <= 0 {
		o.Failures = 5
	}
	if o.Cooldown <= 0 {
		o.Cooldown = 250 * time.Millisecond
	}
	if o.Span <= 0 {
		o.Span = 100 * time.Millisecond
	}
}

// breakerEnv is what the breakers of one store share.
type breakerEnv struct {
	opts    BreakerOptions
	metrics *storeMetrics
	log     *slog.Logger
	// probe sends one command for key, routed like a decision, with a
	// deadline.
	probe func(key string) error
	// reload asks for the slot map again (asynchronously), saying why.
	reload func(trigger string)
	// routes reports whether a decision on key goes to the node at addr.
	routes func(key, addr string) bool
	stop   <-chan struct{} // closed when the store closes
	bg     *sync.WaitGroup // counts the probe goroutines
}

// breaker is the circuit breaker of one shard: a set of slot ranges owned
// by one primary. Its name is the ranges, so it survives a failover, where
// a replica takes over the same slots.
type breaker struct {
	env      *breakerEnv
	name     string
	probeKey string // a key in the shard's slots
	errOpen  error  // returned while open: no allocation per decision
	// roundtrip is the shard's sluice_redis_roundtrip_seconds.
	roundtrip prometheus.Observer

	state     atomic.Int32
	fails     atomic.Int32 // consecutive failed round trips while closed
	firstFail atomic.Int64 // Unix ns of the first of them
	since     atomic.Int64 // Unix ns of the last state change

	retired chan struct{}          // closed when the shard leaves the map
	kicked  chan struct{}          // a new primary: probe now (see kick)
	heir    atomic.Pointer[string] // the new primary's address, from kick
	// heirAt is when the last kick named a new primary (Unix ns) until a
	// round trip to the shard first succeeds after it: that decision is
	// logged, the limiter's side of a failover's timeline.
	heirAt atomic.Int64
}

// kickRetry paces the probes for kickFor after a kick. go-redis takes a
// new slot map as the store hands it (handMap), or at its next reload when
// a reload of its own raced it. A replica promoted while it saw
// most primaries lost (CLUSTER FAILOVER TAKEOVER after a node holding most
// primaries stopped) answers CLUSTERDOWN until its rejoin delay has passed
// since it last saw them lost: Redis's cluster-node-timeout, clamped to
// 500ms..5s (clusterUpdateState). The journey's limiters waited a
// cool-down on top of it; kickFor outlasts the longest rejoin delay.
const (
	kickRetry = 25 * time.Millisecond
	kickFor   = 6 * time.Second
)

func newBreaker(env *breakerEnv, name, probeKey string) *breaker {
	b := &breaker{
		env:       env,
		name:      name,
		probeKey:  probeKey,
		errOpen:   fmt.Errorf("redis store: shard %s: circuit breaker open: %w", name, store.ErrUnavailable),
		retired:   make(chan struct{}),
		kicked:    make(chan struct{}, 1),
		roundtrip: env.metrics.roundtrip.WithLabelValues(name),
	}
	b.since.Store(time.Now().UnixNano())
	env.metrics.state.WithLabelValues(name).Set(float64(BreakerClosed))
	return b
}

func (b *breaker) State() BreakerState { return BreakerState(b.state.Load()) }

// record counts the outcome of one round trip to the shard. Only a closed
// breaker counts; an open one changes state through its probes alone.
func (b *breaker) record(ok bool) {
	if ok {
		if at := b.heirAt.Load(); at != 0 && b.heirAt.CompareAndSwap(at, 0) {
			b.env.log.Info("Redis shard decides again, on its new primary", "shard", b.name, "primary", *b.heir.Load(),
				"after", time.Since(time.Unix(0, at)).Round(time.Millisecond))
		}
	}
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
	if int(n) >= b.env.opts.Failures && now-b.firstFail.Load() >= int64(b.env.opts.Span) {
		b.open()
	}
}

// retire takes the breaker out of use: its shard left the slot map.
func (b *breaker) retire() {
	close(b.retired)
	b.env.metrics.state.DeleteLabelValues(b.name)
	b.env.metrics.opened.DeleteLabelValues(b.name)
	b.env.metrics.roundtrip.DeleteLabelValues(b.name)
	b.env.metrics.errors.DeletePartialMatch(prometheus.Labels{"shard": b.name})
}

func (b *breaker) set(st BreakerState) {
	b.state.Store(int32(st))
	b.since.Store(time.Now().UnixNano())
	b.env.metrics.state.WithLabelValues(b.name).Set(float64(st))
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
	b.env.metrics.opened.WithLabelValues(b.name).Inc()
	b.env.log.Warn("Redis shard unavailable: circuit breaker open; its decisions follow each policy's failureMode",
		"shard", b.name, "failures", b.fails.Load())
	b.env.reload(triggerBreaker)
	b.env.bg.Add(1)
	go func() {
		defer b.env.bg.Done()
		b.probe()
	}()
}

// kick tells an open breaker's probe that its shard has a new primary, at
// addr, and marks the shard's next answered round trip for the log.
func (b *breaker) kick(addr string) {
	b.heir.Store(&addr)
	b.heirAt.Store(time.Now().UnixNano())
	select {
	case b.kicked <- struct{}{}:
	default:
	}
}

// probe waits Cooldown, or a kick, then asks the shard one routed command,
// until it answers; then it closes the breaker. For kickFor after a kick it
// asks every kickRetry, once go-redis routes to the new primary.
func (b *breaker) probe() {
	t := time.NewTimer(b.env.opts.Cooldown)
	defer t.Stop()
	opened := time.Now()
	var until time.Time // of the last kick's retries
	refused := 0        // probes the new primary refused since the kick
	for {
		select {
		case <-b.env.stop:
			return
		case <-b.retired:
			return
		case <-t.C:
		case <-b.kicked:
			at := b.heirAt.Load()
			if at == 0 {
				continue // a kick while closed, whose new primary has answered since
			}
			until, refused = time.Unix(0, at).Add(kickFor), 0
			t.Stop()
		}
		kicking := time.Now().Before(until)
		if kicking && !b.routed() {
			// go-redis has not taken the new map yet: the probe would
			// go to the old primary, known dead.
			t.Reset(kickRetry)
			continue
		}
		b.set(BreakerHalfOpen)
		class := FailureClass(b.env.probe(b.probeKey))
		if class == "" {
			b.fails.Store(0)
			b.set(BreakerClosed)
			b.env.log.Info("Redis shard answers again: circuit breaker closed", "shard", b.name,
				"open_for", time.Since(opened).Round(time.Millisecond), "refused_after_new_primary", refused)
			return
		}
		b.env.metrics.errors.WithLabelValues(b.name, class).Inc()
		b.set(BreakerOpen)
		b.env.reload(triggerBreaker)
		next := b.env.opts.Cooldown
		if kicking {
			refused++
			next = min(next, kickRetry)
		}
		t.Reset(next)
	}
}

// routed reports whether a probe goes to the new primary the last kick
// named.
func (b *breaker) routed() bool {
	heir := b.heir.Load()
	return heir == nil || b.env.routes == nil || b.env.routes(b.probeKey, *heir)
}

// probeCommand is the breakers' probe: EXISTS on a key of the shard, with
// the store's deadline.
func (s *Store) probeCommand(key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	return s.client.Exists(ctx, key).Err()
}
