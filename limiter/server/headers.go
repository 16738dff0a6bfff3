package server

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/compiled"
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
	// HeaderSoftLimit marks a request over soft limits: a list of their
	// names as quoted strings ("ns/a", "ns/b"), as RateLimit-Policy names
	// them. Over RLS it is on the request Envoy forwards upstream too.
	HeaderSoftLimit = "X-Sluice-Soft-Limit"
)

// defaultJitter is Options.RetryAfterJitter's default.
const defaultJitter = 0.1

// headers describe the reported decision for the client:
// draft-ietf-httpapi-ratelimit-headers (RateLimit-Policy: "name";q=100;w=60
// and RateLimit: "name";r=42;t=17) and the X-RateLimit-* trio, of the
// most restrictive visible policy; and when over limit, Retry-After (the
// longest wait of the denials, hidden ones too) with up to jitter of it
// added; and the soft limits the request is over. Durations are whole
// seconds, rounded up. None when nothing is to be said.
func headers(resp *service.Response, jitter float64) []*corev3.HeaderValue {
	return headersIn(resp, jitter, nil)
}

// headerRoom is room for the headers of most answers (a decided request's
// five), kept in an RLS answer (see rlsAnswer) so that they cost no
// allocation of their own.
type headerRoom struct {
	values [5]corev3.HeaderValue
	ptrs   [5]*corev3.HeaderValue
}

// headersIn is headers, in room when they fit (nil: none).
func headersIn(resp *service.Response, jitter float64, room *headerRoom) []*corev3.HeaderValue {
	d := &resp.Reported
	var values [9]struct{ k, v string }
	n := 0
	if p := d.Policy; p != nil {
		policyHeaders(&values, p, d.Result)
		n = 5
	}
	if d.OverLimit && d.RetryAfter != algo.Never {
		values[n].k, values[n].v = HeaderRetryAfter, strconv.FormatInt(retryAfter(d.RetryAfter, jitter), 10)
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
	if len(resp.SoftLimited) > 0 {
		values[n].k, values[n].v = HeaderSoftLimit, softLimitValue(resp)
		n++
	}
	if n == 0 {
		return nil
	}
	// In room, or one allocation for the headers and one for the
	// pointers: this runs for every decided request. The pointers' cap is
	// n, so that one appended later (addProblem) goes elsewhere.
	var hs []corev3.HeaderValue
	var out []*corev3.HeaderValue
	if room != nil && n <= len(room.values) {
		hs, out = room.values[:n], room.ptrs[:n:n]
	} else {
		hs, out = make([]corev3.HeaderValue, n), make([]*corev3.HeaderValue, n)
	}
	for i := range out {
		hs[i].Key, hs[i].Value = values[i].k, values[i].v
		out[i] = &hs[i]
	}
	return out
}

// policyHeaders fills values[0:5] with p's rate-limit headers for its
// result r: all five values are cut from one string, one allocation for
// what every decided request tells.
func policyHeaders(values *[9]struct{ k, v string }, p *compiled.Policy, r algo.Result) {
	// A bucket whose burst exceeds its rate can hold more than rate.limit:
	// report the larger, so remaining never exceeds the limit shown.
	quota := max(p.Limit.Limit, p.Limit.Capacity())
	var buf [256]byte
	b := strconv.AppendInt(buf[:0], quota, 10)
	limitEnd := len(b)
	b = strconv.AppendInt(b, min(r.Remaining, quota), 10)
	remainingEnd := len(b)
	b = strconv.AppendInt(b, ceilSeconds(r.ResetAfter), 10)
	resetEnd := len(b)
	// RateLimit-Policy, then RateLimit.
	b = strconv.AppendQuote(b, p.ID())
	nameEnd := len(b)
	b = append(append(b, ";q="...), buf[:limitEnd]...)
	if p.Limit.Algorithm == algo.Concurrency {
		// A quota of requests in flight has no window, and no time when it
		// resets: a slot frees when a request ends. The draft's quota unit
		// says so. X-RateLimit-Reset is when every lease would have
		// expired.
		b = append(b, `;qu="concurrent-requests"`...)
	} else {
		b = strconv.AppendInt(append(b, ";w="...), ceilSeconds(span(p.Limit)), 10)
	}
	policyEnd := len(b)
	b = append(b, b[resetEnd:nameEnd]...)
	b = append(append(b, ";r="...), b[limitEnd:remainingEnd]...)
	if p.Limit.Algorithm != algo.Concurrency {
		b = append(append(b, ";t="...), b[remainingEnd:resetEnd]...)
	}
	all := string(b)
	values[0].k, values[0].v = HeaderRateLimitPolicy, all[resetEnd:policyEnd]
	values[1].k, values[1].v = HeaderRateLimit, all[policyEnd:]
	values[2].k, values[2].v = HeaderLimit, all[:limitEnd]
	values[3].k, values[3].v = HeaderRemaining, all[limitEnd:remainingEnd]
	values[4].k, values[4].v = HeaderReset, all[remainingEnd:resetEnd]
}

// softLimitValue is HeaderSoftLimit's value for resp: the names of the
// soft policies over their threshold, as a list of quoted strings.
func softLimitValue(resp *service.Response) string {
	var b strings.Builder
	for i, p := range resp.SoftLimited {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(p.ID()))
	}
	return b.String()
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

// reasonOf is what X-Sluice-Reason says of a denial: the failure mode's
// reason, or a penalized key's (spec.penalty.reason of the denying policy,
// hidden or not: a hidden one's default names no policy).
func reasonOf(d *service.Decision) string {
	if d.Reason == "" && d.OverLimit && d.Penalized && d.Denied != nil && d.Denied.Penalty != nil {
		return d.Denied.Penalty.Reason
	}
	return d.Reason
}

// penaltyStatus is the HTTP status of a denial whose longest wait is a
// penalized key's (spec.penalty.status of the denying policy), or 0.
func penaltyStatus(resp *service.Response) int {
	if d := &resp.Reported; d.OverLimit && d.Penalized && d.Denied != nil && d.Denied.Penalty != nil {
		return d.Denied.Penalty.Status
	}
	return 0
}
