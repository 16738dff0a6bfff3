package service

import (
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/compiled"
)

// Request is one rate-limit request, whatever protocol carried it: Envoy
// RLS, the HTTP check, forward-auth.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	// HitsAddend is the cost of each descriptor that sets none of its own;
	// 0 means 1, as in Envoy.
	HitsAddend uint64
	// IdempotencyKey, when not empty (the HTTP Idempotency-Key header),
	// applies to every descriptor that does not carry its own idempotency
	// entry (Options.IdempotencyEntry).
	IdempotencyKey string
	// NoEnd says the protocol has no call at the request's end
	// (forward-auth): policies that hold are peeked at, never taken, so
	// that no slot waits for an end that never comes.
	NoEnd bool
}

// Descriptor is one thing a request asks to spend: the entries that
// policies match, and what it costs.
type Descriptor struct {
	Entries []compiled.Entry
	// HitsAddend is this descriptor's own cost when HasHitsAddend is set;
	// 0 peeks without consuming. Otherwise the request's applies.
	HitsAddend    uint64
	HasHitsAddend bool
	// NegativeHits asks to give units back, and LimitOverride to be decided
	// against a limit of the caller's, Override: the service refuses
	// negative hits, and decides overrides as override.go says.
	NegativeHits, LimitOverride bool
	Override                    compiled.UnitRate
}

// Response is the service's answer to a Request.
type Response struct {
	// Decisions are those of the request's descriptors, in order.
	Decisions []Decision
	// OverLimit is true when any descriptor is over limit.
	OverLimit bool
	// Reported is the decision a client is told about (in rate-limit
	// headers): the most restrictive visible policy of all Decisions, and
	// the longest wait of their denials. Its Policy is nil when no
	// enforcing visible policy matched.
	Reported Decision
	// Replayed is true when an idempotency key replayed an earlier decision
	// of any descriptor.
	Replayed bool
	// Violated are the enforcing policies that denied, each once, in the
	// order of the descriptors and then of the snapshot: the
	// "violated-policies" of a problem details answer.
	Violated []*compiled.Policy
	// SoftLimited are the soft policies over their threshold, each once,
	// in the same order: the request is marked with them.
	SoftLimited []*compiled.Policy
	// Lease is the ID of what the request holds (Concurrency slots,
	// reservations; see lifetime.go), to end them with when it ends; empty
	// when it holds nothing, as when it is over limit.
	Lease string
	// Endings are what the request's descriptors that carry a lease entry
	// ended, one per holding policy each matched.
	Endings []Ending
	// FailureMode is the strictest failureMode of the enforcing visible
	// policies the request matched (Closed, then Local, then Open), empty
	// when none did (a hidden policy's is never told): what a client that can't reach the limiter should do for such
	// a request (see limiter/client).
	FailureMode compiled.FailureMode
}

// stricter reports whether failure mode a is stricter than b: Closed
// denies, Local enforces a share, Open allows; "" is none.
func stricter(a, b compiled.FailureMode) bool {
	rank := func(m compiled.FailureMode) int {
		switch m {
		case compiled.FailClosed:
			return 3
		case compiled.FailLocal:
			return 2
		case compiled.FailOpen:
			return 1
		}
		return 0
	}
	return rank(a) > rank(b)
}

// Decision is the outcome of one request descriptor.
type Decision struct {
	// Policy is the policy reported to the client: the most restrictive of
	// the enforcing (non-shadow) visible policies that matched, or nil
	// when none did. A hidden policy is never reported.
	Policy *compiled.Policy
	// Result is that policy's decision.
	Result algo.Result
	// OverLimit is true when an enforcing (non-shadow) policy denied,
	// visible or hidden.
	OverLimit bool
	// RetryAfter is, when OverLimit, how long the client must wait: the
	// longest wait of the denying policies (a hidden one's is until its
	// counter is back to its full quota), or algo.Never.
	RetryAfter time.Duration
	// Denied is the denying policy that set RetryAfter, visible or hidden;
	// nil unless OverLimit.
	Denied *compiled.Policy
	// Penalized is true when Denied's denial is a penalized key's
	// (spec.penalty): Denied.Penalty says how to answer it.
	Penalized bool
	// Refused is true when the request (or this descriptor) was not
	// counted because of what the client sent, and is denied for it
	// (refuse.go): Reason says what and names the cap; RetryAfter is
	// algo.Never (a retry of the same request is refused again); Denied is
	// the policy whose maxCost was passed, if that was it. It is never a
	// penalty's strike.
	Refused bool
	// SoftLimited is true when a soft policy is over its threshold: the
	// request is allowed (unless an enforcing policy denies) and marked.
	SoftLimited bool
	// Reason explains a decision that did not come from the store: the
	// store could not answer, and the policy's failure mode decided. It is
	// that of the denial that set RetryAfter when OverLimit, else that of
	// Policy's decision.
	Reason string
	// FailureMode is the strictest failureMode of the enforcing visible
	// policies that matched.
	FailureMode compiled.FailureMode
}
