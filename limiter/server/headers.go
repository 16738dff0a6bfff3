package server

import (
	"math/rand/v2"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/service"
)

// Header names set on every decided answer, over RLS (response headers for
// Envoy to add) and HTTP alike.
const (
	HeaderRateLimit       = "RateLimit"
	HeaderRateLimitPolicy = "RateLimit-Policy"
	HeaderLimit           = "X-RateLimit-Limit"
	HeaderRemaining       = "X-RateLimit-Remaining"
	HeaderReset           = "X-RateLimit-Reset"
	HeaderRetryAfter      = "Retry-After"
	HeaderReason          = "X-Sluice-Reason"
	// HeaderReplayed is "true" on the answer to a retried request whose
	// idempotency key replayed an earlier decision (as Stripe names it).
	HeaderReplayed = "Idempotent-Replayed"
)

// defaultJitter is Options.RetryAfterJitter's default.
const defaultJitter = 0.1

// headers describe the reported decision for the client:
// draft-ietf-httpapi-ratelimit-headers (RateLimit-Policy: "name";q=100;w=60
// and RateLimit: "name";r=42;t=17), the X-RateLimit-* trio, and Retry-After
// with up to jitter of it added when over limit. Durations are whole
// seconds, rounded up. None without a reported policy.
func headers(resp *service.Response, jitter float64) []*corev3.HeaderValue {
	d := &resp.Reported
	if d.Policy == nil {
		return nil
	}
	p, r := d.Policy, d.Result
	name := strconv.Quote(p.ID())
	// A bucket whose burst exceeds its rate can hold more than rate.limit:
	// report the larger, so remaining never exceeds the limit shown.
	quota := max(p.Limit.Limit, p.Limit.Capacity())
	limit := strconv.FormatInt(quota, 10)
	remaining := strconv.FormatInt(min(r.Remaining, quota), 10)
	reset := strconv.FormatInt(ceilSeconds(r.ResetAfter), 10)
	values := [8]struct{ k, v string }{
		{HeaderRateLimitPolicy, name + ";q=" + limit + ";w=" + strconv.FormatInt(ceilSeconds(span(p.Limit)), 10)},
		{HeaderRateLimit, name + ";r=" + remaining + ";t=" + reset},
		{HeaderLimit, limit},
		{HeaderRemaining, remaining},
		{HeaderReset, reset},
	}
	n := 5
	if d.OverLimit && r.RetryAfter != algo.Never {
		values[n].k, values[n].v = HeaderRetryAfter, strconv.FormatInt(retryAfter(r.RetryAfter, jitter), 10)
		n++
	}
	if reason := reasonOf(d); d.OverLimit && reason != "" {
		values[n].k, values[n].v = HeaderReason, reason
		n++
	}
	if resp.Replayed {
		values[n].k, values[n].v = HeaderReplayed, "true"
		n++
	}
	// One allocation for the headers, one for the pointers: this runs for
	// every decided request.
	hs := make([]corev3.HeaderValue, n)
	out := make([]*corev3.HeaderValue, n)
	for i := range out {
		hs[i].Key, hs[i].Value = values[i].k, values[i].v
		out[i] = &hs[i]
	}
	return out
}

// retryAfter rounds up to whole seconds (at least 1) and adds jitter of up
// to the fraction jitter of it, so that denied clients don't come back in
// lockstep.
func retryAfter(d time.Duration, jitter float64) int64 {
	secs := max(1, ceilSeconds(d))
	if jitter > 0 {
		secs += rand.Int64N(1 + int64(float64(secs)*jitter))
	}
	return secs
}

func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// span is the length of the limit's window now: its period, or a calendar
// window's (a day of 23 to 25 hours, a month of 28 to 31 days).
func span(l algo.Limit) time.Duration {
	if l.Calendar.IsZero() {
		return l.Period
	}
	return l.Span(time.Now())
}

// reasonOf is what X-Sluice-Reason says of a decision: the failure mode's
// reason, or a penalized key's (spec.penalty).
func reasonOf(d *service.Decision) string {
	if d.Reason == "" && d.Result.Penalized && d.Policy != nil && d.Policy.Penalty != nil {
		return d.Policy.Penalty.Reason
	}
	return d.Reason
}

// penaltyStatus is the HTTP status of a denial whose reported decision is
// a penalized key's (spec.penalty.status), or 0.
func penaltyStatus(resp *service.Response) int {
	if d := &resp.Reported; d.OverLimit && d.Result.Penalized && d.Policy != nil && d.Policy.Penalty != nil {
		return d.Policy.Penalty.Status
	}
	return 0
}
