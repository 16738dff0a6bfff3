package redis

import (
	"context"
	"errors"
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
