// Package algo defines Sluice's rate-limiting algorithms as pure functions of
// stored state, cost and the current time.
//
// The same semantics run in two places: here in Go, for the embedded memory
// store, and as one Lua core per algorithm for Redis
// (limiter/store/redis/scripts/*_core.lua), shared by the exact and the
// granting scripts. Go is the reference: the conformance table and the
// randomized differential test in internal/storetest hold the Lua to
// it. All arithmetic is done on microseconds; fractional quantities use
// float64 with the same operation order as the Lua cores, so both give
// bit-identical results.
package algo

import (
	"fmt"
	"math"
	"time"
)

// Algorithm names one rate-limiting algorithm. The Redis scripts name
// algorithms by String and get these values in their place, so the order
// of the constants is free.
type Algorithm uint8

const (
	// TokenBucket holds up to Burst tokens and refills Limit tokens per Period,
	// continuously. A request spends cost tokens. The bucket is stored as the
	// virtual time it was empty, so a key is one integer in Redis.
	TokenBucket Algorithm = iota + 1
	// GCRA is the generic cell rate algorithm: one theoretical arrival time per
	// key, emission interval Period/Limit, and a tolerance of Burst requests.
	// It admits the same traffic as a TokenBucket of capacity Burst (it is the
	// bucket's virtual-scheduling form); it is offered under its own name
	// because that is how Stripe, redis_rate and many users know it.
	GCRA
	// SlidingWindow is the weighted two-window counter: the previous fixed
	// window's count, weighted by how much of it still overlaps the sliding
	// window, plus the current window's count.
	SlidingWindow
	// FixedWindow counts requests in windows of Period aligned to the Unix
	// epoch, or in calendar windows (Limit.Calendar).
	FixedWindow
	// SlidingLog keeps one timestamp per admitted unit and counts those newer
	// than Period. It is exact and costs memory proportional to Limit.
	SlidingLog
	// Concurrency counts requests in flight, not a rate: at most Limit
	// leases live at once, each taken by Acquire and given back by Release,
	// or freed by itself Period after it was taken (a crashed client must
	// not hold a slot for ever). Each lease is one request, whatever its
	// cost.
	Concurrency
)

var names = [...]string{
	TokenBucket:   "TokenBucket",
	GCRA:          "GCRA",
	SlidingWindow: "SlidingWindow",
	FixedWindow:   "FixedWindow",
	SlidingLog:    "SlidingLog",
	Concurrency:   "Concurrency",
}

// All lists every rate algorithm, in declaration order: those that spend
// units per period. Concurrency, which holds slots instead, is apart.
var All = []Algorithm{TokenBucket, GCRA, SlidingWindow, FixedWindow, SlidingLog}

