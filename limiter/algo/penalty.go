package algo

import "time"

// Penalty denies a key for Duration once it has been denied After times
// within Within, whatever it asks for meanwhile (spec.penalty). The zero
// Penalty is none.
//
// It runs beside any algorithm, on a state of its own kept beside the
// key's counter: the memory store keeps it in the counter's shard, the
// Redis store in a key of the counter's hash slot, written by the exact
// script (limiter/store/redis/scripts/exact.lua mirrors Penalized and
// Strike). Like the algorithms, it takes time as an input.
type Penalty struct {
	Duration time.Duration
	// After is how many denials start a penalty; at least 1.
	After int64
	// Within is the window in which denials are counted, from the first.
	Within time.Duration
}

// IsZero reports whether p is no penalty.
func (p Penalty) IsZero() bool { return p.Duration <= 0 }

// PenaltyState is a key's penalty, in Unix microseconds: the key is
// penalized while now < Until; otherwise Strikes denials have been counted
// since Since. A penalty's end starts a count: Since = Until, Strikes = 0.
type PenaltyState struct {
	Until, Since, Strikes int64
}

// Penalized returns the denial of a key penalized at now, and false when
// it is not penalized (present is false for a key with no state).
func (p Penalty) Penalized(s PenaltyState, present bool, now time.Time) (Result, bool) {
	n := micros(now)
	if !present || s.Until <= n {
		return Result{}, false
	}
	left := time.Duration(s.Until-n) * time.Microsecond
	return Result{ResetAfter: left, RetryAfter: left, Penalized: true}, true
}

// Strikes reports whether a decision r of cost under l is a strike: a
// denial that the key's own traffic could have made, and that no request
// could have avoided. It must be a denial of a cost above 0 (peeks strike
// nothing) with nothing left on the counter for even one unit (Remaining
// 0): a cost above what remains is refused for its size, not for the
// key's traffic, and is never a strike, so that no client can strike a key
// it can name with one oversized request. And it must be at the full
// capacity (Headroom 0): a denial by a priority's share (see
// Limit.Headroom) is shedding, never a strike. exact.lua runs the same test.
func (l Limit) Strikes(cost int64, r Result) bool {
	return !r.Allowed && !r.Penalized && cost > 0 && l.Headroom == 0 && r.Remaining == 0
}

// Strike counts a denial r at now (the caller strikes only the denials
// that Limit.Strikes reports): a new count starts unless one started within Within
// before now. The After-th denial of a count penalizes the key from now
// for Duration, and r becomes its denial; the count after the penalty
// starts when it ends. Strike updates s and returns the TTL after which
// the state is fresh again: the end of the count, or of the penalty and
// the count that follows it.
func (p Penalty) Strike(s *PenaltyState, present bool, now time.Time, r *Result) time.Duration {
	n := micros(now)
	within := p.Within.Microseconds()
	if !present || s.Since > n || s.Since+within <= n {
		s.Since, s.Strikes = n, 0
	}
	s.Strikes++
	if s.Strikes >= p.After {
		d := p.Duration.Microseconds()
		s.Until, s.Since, s.Strikes = n+d, n+d, 0
		left := time.Duration(d) * time.Microsecond
		*r = Result{ResetAfter: left, RetryAfter: left, Penalized: true}
		return left + time.Duration(within)*time.Microsecond
	}
	return time.Duration(s.Since+within-n) * time.Microsecond
}
