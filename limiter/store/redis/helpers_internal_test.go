package redis

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

func newInternal(t *testing.T, addr string, clock store.Clock) *Store {
	s, err := New(Options{Addrs: []string{addr}, PinnedClock: clock, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newCall is req as Take queues it, with ctx, without sending it.
func newCall(s *Store, ctx context.Context, req store.Request) *call {
	c := &call{req: req}
	c.ctx, c.enq, c.wake = ctx, time.Now(), make(chan bool, 2)
	c.brk = s.shards.breakerFor(req.Key)
	s.prepare(c)
	return c
}

// runBatch sends reqs as one round trip, in order, as concurrent callers'
// calls would be, and returns each one's result and error.
func runBatch(s *Store, reqs []store.Request) ([]algo.Result, []error) {
	calls := make([]*call, len(reqs))
	for i, r := range reqs {
		calls[i] = newCall(s, context.Background(), r)
	}
	s.send(calls)
	res, errs := make([]algo.Result, len(calls)), make([]error, len(calls))
	for i, c := range calls {
		res[i], errs[i] = c.res, c.err
	}
	return res, errs
}

// took makes slots the last map, unjudged.
func (ss *slotSource) took(slots []goredis.ClusterSlot) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.setLast(slots)
}