func (a Algorithm) String() string {
	if a >= TokenBucket && a <= Concurrency {
		return names[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// Parse returns the algorithm with the given API name.
func Parse(name string) (Algorithm, error) {
	for a := TokenBucket; a <= Concurrency; a++ {
		if names[a] == name {
			return a, nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q", name)
}

// UsesBurst reports whether the algorithm has a capacity separate from its
// rate (TokenBucket and GCRA).
func (a Algorithm) UsesBurst() bool { return a == TokenBucket || a == GCRA }

// Reserves reports whether a cost may be reserved and settled later
// (Limit.Settle): every rate algorithm but SlidingLog, whose log of
// admitted units can't be charged after the fact at the time they were
// admitted.
func (a Algorithm) Reserves() bool { return a >= TokenBucket && a <= FixedWindow }

// Limit is one compiled rate limit: Limit units per Period, with a capacity
// of Burst for the bucket algorithms. For Concurrency, Limit is the most
// leases live at once and Period the lease duration.
type Limit struct {
	Algorithm Algorithm
	Limit     int64
	Period    time.Duration
	// Burst is the bucket capacity for TokenBucket and GCRA. Window
	// algorithms ignore it.
	Burst int64
	// Calendar, when set, makes FixedWindow's windows calendar periods
	// (see Calendar) instead of Period, which is then 0.
	Calendar Calendar
	// Headroom is how many units of capacity a decision must leave for
	// others (priority shedding): cost is admitted only when Headroom units
	// would remain after it, Remaining does not count them, and RetryAfter
	// waits until cost and Headroom fit (Never when they exceed the
	// capacity). It is a property of the request, not of the counter:
	// requests of different priorities share one counter with different
	// headrooms. 0 to Capacity. Concurrency leaves Headroom slots free; a
	// settlement (Settle) is no decision, and its forced charge ignores it.
	Headroom int64
	// Penalty, when set, denies a key for a while once it was denied
	// enough times (see Penalty).
	Penalty Penalty
	// CountDenied makes a FixedWindow count a denied cost too, as
	// envoyproxy/ratelimit counts (INCRBY whatever the answer): a window's
	// count may pass Limit, and a denial spends what it asked. Only ERL
	// configuration sets it (limiter/config/erl.go); other algorithms
	// ignore it.
	CountDenied bool
}

// Grantable reports whether two-tier mode may grant units of the limit
// (limiter/store/localtier): not from SlidingLog, which stays exact, nor
// from Concurrency, which holds slots, nor from a calendar window, with a
// headroom, with a penalty, or counting denials (ERL's limits are exact);
// the API refuses localTier with any of them.
func (l Limit) Grantable() bool {
	return l.Algorithm != SlidingLog && l.Algorithm != Concurrency && l.Calendar.IsZero() && l.Headroom == 0 && l.Penalty.IsZero() && !l.CountDenied
}

// Span is the length of the window that holds now: Period, or for a
// calendar FixedWindow the calendar window's (a day of 23, 24 or 25
// hours, a month of 28 to 31 days).
func (l Limit) Span(now time.Time) time.Duration {
	if l.Calendar.IsZero() {
		return l.Period
	}
	start, end := l.Calendar.Window(now)
	return end.Sub(start)
}

// PeriodMicros is the period in microseconds.
func (l Limit) PeriodMicros() int64 { return l.Period.Microseconds() }

// Capacity is the most units one key can admit at once.
func (l Limit) Capacity() int64 {
	if l.Algorithm.UsesBurst() {
		return l.Burst
	}
	return l.Limit
}

// Never is the RetryAfter of a request that can never be admitted, because
// its cost exceeds the limit's capacity.
const Never = time.Duration(-1)

// Result is the outcome of one decision.
type Result struct {
	// Allowed reports whether the cost was admitted (and consumed).
	Allowed bool
	// Remaining is how many units could still be admitted now, after this
	// decision.
	Remaining int64
	// ResetAfter is how long until the key is back to its full quota (for
	// FixedWindow: until the current window ends).
	ResetAfter time.Duration
	// RetryAfter is how long a denied request must wait before the same cost
	// could be admitted, or Never. It is zero when Allowed.
	RetryAfter time.Duration
	// Replayed reports that this is the recorded first decision of a request
	// retried with the same idempotency key: nothing was consumed, and
	// ResetAfter counts down from the first decision.
	Replayed bool
	// Penalized reports a denial because the key is penalized (see
	// Penalty), or was just penalized by this denial: ResetAfter and
	// RetryAfter are the time left of the penalty, Remaining 0.
	Penalized bool
}

// eps absorbs floating-point noise when token counts are compared or
// floored, so that 2.9999999999999996 tokens count as 3. The Lua cores use
// the same value.
const eps = 1e-9

// floorTokens floors a non-negative fractional token count.
func floorTokens(x float64) int64 {
	if x <= 0 {
		return 0
	}
	return int64(math.Floor(x + eps))
}

// ceilMicros rounds a duration in fractional microseconds up to a whole
// microsecond duration.
func ceilMicros(us float64) time.Duration {
	if us <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(us)) * time.Microsecond
}

// micros converts a time to Unix microseconds, the unit of every stored
// timestamp (Redis TIME has the same resolution).
func micros(t time.Time) int64 { return t.UnixMicro() }
