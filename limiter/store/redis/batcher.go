package redis

// Batcher: concurrent decisions share round trips, with no goroutine of
// the store's own. Invariants:
//   - At most workers round trips are in flight or about to be sent: each
//     holds one of workers slots. A caller that finds a slot free takes it
//     and sends the pending calls itself (at most maxBatch, its own among
//     them); then it hands the slot to the first caller still waiting and
//     not yet handed one, who sends the next round trip, or frees it when
//     none waits. So batches grow with the load, and nothing stands between
//     a caller and Redis but the round trip in flight.
//   - Only the first slot is taken at once. Another is taken only when the
//     newest round trip in flight has been out overlapAfter (by a caller,
//     or by the gate's timer for the first one waiting) or the waiting
//     calls fill a batch: a round trip overlaps another when it is late,
//     not whenever a call arrives during it, so round trips carry more
//     calls each.
//   - Every slot taken is given back exactly once (flushers counts them,
//     and close waits for them). A caller whose context ends stops
//     waiting, but a slot handed to it is passed on, never dropped.
//   - Every call is completed exactly once, by one of: its round trip
//     (send), flush (its context ended, or it waited timeout for a round
//     trip to start: the store is overloaded), or close.
//   - A call made under a store.Gather (several decisions of one request)
//     takes no slot: it waits queued until the gather's last party queues
//     its call or finishes, which kicks the batcher (Kick), so the
//     request's calls share a round trip.
//   - mu guards pending, slots, closed, newest, the gate, and every call's
//     promoted and abandoned flags.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/limiter/store"
)

// turn is what the batcher keeps of a call.
type turn struct {
	ctx context.Context
	enq time.Time // when it was queued
	err error
	// wake tells the caller that its call is done (false), or that it is
	// to send the next round trip (true; see handOff). It can hold both.
	wake chan bool
	// promoted: the caller was told to send a round trip; abandoned: it
	// stopped waiting. Guarded by batcher.mu.
	promoted, abandoned bool
}

// finish completes the call with err (nil: its result is set).
func (t *turn) finish(err error) {
	t.err = err
	t.wake <- false
}

// errClosed fails calls asked of a closed store.
var errClosed = errors.New("redis store: closed")

// errQueued completes a call that waited Timeout for its round trip to
// start: the store is overloaded, which is no shard's fault.
var errQueued = fmt.Errorf("redis store: no round trip started within the deadline: %w (%w)", store.ErrQueueTimeout, context.DeadlineExceeded)

type batcher struct {
	workers  int
	maxBatch int
	timeout  time.Duration
	// overlapAfter gates every slot but the first: another round trip
	// starts beside those in flight only once the newest of them has been
	// out this long (0: at once).
	overlapAfter time.Duration
	// send makes one round trip of batch and finishes every call in it.
	send func(batch []*call)

	mu       sync.Mutex
	pending  []*call // queued, not yet sent
	slots    int     // round trips in flight or about to be sent
	closed   bool
	flushers sync.WaitGroup // one per slot taken
	// newest is when the newest round trip in flight was given its slot;
	// gate opens a slot for the pending calls once it is overlapAfter old.
	newest    time.Time
	gate      *time.Timer
	gateArmed bool
}

// do queues c and waits for it to finish, sending round trips when its
// turn comes, or for ctx to end.
func (b *batcher) do(ctx context.Context, c *call) error {
	c.ctx, c.enq = ctx, time.Now()
	if c.wake == nil { // a reused call keeps its own (see calls)
		c.wake = make(chan bool, 2)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return errClosed
	}
	b.pending = append(b.pending, c)
	g := store.GatherFrom(ctx)
	lead := b.slots < b.workers && g == nil // a gathered call waits to be kicked
	if lead && b.slots > 0 && !b.overlapDue(c.enq) {
		lead = false
		b.armGate(c.enq)
	}
	if lead {
		b.slots++
		b.flushers.Add(1)
		b.newest = c.enq
	}
	b.mu.Unlock()
	if lead {
		b.flush()
	}
	if g != nil {
		g.Park(b)
		defer g.Unpark()
	}
	return b.await(ctx, c)
}

// Kick sends the pending calls when a Gather's parties have all queued
// theirs (or finished): it gives a slot to a pending caller, as do does
// for a caller that finds one free; a round trip in flight, or the gate,
// sends them otherwise.
func (b *batcher) Kick() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || len(b.pending) == 0 || b.slots >= b.workers {
		return
	}
	if now := time.Now(); b.slots > 0 && !b.overlapDue(now) {
		b.armGate(now)
		return
	}
	for _, c := range b.pending {
		if c.promoted && !c.abandoned {
			return // told to send already
		}
	}
	b.slots++
	b.flushers.Add(1)
	if !b.promote() {
		b.slots--
		b.flushers.Done()
	}
}

