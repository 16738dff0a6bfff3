package server

import (
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-dev/sluice/limiter/service"
)

// erlStatus fills st, the status of a descriptor an ERL limit decided, as
// envoyproxy/ratelimit answers it: current_limit with ERL's name, limit
// and unit; limit_remaining; duration_until_reset in whole seconds, the
// time left of the epoch-aligned window rounded up (ERL computes it from
// its clock's seconds: unit - now%unit); none for an unlimited limit (no
// current_limit, limit_remaining the largest uint32). A quota mode limit
// over its quota is OVER_LIMIT, with its figures (ERL after #1059; the
// request is over its limit only when every quota is: service.quotaOver).
func erlStatus(st *rlsv3.RateLimitResponse_DescriptorStatus, d *service.Decision) {
	p, e := d.Policy, d.Policy.ERL
	st.LimitRemaining = uint32(min(d.Result.Remaining, int64(^uint32(0))))
	if p.Unlimited {
		return
	}
	rpu := e.RequestsPerUnit
	if e.Override {
		// The request's own limit, which the service decided by.
		rpu = uint32(min(max(p.Limit.Limit, 0), int64(^uint32(0))))
	}
	st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: e.Name, RequestsPerUnit: rpu,
		Unit: rlsv3.RateLimitResponse_RateLimit_Unit(e.Unit)}
	if p.Quota && !p.DryRun && !d.Result.Allowed {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	secs := int64((d.Result.ResetAfter + time.Second - 1) / time.Second)
	st.DurationUntilReset = &durationpb.Duration{Seconds: secs}
}

// erlMetadata is the metadata of the ERL limits that answered their
// descriptors OK (not unlimited), merged in the descriptors' order, as ERL
// (after #1112) returns it under "metadata" in the dynamic metadata: a key
// already there is kept, two maps under one key are merged. Nil when there
// is none. The configuration's values are copied, never modified. The
// work is bounded by the descriptors and the configuration's metadata.
func erlMetadata(resp *service.Response, statuses []*rlsv3.RateLimitResponse_DescriptorStatus) *structpb.Struct {
	var out *structpb.Struct
	for i := range resp.Decisions {
		p := resp.Decisions[i].Policy
		if p == nil || p.ERL == nil || p.ERL.Metadata == nil || p.Unlimited || statuses[i].GetCode() != rlsv3.RateLimitResponse_OK {
			continue
		}
		if out == nil {
			out = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		}
		mergeMetadata(out, p.ERL.Metadata)
	}
	return out
}

// mergeMetadata adds src's fields that dst lacks to dst (copies), and
// merges the maps both hold under one key.
func mergeMetadata(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		have, ok := dst.Fields[k]
		switch {
		case !ok:
			dst.Fields[k] = proto.Clone(v).(*structpb.Value)
		case have.GetStructValue() != nil && v.GetStructValue() != nil:
			mergeMetadata(have.GetStructValue(), v.GetStructValue())
		}
	}
}
