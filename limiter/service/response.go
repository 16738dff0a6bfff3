package service

import (
	"math/rand/v2"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/limiter/algo"
)

// descriptorStatus maps one decision to its RLS status. An unmatched
// descriptor is OK with no limit.
func descriptorStatus(d Decision) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	if d.OverLimit {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if d.Policy == nil {
		return st
	}
	unit, mult := periodUnit(d.Policy.Limit.Period)
	st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{
		Name:            d.Policy.ID(),
		RequestsPerUnit: uint32(d.Policy.Limit.Limit),
		Unit:            unit,
	}
	if mult != 1 {
		st.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	st.LimitRemaining = uint32(min(d.Result.Remaining, int64(^uint32(0))))
	st.DurationUntilReset = durationpb.New(d.Result.ResetAfter)
	return st
}

// periodUnit expresses a period as the largest RLS unit that divides it,
// with a multiplier: 1m is MINUTE×1, 90s is SECOND×90, 24h is DAY×1.
func periodUnit(p time.Duration) (rlsv3.RateLimitResponse_RateLimit_Unit, uint32) {
	for _, u := range []struct {
		d    time.Duration
		unit rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
		{time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
		{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	} {
		if p%u.d == 0 {
			return u.unit, uint32(p / u.d)
		}
	}
	return rlsv3.RateLimitResponse_RateLimit_SECOND, uint32(max(1, p/time.Second))
}

// Header names set on every decided response.
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

// headers describes the reported decision for the client:
// draft-ietf-httpapi-ratelimit-headers (RateLimit-Policy: "name";q=100;w=60
// and RateLimit: "name";r=42;t=17), the X-RateLimit-* trio, and Retry-After
// with jitter when over limit. Durations are whole seconds, rounded up.
func (s *Service) headers(d Decision, replayed bool) []*corev3.HeaderValue {
	p, r := d.Policy, d.Result
	name := strconv.Quote(p.ID())
	// A bucket whose burst exceeds its rate can hold more than rate.limit:
	// report the larger, so remaining never exceeds the limit shown.
	quota := max(p.Limit.Limit, p.Limit.Capacity())
	limit := strconv.FormatInt(quota, 10)
	remaining := strconv.FormatInt(min(r.Remaining, quota), 10)
	reset := strconv.FormatInt(ceilSeconds(r.ResetAfter), 10)
	h := []*corev3.HeaderValue{
		{Key: HeaderRateLimitPolicy, Value: name + ";q=" + limit + ";w=" + strconv.FormatInt(ceilSeconds(p.Limit.Period), 10)},
		{Key: HeaderRateLimit, Value: name + ";r=" + remaining + ";t=" + reset},
		{Key: HeaderLimit, Value: limit},
		{Key: HeaderRemaining, Value: remaining},
		{Key: HeaderReset, Value: reset},
	}
	if d.OverLimit && r.RetryAfter != algo.Never {
		h = append(h, &corev3.HeaderValue{Key: HeaderRetryAfter, Value: strconv.FormatInt(s.retryAfter(r.RetryAfter), 10)})
	}
	if d.OverLimit && d.Reason != "" {
		h = append(h, &corev3.HeaderValue{Key: HeaderReason, Value: d.Reason})
	}
	if replayed {
		h = append(h, &corev3.HeaderValue{Key: HeaderReplayed, Value: "true"})
	}
	return h
}

// retryAfter rounds up to whole seconds (at least 1) and adds jitter of up
// to RetryAfterJitter of it.
func (s *Service) retryAfter(d time.Duration) int64 {
	secs := max(1, ceilSeconds(d))
	if s.opts.RetryAfterJitter > 0 {
		secs += rand.Int64N(1 + int64(float64(secs)*s.opts.RetryAfterJitter))
	}
	return secs
}

func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
