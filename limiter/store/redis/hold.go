package redis

import (
	"context"
	"fmt"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// HoldKey is the Redis key of the reservation hold on counter k: the
// counter's key (and so its slot), then ":h:" and the hold's hashed name.
// Concurrency leases live in the counter itself.
func (s *Store) HoldKey(k, hold store.Key) string {
	return s.RedisKey(k) + ":h:" + hold.String()
}

// holdCall is one run of the hold script: a take that holds, or a settle.
type holdCall struct {
	settle bool
	id     string // the holding's ID, as the script stores it
	ttl    int64  // µs: a reservation's record (take)
	actual int64  // settle: the actual cost; negative: at the estimate
}

// takeHold is Take for a request that takes a holding, or peeks at
// Concurrency: one run of the hold script.
func (s *Store) takeHold(ctx context.Context, req store.Request) (algo.Result, error) {
	a := req.Limit.Algorithm
	switch {
	case !slices.Contains(holders, a):
		return algo.Result{}, fmt.Errorf("redis store: %v can't hold a reservation", a)
	case a == algo.Concurrency && req.Cost > 0 && !req.HasHold():
		return algo.Result{}, fmt.Errorf("redis store: %w", store.ErrNoHold)
	case !req.Limit.Penalty.IsZero():
		return algo.Result{}, fmt.Errorf("redis store: %w", store.ErrHoldPenalty)
	}
	c := &call{req: req, hold: &holdCall{id: req.Hold.String(), ttl: max(1, req.HoldTTL.Microseconds())}}
	if err := s.decide(ctx, c); err != nil {
		return algo.Result{}, err
	}
	return c.res, nil
}

// Settle implements store.Holder with one run of the hold script, batched
// and guarded by the shard's breaker like Take.
func (s *Store) Settle(ctx context.Context, req store.SettleRequest) (store.Settlement, error) {
	if !slices.Contains(holders, req.Limit.Algorithm) {
		return store.Settlement{}, fmt.Errorf("redis store: %v holds nothing to settle", req.Limit.Algorithm)
	}
	if !req.Limit.Penalty.IsZero() {
		return store.Settlement{}, fmt.Errorf("redis store: %w", store.ErrHoldPenalty)
	}
	c := &call{req: store.Request{Key: req.Key, Limit: req.Limit, Hold: req.Hold},
		hold: &holdCall{settle: true, id: req.Hold.String(), actual: max(-1, req.Actual)}}
	if err := s.decide(ctx, c); err != nil {
		return store.Settlement{}, err
	}
	return c.settled, nil
}

// holdCmd queues one run of the hold script on p.
func (s *Store) holdCmd(ctx context.Context, p goredis.Pipeliner, c *call, eval bool) *goredis.Cmd {
	r, h := &c.req, c.hold
	var now int64
	if s.opts.PinnedClock != nil {
		now = s.opts.PinnedClock().UnixMicro()
	}
	op, cost := "take", r.Cost
	if h.settle {
		op, cost = "settle", 0
	}
	// Concurrency keeps its leases in the counter: no record key.
	sc, keys := holdScripts[r.Limit.Algorithm], []any{s.CounterKey(r.Key, r.Limit.Algorithm)}
	if r.Limit.Algorithm != algo.Concurrency {
		keys = append(keys, s.HoldKey(r.Key, r.Hold))
	}
	// The calendar's windows and the reserve are sent when set.
	var argv [holdArgs]any
	argv[argLimit-1], argv[argPeriod-1], argv[argBurst-1], argv[argCost-1], argv[argNow-1] = r.Limit.Limit, r.Limit.PeriodMicros(), r.Limit.Burst, cost, now
	argv[holdOp-1], argv[holdID-1], argv[holdTTL-1], argv[holdActual-1] = op, h.id, h.ttl, h.actual
	n := holdActual
	if cal := r.Limit.Calendar; !cal.IsZero() || r.Limit.Headroom > 0 {
		var start, end, next int64
		if !cal.IsZero() {
			start, end, next = calendarWindows(cal, now)
		}
		argv[holdCalStart-1], argv[holdCalEnd-1], argv[holdCalNext-1], argv[holdHeadroom-1] = start, end, next, r.Limit.Headroom
		n = holdHeadroom
	}
	args := append(sc.call(eval, len(keys), len(keys)+n), keys...)
	return p.Do(ctx, append(args, argv[:n]...)...)
}

// parseHold reads hold.lua's reply {allowed, remaining, reset_us,
// retry_us, found, held}.
func parseHold(cmd *goredis.Cmd) (store.Settlement, error) {
	var buf [6]int64
	v, err := int64s(buf[:0], cmd)
	if err != nil {
		return store.Settlement{}, fmt.Errorf("redis store: %w", err)
	}
	if len(v) != 6 {
		return store.Settlement{}, fmt.Errorf("redis store: hold script returned %d values, want 6", len(v))
	}
	st := store.Settlement{
		Found: v[4] == 1,
		Held:  v[5],
		Result: algo.Result{
			Allowed:    v[0] == 1,
			Remaining:  v[1],
			ResetAfter: time.Duration(v[2]) * time.Microsecond,
			RetryAfter: time.Duration(v[3]) * time.Microsecond,
		},
	}
	if v[3] < 0 {
		st.Result.RetryAfter = algo.Never
	}
	return st, nil
}
