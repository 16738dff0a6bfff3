package server

import (
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-dev/sluice/limiter/service"
)

// erlStatus fills st, the status of a descriptor an ERL limit decided, as
// envoyproxy/ratelimit answers it: current_limit with ERL's name, limit
// and unit; limit_remaining; duration_until_reset in whole seconds, the
// time left of the epoch-aligned window rounded up (ERL computes it from
// its clock's seconds: unit - now%unit); none for an unlimited limit (no
// current_limit, limit_remaining the largest uint32), nor for a quota
// mode limit over its quota (answered OK).
func erlStatus(st *rlsv3.RateLimitResponse_DescriptorStatus, d *service.Decision) {
	e := d.Policy.ERL
	st.LimitRemaining = uint32(min(d.Result.Remaining, int64(^uint32(0))))
	if e.Unlimited {
		return
	}
	st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: e.Name, RequestsPerUnit: e.RequestsPerUnit,
		Unit: rlsv3.RateLimitResponse_RateLimit_Unit(e.Unit)}
	if e.QuotaMode && !d.Result.Allowed {
		return
	}
	secs := int64((d.Result.ResetAfter + time.Second - 1) / time.Second)
	st.DurationUntilReset = &durationpb.Duration{Seconds: secs}
}
