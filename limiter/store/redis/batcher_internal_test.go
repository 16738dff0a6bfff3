package redis

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// A caller handed a round trip slot just as its context ends still sends
// that round trip (or passes the slot on): the pending calls are decided
// and the slot is freed, whichever of the two its select picks.
func TestPromotedCallerWhoGivesUpPassesTheSlotOn(t *testing.T) {
	srv := redistest.Start(t)
	s := newInternal(t, srv.Addr, nil)
	b := s.batch
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 1000, Period: time.Second, Burst: 1000}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 50 { // each run's select picks one of two ready cases at random
		c := newCall(s, gone, store.Request{Key: storetest.KeyFor(t, "k"), Limit: lim, Cost: 1})
		other := newCall(s, context.Background(), c.req)
		b.mu.Lock()
		b.slots++ // as a caller that sent a round trip and now hands its slot over
		b.flushers.Add(1)
		b.pending = append(b.pending, c, other)
		b.handOff()
		b.mu.Unlock()
		if err := b.await(gone, c); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("run %d: %v", i, err)
		}
		if promoted := <-other.wake; promoted || other.err != nil || !other.res.Allowed {
			t.Fatalf("run %d: the call behind the promoted one: promoted=%v %+v %v, want decided", i, promoted, other.res, other.err)
		}
		b.mu.Lock()
		slots, pending := b.slots, len(b.pending)
		b.mu.Unlock()
		if slots != 0 || pending != 0 {
			t.Fatalf("run %d: %d slots in use and %d calls pending, want none", i, slots, pending)
		}
	}
}

// A round trip finishes, without sending them, the calls whose caller gave
// up and those that waited the timeout for it to start; it sends the rest.
func TestFlushDropsCallsThatCannotWait(t *testing.T) {
	srv := redistest.Start(t)
	s := newInternal(t, srv.Addr, nil)
	b := s.batch
	lim := algo.Limit{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Hour}
	key := storetest.KeyFor(t, "k")
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	late := newCall(s, context.Background(), store.Request{Key: key, Limit: lim, Cost: 1})
	late.enq = late.enq.Add(-b.timeout)
	canceled := newCall(s, gone, store.Request{Key: key, Limit: lim, Cost: 1})
	live := newCall(s, context.Background(), store.Request{Key: key, Limit: lim, Cost: 1})
	b.mu.Lock()
	b.slots++
	b.flushers.Add(1)
	b.pending = append(b.pending, late, canceled, live)
	b.mu.Unlock()
	b.flush()
	if !errors.Is(late.err, errQueued) || late.cmd != nil {
		t.Errorf("a call that waited the timeout: %v (sent: %v), want errQueued, unsent", late.err, late.cmd != nil)
	}
	if !errors.Is(canceled.err, context.Canceled) || canceled.cmd != nil {
		t.Errorf("a call whose caller gave up: %v (sent: %v), want context.Canceled, unsent", canceled.err, canceled.cmd != nil)
	}
	if live.err != nil || !live.res.Allowed || live.res.Remaining != 9 {
		t.Errorf("the live call: %+v %v, want the first of 10 admitted (nothing else spent)", live.res, live.err)
	}
	for _, c := range []*call{late, canceled, live} {
		if promoted := <-c.wake; promoted {
			t.Errorf("a finished call was told to send a round trip")
		}
	}
	if b.slots != 0 {
		t.Errorf("%d slots in use after the flush, want 0", b.slots)
	}
}

// heldSends is a batcher's send that records each round trip's size and
// holds it until the test releases it; then it decides every call.
type heldSends struct {
	mu      sync.Mutex
	sizes   []int
	started chan int // a round trip's size, as it starts
	release chan struct{}
}

func newHeldSends() *heldSends {
	return &heldSends{started: make(chan int, 64), release: make(chan struct{}, 64)}
}

func (h *heldSends) send(batch []*call) {
	h.mu.Lock()
	h.sizes = append(h.sizes, len(batch))
	h.mu.Unlock()
	h.started <- len(batch)
	<-h.release
	for _, c := range batch {
		c.finish(nil)
	}
}

// startCall runs b.do for a new call in its own goroutine; the returned
// channel receives its error.
func startCall(b *batcher) chan error {
	done := make(chan error, 1)
	go func() { done <- b.do(context.Background(), &call{}) }()
	return done
}

// waitPending waits until n calls are queued in b, unsent.
func waitPending(t *testing.T, b *batcher, n int) {
	t.Helper()
	last := -1
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		b.mu.Lock()
		last = len(b.pending)
		b.mu.Unlock()
		if last == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%d calls pending after 2m, want %d", last, n)
}

