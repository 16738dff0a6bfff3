package redis

// Round trip: one pipeline of script runs, and what each call gets back.
// Invariants:
//   - A round trip has one deadline, Timeout, for all its sends.
//   - A call whose script did not run because the server had not cached it
//     (NOSCRIPT) is sent again with EVAL; one that met a slot in migration
//     (TRYAGAIN), or a redirect go-redis gave up following (MOVED or ASK
//     after its own retries, as when ASK leads to TRYAGAIN and back), is
//     sent again after 5, 10, 20, then 40ms, within the deadline. None of
//     these ran the script. Other replies are final: a call that fails,
//     fails alone.
//   - Every call in the batch is finished, and every shard the round trip
//     touched tells its breaker once: failed if any of its calls failed in
//     a way FailureClass names.
//   - A call that timed out, could not reach its node, or met CLUSTERDOWN,
//     MASTERDOWN or a redirect has a cluster's slot map reloaded at once
//     (Store.refresh; coalesced and rate-limited), not when a breaker opens.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// call is one decision, Take's or Grant's, on its way through the batcher
// and a round trip.
type call struct {
	turn
	req store.Request
	brk *breaker // of req.Key's shard
	res algo.Result

	// keys and argv are a Take's script KEYS and ARGV (see prepare), at
	// the positions scripts.go names (argv[i] is ARGV i+1); they are sent
	// by pointer, which boxes them without copying.
	keys  [4]string
	nkeys int
	argv  [exactRecord - 1]int64
	nargv int
	// record is the idempotency record's name, ARGV exactRecord: sent when
	// set, and empty when ext follows.
	record string
	// ext are the ARGV after the record's name (ext[i] is ARGV
	// exactRecord+1+i): a calendar's windows, the reserve, a penalty's
	// settings; the first next of them are sent.
	ext  [exactArgs - exactRecord]int64
	next int
	args [3 + 4 + exactArgs]any // backs takeArgs' (read only in the round trip)

	// cmd is the call's script run, in the last send: its own, or the
	// multi script run it shares (multi set; see multi.go), whose
	// answer for it is res or multiErr.
	cmd      *goredis.Cmd
	multi    bool
	multiErr error
	header   int64 // its header in a multi script run
	// sends counts the call's sends: more than 1 after NOSCRIPT, TRYAGAIN
	// or a redirect (trace.go).
	sends int

	// grantReq, when set, makes this a grant call (see Grant), answered in
	// grant.
	grantReq *store.GrantRequest
	grant    store.Grant

	// hold, when set, makes this a run of the hold script (see hold.go):
	// a Take that holds, or a Settle, answered in res and settled.
	hold    *holdCall
	settled store.Settlement
}

// tryAgainBackoff is the first wait before calls that got TRYAGAIN are
// sent again; it doubles, four sends at most, within the batch's deadline.
const tryAgainBackoff = 5 * time.Millisecond

// send makes one round trip of batch: EVALSHA for each call, EVAL again
// for NOSCRIPT replies (which also caches the script on that node),
// TRYAGAIN and redirect replies (a slot in migration) again after a short backoff. It
// finishes every call, and tells each shard's breaker how its round trip
// went.
func (s *Store) send(batch []*call) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()

	s.pipeline(ctx, batch, false)
	s.resend(ctx, batch, isNoScript)
	for wait := tryAgainBackoff; anyErr(batch, notRunYet) && ctx.Err() == nil; wait = min(2*wait, 8*tryAgainBackoff) {
		// A slot being migrated answers TRYAGAIN to a script over a key
		// that is there and one that is not, and ASK or MOVED for one
		// that has gone: the script did not run, and the slot closes
		// within a few round trips.
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		s.resend(ctx, batch, notRunYet)
	}
	var outcomes [8]outcome
	seen := outcomes[:0]
	trigger := ""
	for _, c := range batch {
		class := FailureClass(c.replyErr())
		switch {
		case class != "":
			s.metrics.errors.WithLabelValues(c.shard(), class).Inc()
			if class != ClassTryAgain && class != ClassLoading {
				trigger = class
			}
		case isRedirect(c.replyErr()):
			s.metrics.errors.WithLabelValues(c.shard(), ClassRedirect).Inc()
			trigger = triggerMoved
		}
		seen = noteOutcome(seen, c.brk, class != "")
		var err error
		switch {
		case c.hold != nil:
			c.settled, err = parseHold(c.cmd)
			c.res = c.settled.Result
		case c.grantReq != nil:
			c.grant, err = parseGrant(c.cmd)
		case c.multi:
			if c.multiErr != nil {
				err = fmt.Errorf("redis store: %w", c.multiErr)
			}
		default:
			c.res, err = parseResult(c.cmd)
		}
		c.finish(err)
	}
	if trigger != "" {
		s.refresh(trigger)
	}
	took := time.Since(start).Seconds()
	for _, o := range seen {
		o.b.record(!o.failed)
		o.b.roundtrip.Observe(took)
	}
}

