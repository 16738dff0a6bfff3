package algo

import (
	"math"
	"time"
)

// State is one key's stored state in the memory store. Which fields are used
// depends on the algorithm; the zero State with present=false is a fresh key.
type State struct {
	// F is TokenBucket's empty time or GCRA's theoretical arrival time, in
	// eighths of a µs since 2020.
	F float64
	// T is the window index of the window algorithms (a calendar window's
	// start, µs).
	T int64
	// N is the count of window T (FixedWindow, SlidingWindow).
	N int64
	// Prev is SlidingWindow's count of window T-1.
	Prev int64
	// Log holds SlidingLog's admitted requests from Log[LogHead] on, one
	// entry per request whatever its cost, ascending by time (requests of
	// one time in the order they were admitted); the entries before
	// LogHead left the window and wait to be reused, so that the array a
	// store holds is all of Log (cap(Log) entries, at most about four
	// times the live ones). LogBase is the running total of units logged
	// before Log[LogHead] (see LogEntry).
	Log     []LogEntry
	LogHead int
	LogBase int64
	// Leases are Concurrency's live leases, in the order they were taken.
	Leases []Lease
}

// LogEntry is one request a SlidingLog admitted: its time (µs) and Total,
// the running total of units logged up to and including it, in the log's
// order. A request's cost is its Total less the one before it (LogBase for
// the first); the units in the window are the last Total less LogBase.
// Keeping totals rather than costs makes every question a decision asks
// (how many units are logged, when enough of them leave) a binary search:
// the work per decision does not grow with cost, and a log holds at most
// Limit entries however many units they carry.
type LogEntry struct{ At, Total int64 }

// Take decides whether cost units may pass at now, given a key's state.
// present is false for a key with no state (never seen, or expired).
//
// When the decision changes the state, Take updates s in place and returns
// write=true with the TTL after which the key would be back to a fresh state;
// a TTL of zero means the state is fresh already and may be deleted. Denials
// and cost 0 consume nothing (SlidingLog may still prune expired entries). Take does not read the wall clock; it is safe to call
// concurrently on distinct states.
//
// Concurrency counts leases, not units: Take only peeks at it (any cost
// peeks); Acquire and Release take and give back a slot.
func (l Limit) Take(s *State, present bool, now time.Time, cost int64) (r Result, write bool, ttl time.Duration) {
	if l.Algorithm == Concurrency {
		r, _, write, ttl = l.concurrency(s, present, micros(now), LeaseID{}, opPeek)
		return r, write, ttl
	}
	return l.take(s, present, micros(now), cost, adjust{})
}

// adjust is what a settlement changes beside the cost: units credited back
// (a refund, to the window they were taken in), and whether the cost is
// charged whatever the limit says (units that were spent already). The
// Lua cores read the same as credit, credit_window and force.
type adjust struct {
	credit, creditWindow int64
	force                bool
}

// take is Take, after adj.
func (l Limit) take(s *State, present bool, n, cost int64, adj adjust) (Result, bool, time.Duration) {
	switch l.Algorithm {
	case TokenBucket:
		return l.tokenBucket(s, present, n, cost, adj)
	case GCRA:
		return l.gcra(s, present, n, cost, adj)
	case FixedWindow:
		return l.fixedWindow(s, present, n, cost, adj)
	case SlidingWindow:
		return l.slidingWindow(s, present, n, cost, adj)
	case SlidingLog:
		if adj != (adjust{}) {
			panic("algo: SlidingLog takes no reservation")
		}
		return l.slidingLog(s, present, n, cost)
	}
	panic("algo: Take on " + l.Algorithm.String())
}

// Window is the index of the window that holds now: what a reservation
// records, so that its refund goes to the window it was taken in (window
// algorithms; the buckets ignore it).
func (l Limit) Window(now time.Time) int64 {
	w, _, _ := l.fixedWindowAt(micros(now)) // a calendar window's start
	return w
}

// Settle ends a reservation of held units, taken in window heldWindow (see
// Window), at its actual cost: units reserved and not spent are credited
// back (to a window that has passed, they are dropped: that window no
// longer counts), and units spent beyond the reservation are charged even
// past the limit, because they were spent already; the key then owes them,
// and admits nothing until they are paid back. An actual equal to held
// changes nothing. Settle on SlidingLog or Concurrency panics: neither
// reserves.
//
// The Result describes the key after settling (Allowed is not a decision:
// it is false when the key is in debt).
func (l Limit) Settle(s *State, present bool, now time.Time, held, heldWindow, actual int64) (Result, bool, time.Duration) {
	if !l.Algorithm.Reserves() {
		panic("algo: Settle on " + l.Algorithm.String())
	}
	n := micros(now)
	switch {
	case actual < held:
		return l.take(s, present, n, 0, adjust{credit: held - actual, creditWindow: heldWindow})
	case actual > held:
		return l.take(s, present, n, actual-held, adjust{force: true})
	}
	return l.take(s, present, n, 0, adjust{})
}