// awaitStart waits for the next round trip to start and returns its size.
func awaitStart(t *testing.T, h *heldSends, what string) int {
	t.Helper()
	select {
	case n := <-h.started:
		return n
	case <-time.After(2 * time.Minute):
		h.mu.Lock()
		defer h.mu.Unlock()
		t.Fatalf("%s: no round trip started within 2m (round trips so far: %v)", what, h.sizes)
		return 0
	}
}

// With a round trip in flight that is not late, calls arriving wait for it
// and go together in the next one, though a second slot is free.
func TestCallsDuringATripGoTogetherInTheNext(t *testing.T) {
	h := newHeldSends()
	b := &batcher{workers: 2, maxBatch: 256, timeout: time.Hour, overlapAfter: time.Hour, send: h.send}
	first := startCall(b)
	if n := awaitStart(t, h, "the first call"); n != 1 {
		t.Fatalf("the first round trip carried %d calls, want 1", n)
	}
	var later []chan error
	for range 5 {
		later = append(later, startCall(b))
	}
	waitPending(t, b, 5)
	select {
	case n := <-h.started:
		t.Fatalf("a round trip of %d started beside one not late", n)
	default:
	}
	h.release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatalf("the first call: %v", err)
	}
	if n := awaitStart(t, h, "the calls that waited"); n != 5 {
		t.Fatalf("the second round trip carried %d calls, want the 5 that waited", n)
	}
	h.release <- struct{}{}
	for i, done := range later {
		if err := <-done; err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.slots != 0 || len(b.pending) != 0 {
		t.Fatalf("%d slots in use and %d calls pending at the end, want none", b.slots, len(b.pending))
	}
}

// A round trip that stalls does not hold up the calls behind it: once it
// has been out overlapAfter, the gate's timer sends them in a second one.
func TestStalledTripOpensTheSecondSlot(t *testing.T) {
	h := newHeldSends()
	b := &batcher{workers: 2, maxBatch: 256, timeout: time.Hour, overlapAfter: 20 * time.Millisecond, send: h.send}
	defer b.close()
	first := startCall(b)
	awaitStart(t, h, "the first call")
	second := startCall(b)
	third := startCall(b)
	// The first stays held: only the gate can start the next round trip.
	n := awaitStart(t, h, "the calls behind a stalled round trip")
	if n < 1 || n > 2 {
		t.Fatalf("the round trip beside the stalled one carried %d calls, want 1 or 2", n)
	}
	if n == 1 { // the third arrived after the second trip left: it waits for a slot
		h.release <- struct{}{}
		if m := awaitStart(t, h, "the third call"); m != 1 {
			t.Fatalf("the third round trip carried %d calls, want 1", m)
		}
	}
	h.release <- struct{}{} // the two round trips still held
	h.release <- struct{}{}
	for i, done := range []chan error{first, second, third} {
		if err := <-done; err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
}

// Waiting calls that fill a batch start a round trip beside one in flight
// at once, late or not.
func TestAFullBatchOverlapsAtOnce(t *testing.T) {
	h := newHeldSends()
	b := &batcher{workers: 2, maxBatch: 3, timeout: time.Hour, overlapAfter: time.Hour, send: h.send}
	first := startCall(b)
	awaitStart(t, h, "the first call")
	var later []chan error
	for range 3 {
		later = append(later, startCall(b))
	}
	if n := awaitStart(t, h, "a full batch"); n != 3 {
		t.Fatalf("the round trip beside the first carried %d calls, want a full batch of 3", n)
	}
	h.release <- struct{}{}
	h.release <- struct{}{}
	for i, done := range append([]chan error{first}, later...) {
		if err := <-done; err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
}

// Closing a batcher whose gate is armed fails the waiting calls and leaves
// no slot taken, whether or not the gate's timer fires after.
func TestCloseWithTheGateArmed(t *testing.T) {
	h := newHeldSends()
	b := &batcher{workers: 2, maxBatch: 256, timeout: time.Hour, overlapAfter: 5 * time.Millisecond, send: h.send}
	first := startCall(b)
	awaitStart(t, h, "the first call")
	b.mu.Lock()
	b.newest = time.Now().Add(time.Hour) // the gate stays shut until close
	b.mu.Unlock()
	waiting := startCall(b)
	waitPending(t, b, 1)
	closed := make(chan bool, 1)
	go func() { closed <- b.close() }()
	if err := <-waiting; !errors.Is(err, errClosed) {
		t.Fatalf("a call waiting at close: %v, want errClosed", err)
	}
	h.release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatalf("the call in flight at close: %v", err)
	}
	if !<-closed {
		t.Fatal("close reported the batcher closed already")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.slots != 0 {
		t.Fatalf("%d slots in use after close, want 0", b.slots)
	}
}