// shard names the call's shard as its breaker does.
func (c *call) shard() string {
	if c.brk == nil {
		return "unknown"
	}
	return c.brk.name
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

// pipeline sends one EVALSHA (or EVAL) per call in one round trip; on a
// standalone server, Takes share one, of the multi script (multi.go),
// when there are at least multiMin of them.
func (s *Store) pipeline(ctx context.Context, calls []*call, eval bool) {
	var multi []*call
	var runs [(defaultMaxBatch + multiMax - 1) / multiMax]*goredis.Cmd
	mcmds := runs[:0]
	_, _ = s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		takes := 0
		if !s.opts.Cluster {
			for _, c := range calls {
				if c.hold == nil && c.grantReq == nil {
					takes++
				}
			}
		}
		if takes >= s.multiMin {
			multi = make([]*call, 0, takes)
		}
		for _, c := range calls {
			c.sends++
			c.multi, c.multiErr = false, nil
			switch {
			case c.hold != nil:
				c.cmd = s.holdCmd(ctx, p, c, eval)
			case c.grantReq != nil:
				c.cmd = s.grantCmd(ctx, p, c.grantReq, eval)
			case multi != nil:
				c.multi = true
				multi = append(multi, c)
			default:
				c.cmd = p.Do(ctx, takeArgs(eval, c)...)
			}
		}
		for run := range slices.Chunk(multi, multiMax) {
			cmd := p.Do(ctx, multiArgs(eval, run)...)
			for _, c := range run {
				c.cmd = cmd
			}
			mcmds = append(mcmds, cmd)
		}
		return nil
	})
	for i, cmd := range mcmds {
		splitMulti(cmd, multi[i*multiMax:min(len(multi), (i+1)*multiMax)])
	}
}

// replyErr is the error of c's script run, or of its share of a multi
// script run.
func (c *call) replyErr() error {
	if c.multi {
		return c.multiErr
	}
	return c.cmd.Err()
}

// notRunYet reports a reply that a slot in migration gives instead of
// running the script: TRYAGAIN, or a redirect go-redis stopped following.
func notRunYet(err error) bool {
	return err != nil && (goredis.IsTryAgainError(err) || isRedirect(err))
}