// await waits for c to finish, sending round trips when told to (see
// handOff), or for ctx to end.
func (b *batcher) await(ctx context.Context, c *call) error {
	led := false
	for {
		select {
		case promoted := <-c.wake:
			if !promoted {
				return c.err
			}
			led = true
			b.flush()
		case <-ctx.Done():
			b.mu.Lock()
			c.abandoned = true
			mustLead := c.promoted && !led
			b.mu.Unlock()
			if mustLead { // the slot was handed to us: pass it on
				b.flush()
			}
			return ctx.Err()
		}
	}
}

// flush sends one round trip of pending calls (at most maxBatch), after
// finishing those whose caller gave up or that waited too long, then hands
// its slot over.
func (b *batcher) flush() {
	b.mu.Lock()
	n := min(len(b.pending), b.maxBatch)
	batch := slices.Clone(b.pending[:n])
	rest := copy(b.pending, b.pending[n:])
	clear(b.pending[rest:])
	b.pending = b.pending[:rest]
	if rest > 0 && b.slots < b.workers { // left behind: they may wait on this round trip
		b.armGate(time.Now())
	}
	b.mu.Unlock()
	now := time.Now()
	live := batch[:0]
	for _, c := range batch {
		err := c.ctx.Err()
		if err == nil && now.Sub(c.enq) >= b.timeout {
			err = errQueued
		}
		if err != nil {
			c.finish(err)
			continue
		}
		live = append(live, c)
	}
	if len(live) > 0 {
		b.send(live)
	}
	b.mu.Lock()
	b.handOff()
	b.mu.Unlock()
}

// handOff gives a slot to the first pending caller still waiting and not
// yet told, or frees it. b.mu must be held.
func (b *batcher) handOff() {
	b.disarmGate() // the pending calls go next: none waits on a late round trip
	if b.promote() {
		return
	}
	b.slots--
	b.flushers.Done()
}

// promote tells the first pending caller still waiting and not yet told
// to send the next round trip, and reports whether there was one. b.mu
// must be held.
func (b *batcher) promote() bool {
	for _, c := range b.pending {
		if !c.promoted && !c.abandoned {
			c.promoted = true
			b.newest = time.Now()
			c.wake <- true
			return true
		}
	}
	return false
}

// overlapDue reports whether a round trip may start beside those in
// flight: the newest of them has been out overlapAfter, or the calls
// waiting fill a batch. b.mu must be held.
func (b *batcher) overlapDue(now time.Time) bool {
	return b.overlapAfter <= 0 || now.Sub(b.newest) >= b.overlapAfter || len(b.pending) >= b.maxBatch
}

// armGate makes unstall run when the newest round trip in flight is
// overlapAfter old, unless it is set to already. b.mu must be held.
func (b *batcher) armGate(now time.Time) {
	if b.gateArmed {
		return
	}
	b.gateArmed = true
	d := b.overlapAfter - now.Sub(b.newest)
	if b.gate == nil {
		b.gate = time.AfterFunc(d, b.unstall)
		return
	}
	b.gate.Reset(d)
}

// disarmGate stops the gate's timer, unless it fired already (then unstall
// runs, finds nothing to do, and disarms it). b.mu must be held.
func (b *batcher) disarmGate() {
	if b.gateArmed && b.gate.Stop() {
		b.gateArmed = false
	}
}

// unstall opens another slot for the pending calls when every round trip
// in flight has been out overlapAfter or longer (one stalled: a slow
// server, a lost packet, a large batch), and calls still wait.
func (b *batcher) unstall() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gateArmed = false
	if b.closed || b.slots == 0 || b.slots >= b.workers || len(b.pending) == 0 {
		return
	}
	if now := time.Now(); !b.overlapDue(now) {
		b.armGate(now)
		return
	}
	b.slots++
	b.flushers.Add(1)
	if !b.promote() { // every pending caller already sends (or gave up)
		b.slots--
		b.flushers.Done()
	}
}

// close fails the pending calls and every later one, and waits for the
// round trips in flight. It reports false when it had closed already.
func (b *batcher) close() bool {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return false
	}
	b.closed = true
	if b.gate != nil {
		b.gate.Stop()
	}
	for _, c := range b.pending {
		c.finish(errClosed)
	}
	b.pending = nil
	b.mu.Unlock()
	b.flushers.Wait()
	return true
}