// tokenBucket is mirrored by token_bucket_core.lua. The bucket is stored as one number:
// the virtual time z at which it was (or would have been) empty, so that
// tokens(now) = min(burst, (now-z)·limit/period). z is kept as an integer
// count of eighths of a microsecond since bucketEpoch: Redis stores such a
// value as a bare integer (a 72-byte key), and float64 holds it exactly
// until 2055.
//
// A bucket charged past empty by a settlement is in debt: z is ahead of
// now, and the bucket admits nothing until it has refilled past zero.
// Credits and forced charges start from that debt; a plain decision sees
// an empty bucket (as after the clock went back).
func (l Limit) tokenBucket(s *State, present bool, n, cost int64, adj adjust) (Result, bool, time.Duration) {
	limit, burst := float64(l.Limit), float64(l.Burst)
	period8 := float64(l.PeriodMicros()) * 8
	now8 := float64(n-bucketEpoch) * 8
	z8 := now8 - burst*period8/limit // a fresh bucket is full
	if present {
		z8 = s.F
	}
	tokens := math.Min(burst, math.Max(0, (now8-z8)*limit/period8))
	// z is rounded to an eighth of a µs on every write; comparisons forgive
	// that half-eighth so a rounded-down bucket still counts whole tokens.
	slack := 0.5 * limit / period8
	changed := adj.credit > 0 || adj.force
	if changed {
		tokens = math.Min(tokens, (now8-z8)*limit/period8) // the debt, if any
	}
	if adj.credit > 0 {
		tokens = math.Min(burst, tokens+float64(adj.credit))
	}
	c := float64(cost)
	need := c + float64(l.Headroom) // what must be in the bucket
	r := Result{Allowed: adj.force || need <= tokens+slack+eps}
	if r.Allowed {
		if adj.force {
			tokens -= c
		} else {
			tokens = math.Max(0, tokens-c)
		}
		changed = changed || cost > 0
	}
	if changed {
		z8 = math.Floor(now8 - tokens*period8/limit + 0.5)
		s.F = z8
	}
	r.Remaining = floorTokens(tokens + slack - float64(l.Headroom))
	// Full at z + burst·period/limit; need tokens at z + need·period/limit.
	r.ResetAfter = ceilMicros((z8 + burst*period8/limit - now8) / 8)
	if !r.Allowed {
		if cost+l.Headroom > l.Burst {
			r.RetryAfter = Never
		} else {
			r.RetryAfter = ceilMicros((z8 + need*period8/limit - now8) / 8)
		}
	}
	return r, changed, r.ResetAfter
}

// bucketEpoch (2020-01-01T00:00:00Z, in µs) is the origin of stored token
// bucket times.
const bucketEpoch = 1577836800_000000

// gcra is mirrored by gcra_core.lua. Timestamps near 1.7e15µs carry only a quarter
// microsecond of precision as float64, so the arithmetic works on offsets
// from now, and sub-microsecond differences count as zero (halfMicro).
func (l Limit) gcra(s *State, present bool, n, cost int64, adj adjust) (Result, bool, time.Duration) {
	const halfMicro = 0.5
	interval := float64(l.PeriodMicros()) / float64(l.Limit)
	tolerance := float64(l.Burst) * interval
	// The TAT is stored like TokenBucket's z: eighths of a µs since
	// bucketEpoch, an integer Redis keeps in 72 bytes.
	now8 := float64(n-bucketEpoch) * 8
	ahead := 0.0 // how far the TAT is ahead of now, µs
	if present && s.F > now8 {
		ahead = (s.F - now8) / 8
	}
	changed := adj.credit > 0
	if changed {
		ahead = math.Max(0, ahead-float64(adj.credit)*interval)
	}
	next := ahead + float64(cost)*interval
	need := next + float64(l.Headroom)*interval // the TAT that must fit
	r := Result{Allowed: adj.force || need-tolerance <= halfMicro}
	if r.Allowed {
		ahead = next
		changed = changed || cost > 0
	}
	if changed {
		s.F = math.Floor(now8 + ahead*8 + 0.5)
	}
	r.Remaining = floorTokens((tolerance-ahead+halfMicro)/interval - float64(l.Headroom))
	r.ResetAfter = ceilMicros(ahead - halfMicro)
	if !r.Allowed {
		if cost+l.Headroom > l.Burst {
			r.RetryAfter = Never
		} else {
			r.RetryAfter = ceilMicros(need - tolerance - halfMicro)
		}
	}
	return r, changed, r.ResetAfter
}