// resend sends again, with EVAL, the calls whose script run failed with
// an error that match picks.
func (s *Store) resend(ctx context.Context, calls []*call, match func(error) bool) {
	var again []*call
	for _, c := range calls {
		if match(c.replyErr()) {
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
		if match(c.replyErr()) {
			return true
		}
	}
	return false
}

// prepare fills c's script KEYS and ARGV (see scripts/exact.lua): limit,
// period_us, burst, cost, now_us; with an idempotency key, the records'
// hash and index, the record's TTL in ms, its most replays, the counter's
// most records and the record's name; then with a calendar, its windows;
// the reserve; with a penalty, its key and settings; whether a denied cost
// counts. Trailing arguments a
// request does not need are left out, and those before one it needs are
// zeros (an empty name).
func (s *Store) prepare(c *call) {
	r := &c.req
	var now int64
	if s.opts.PinnedClock != nil {
		now = s.opts.PinnedClock().UnixMicro()
	}
	c.keys[0], c.nkeys = s.CounterKey(r.Key, r.Limit.Algorithm), 1
	c.argv = [len(c.argv)]int64{}
	c.argv[argLimit-1], c.argv[argPeriod-1], c.argv[argBurst-1], c.argv[argCost-1], c.argv[argNow-1] = r.Limit.Limit, r.Limit.PeriodMicros(), r.Limit.Burst, r.Cost, now
	c.nargv = preludeArgs
	c.record = ""
	if r.HasIdempotency() {
		c.keys[1], c.keys[2], c.nkeys = s.RecordsKey(r.Key), s.RecordIndexKey(r.Key), 3
		c.argv[exactRecordTTL-1] = max(1, r.EffectiveIdempotencyTTL().Milliseconds())
		c.argv[exactMaxReplays-1], c.argv[exactMaxRecords-1] = r.EffectiveIdempotencyMaxReplays(), r.EffectiveIdempotencyMaxRecords()
		c.nargv, c.record = exactMaxRecords, r.Idempotency.String()
	}
	const ext = exactRecord + 1 // ARGV of c.ext[0]
	c.next = 0
	if cal := r.Limit.Calendar; !cal.IsZero() {
		c.ext[exactCalStart-ext], c.ext[exactCalEnd-ext], c.ext[exactCalNext-ext] = calendarWindows(cal, now)
		c.next = exactHeadroom - exactRecord
	}
	if r.Limit.Headroom > 0 {
		c.ext[exactHeadroom-ext], c.next = r.Limit.Headroom, exactHeadroom-exactRecord
	}
	if p := r.Limit.Penalty; !p.IsZero() {
		c.keys[c.nkeys], c.nkeys = s.PenaltyKey(r.Key), c.nkeys+1
		c.ext[exactPenaltyDuration-ext], c.ext[exactPenaltyAfter-ext], c.ext[exactPenaltyWithin-ext] = p.Duration.Microseconds(), max(1, p.After), max(1, p.Within.Microseconds())
		c.next = exactPenaltyWithin - exactRecord
	}
	if r.Limit.CountDenied {
		c.ext[exactCountDenied-ext], c.next = 1, exactCountDenied-exactRecord
	}
	if c.next > 0 {
		c.nargv = exactRecord - 1 // and the record's name, empty without one
	}
}

// calendarWindows are a calendar FixedWindow's script arguments: the
// window that holds the limiter's time now (Unix µs; 0 for the wall
// clock) and the end of the next, in µs. The script picks one of the two
// by Redis time (fixed_window_core.lua).
func calendarWindows(cal algo.Calendar, now int64) (start, end, next int64) {
	t := time.UnixMicro(now)
	if now == 0 {
		t = time.Now()
	}
	s, e := cal.Window(t)
	_, n := cal.Window(e)
	return s.UnixMicro(), e.UnixMicro(), n.UnixMicro()
}

// takeArgs are the arguments of one Take's script call.
func takeArgs(eval bool, c *call) []any {
	args := scripts[c.req.Limit.Algorithm].callInto(c.args[:0], eval, c.nkeys)
	for i := range c.nkeys {
		args = append(args, &c.keys[i])
	}
	return appendArgs(args, c)
}

// appendArgs appends c's script ARGV to args.
func appendArgs(args []any, c *call) []any {
	name := c.record != "" || c.next > 0
	for i := range c.nargv {
		args = append(args, &c.argv[i])
	}
	if name {
		args = append(args, &c.record)
	}
	for i := range c.next {
		args = append(args, &c.ext[i])
	}
	return args
}

// parseResult reads an exact script's reply {allowed, remaining, reset_us,
// retry_us[, replayed[, penalized]]}.
func parseResult(cmd *goredis.Cmd) (algo.Result, error) {
	var buf [6]int64
	v, err := int64s(buf[:0], cmd)
	if err != nil {
		return algo.Result{}, fmt.Errorf("redis store: %w", err)
	}
	if len(v) < 4 || len(v) > 6 {
		return algo.Result{}, fmt.Errorf("redis store: script returned %d values, want 4 to 6", len(v))
	}
	r := algo.Result{
		Allowed:    v[0] == 1,
		Remaining:  v[1],
		ResetAfter: time.Duration(v[2]) * time.Microsecond,
		RetryAfter: time.Duration(v[3]) * time.Microsecond,
		Replayed:   len(v) >= 5 && v[4] == 1,
		Penalized:  len(v) == 6 && v[5] == 1,
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
