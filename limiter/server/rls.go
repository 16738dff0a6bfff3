package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/tracing"
)

// RLS is Envoy's RLS v3 RateLimitService (ShouldRateLimit) over a
// service.Service: it maps an RLS request to a service.Request, and the
// service's Response to per-descriptor statuses with current_limit,
// limit_remaining and duration_until_reset, the rate-limit headers, and
// dynamic metadata naming a failure mode's denial. An idempotency key
// travels as a descriptor entry (service.Options.IdempotencyEntry).
type RLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	svc    *service.Service
	jitter float64
	tracer *tracing.Tracer // nil: tracing off
}

// NewRLS returns the RLS service over svc, adding up to jitter of each
// Retry-After (see Options.RetryAfterJitter: 0 means 0.1, negative none).
func NewRLS(svc *service.Service, jitter float64) *RLS {
	if jitter == 0 {
		jitter = defaultJitter
	}
	return &RLS{svc: svc, jitter: jitter}
}

// ShouldRateLimit decides req. A request the service won't count because
// of what the client sent is answered OVER_LIMIT with the reason (see
// service/refuse.go); only one that selects no policy (an empty domain, no
// descriptors) is answered InvalidArgument, with what is wrong with it.
func (r *RLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, sp := startGRPC(r.tracer, ctx, tracing.SpanRLS)
	defer sp.End()
	sr := getRequest(req)
	defer putRequest(sr)
	if err := r.svc.DecideInto(ctx, &sr.req, &sr.resp); err != nil {
		sp.Fail(err)
		return nil, grpcError(err)
	}
	traceDecision(sp, sr.req.Domain, &sr.resp)
	out := toRLS(&sr.resp, r.jitter)
	if sr.resp.OverLimit {
		addProblem(out, &sr.resp, sr.req.Descriptors, r.svc.AcceptEntry())
	}
	return out, nil
}

// SetTracer makes r trace each decision with t (nil: off). Call it before
// r serves.
func (r *RLS) SetTracer(t *tracing.Tracer) { r.tracer = t }

// addProblem makes out, a denial, carry problem details as the body Envoy
// sends, when a descriptor's accept entry (acceptEntry: the client's
// Accept header) asks for them. The status in the body is 429, Envoy's
// default for a denial.
func addProblem(out *rlsv3.RateLimitResponse, resp *service.Response, ds []service.Descriptor, acceptEntry string) {
	accept := ""
	for i := range ds {
		for _, e := range ds[i].Entries {
			if e.Key == acceptEntry {
				accept = e.Value
			}
		}
	}
	if accept == "" || !acceptsProblem(accept) {
		return
	}
	body, err := json.Marshal(problemFor(resp, http.StatusTooManyRequests))
	if err != nil {
		return // the plain denial stands
	}
	out.RawBody = body
	out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &corev3.HeaderValue{Key: "Content-Type", Value: ProblemContentType})
}

// validateRLS is what svc answers with an error of an RLS request (or of
// an HTTP check's): only what selects no policy (service.ValidateShape).
func validateRLS(svc *service.Service, req *rlsv3.RateLimitRequest) error {
	sr := getRequest(req)
	defer putRequest(sr)
	return service.ValidateShape(&sr.req)
}

// grpcError maps an error of the service to a gRPC status.
func grpcError(err error) error {
	if errors.Is(err, service.ErrInvalidArgument) {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// rlsRequest is a service.Request made from an RLS request, with the
// memory its descriptors and entries take, and its Response, pooled.
type rlsRequest struct {
	req         service.Request
	descriptors []service.Descriptor
	entries     []compiled.Entry
	resp        service.Response
}

var requests = sync.Pool{New: func() any { return &rlsRequest{} }}

// getRequest maps an RLS request to a service.Request: a nil descriptor
// has no entries, a nil entry an empty key. putRequest gives it back.
func getRequest(req *rlsv3.RateLimitRequest) *rlsRequest {
	sr := requests.Get().(*rlsRequest)
	ds := req.GetDescriptors()
	if cap(sr.descriptors) < len(ds) {
		sr.descriptors = make([]service.Descriptor, len(ds))
	}
	sr.descriptors = sr.descriptors[:len(ds)]
	entries := sr.entries[:0]
	for i, d := range ds {
		start := len(entries)
		for _, e := range d.GetEntries() {
			entries = append(entries, compiled.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		// Should entries grow, the earlier descriptors keep theirs in the
		// old array, which stays as it was.
		sd := &sr.descriptors[i]
		*sd = service.Descriptor{Entries: entries[start:len(entries):len(entries)],
			NegativeHits: d.GetIsNegativeHits(), LimitOverride: d.GetLimit() != nil}
		if o := d.GetLimit(); o != nil {
			sd.Override = compiled.UnitRate{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: int32(o.GetUnit())}
		}
		if h := d.GetHitsAddend(); h != nil {
			sd.HitsAddend, sd.HasHitsAddend = h.GetValue(), true
		}
	}
	sr.entries = entries
	sr.req = service.Request{Domain: req.GetDomain(), Descriptors: sr.descriptors, HitsAddend: uint64(req.GetHitsAddend())}
	return sr
}

func putRequest(sr *rlsRequest) {
	sr.req = service.Request{}
	if cap(sr.entries) > maxPooledEntries || cap(sr.descriptors) > service.MaxDescriptors || cap(sr.resp.Decisions) > service.MaxDescriptors ||
		cap(sr.resp.Violated) > maxPooledViolated || cap(sr.resp.SoftLimited) > maxPooledViolated {
		return // an oversized request's memory is not kept
	}
	clear(sr.entries)
	clear(sr.descriptors)
	clear(sr.resp.Decisions)
	clear(sr.resp.Violated)
	clear(sr.resp.SoftLimited)
	clear(sr.resp.Endings)
	sr.resp = service.Response{Decisions: sr.resp.Decisions[:0], Violated: sr.resp.Violated[:0], SoftLimited: sr.resp.SoftLimited[:0],
		Endings: sr.resp.Endings[:0]}
	requests.Put(sr)
}

// maxPooledEntries bounds the entries of a pooled request: as many as a
// valid request may carry.
const maxPooledEntries = service.MaxDescriptors * service.MaxEntries

// maxPooledViolated bounds the violated (and the soft-limited) policies a
// pooled response keeps room for.
const maxPooledViolated = 64

// rlsAnswer is an RLS response with room for what most answers hold: one
// decided descriptor's status, limit and reset, and five headers. toRLS
// makes it in one allocation where its parts took six; the parts of a
// larger answer are allocated on their own. It is not pooled: gRPC keeps
// the response until it has been written, after the handler returns.
type rlsAnswer struct {
	out      rlsv3.RateLimitResponse
	statuses [1]*rlsv3.RateLimitResponse_DescriptorStatus
	status   [1]rlsv3.RateLimitResponse_DescriptorStatus
	room     [1]statusRoom
	headers  headerRoom
}

// toRLS maps the service's answer to RLS.
func toRLS(resp *service.Response, jitter float64) *rlsv3.RateLimitResponse {
	a := &rlsAnswer{}
	out := &a.out
	out.OverallCode = rlsv3.RateLimitResponse_OK
	if n := len(resp.Decisions); n <= len(a.statuses) {
		out.Statuses = a.statuses[:n:n]
	} else {
		out.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	}
	if resp.OverLimit {
		out.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	for i := range resp.Decisions {
		if i < len(a.status) {
			out.Statuses[i] = &a.status[i]
			descriptorStatusIn(&a.status[i], &a.room[i], &resp.Decisions[i])
		} else {
			out.Statuses[i] = descriptorStatus(&resp.Decisions[i])
		}
	}
	out.ResponseHeadersToAdd = headersIn(resp, jitter, &a.headers)
	var md map[string]any
	if d := &resp.Reported; d.OverLimit && reasonOf(d) != "" {
		// Envoy logs and forwards the RLS dynamic metadata. A hidden
		// policy's name stays out: the HTTP check's body carries it too.
		md = map[string]any{"reason": reasonOf(d)}
		if d.Denied != nil && !d.Denied.Hidden {
			md["policy"] = d.Denied.ID()
		}
		if d.Refused {
			// Not counted because of what the client sent (refuse.go).
			md["refused"] = true
		}
		if st := penaltyStatus(resp); st != 0 {
			// A penalized key: the status spec.penalty asks of the gateway.
			md["penalized"], md["status"] = true, st
		}
	} else if resp.Lease != "" {
		// Envoy keeps it for the stream-done call, which sends it back in
		// the policy's lease entry (see LeaseMetadataKey). Never in a
		// header: the client must not end its own request early.
		md = map[string]any{LeaseMetadataKey: resp.Lease}
	}
	if len(resp.SoftLimited) > 0 {
		// The upstream app sees the mark on the request, and Envoy (and
		// filters after it, such as a router choosing a backend) in the
		// dynamic metadata.
		out.RequestHeadersToAdd = []*corev3.HeaderValue{{Key: HeaderSoftLimit, Value: softLimitValue(resp)}}
		names := make([]any, len(resp.SoftLimited))
		for i, p := range resp.SoftLimited {
			names[i] = p.ID()
		}
		if md == nil {
			md = map[string]any{}
		}
		md["softLimits"] = names
	}
	if md != nil {
		out.DynamicMetadata, _ = structpb.NewStruct(md)
	}
	if em := erlMetadata(resp, out.Statuses); em != nil {
		// An ERL descriptor's own metadata (erl.go), beside Sluice's.
		if out.DynamicMetadata == nil {
			out.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		}
		out.DynamicMetadata.Fields["metadata"] = structpb.NewStructValue(em)
	}
	return out
}

// descriptorStatus maps one decision to its RLS status. An unmatched
// descriptor is OK with no limit.
func descriptorStatus(d *service.Decision) *rlsv3.RateLimitResponse_DescriptorStatus {
	// The status, its limit and its duration in one allocation: every
	// decided descriptor has them.
	a := &struct {
		st   rlsv3.RateLimitResponse_DescriptorStatus
		room statusRoom
	}{}
	descriptorStatusIn(&a.st, &a.room, d)
	return &a.st
}

// statusRoom is room for a decided descriptor's limit and reset.
type statusRoom struct {
	lim rlsv3.RateLimitResponse_RateLimit
	dur durationpb.Duration
}

// descriptorStatusIn is descriptorStatus in st, a zero status, with its
// limit and reset in room.
func descriptorStatusIn(st *rlsv3.RateLimitResponse_DescriptorStatus, room *statusRoom, d *service.Decision) {
	st.Code = rlsv3.RateLimitResponse_OK
	if d.OverLimit {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if d.Policy == nil {
		return
	}
	if d.Policy.ERL != nil {
		erlStatus(st, d)
		return
	}
	unit, mult := limitUnit(d.Policy.Limit)
	room.lim.Name, room.lim.RequestsPerUnit, room.lim.Unit = d.Policy.ID(), uint32(d.Policy.Limit.Limit), unit
	if mult != 1 {
		room.lim.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	st.CurrentLimit = &room.lim
	st.LimitRemaining = uint32(min(d.Result.Remaining, int64(^uint32(0))))
	reset := d.Result.ResetAfter
	room.dur.Seconds, room.dur.Nanos = int64(reset/time.Second), int32(reset%time.Second)
	st.DurationUntilReset = &room.dur
}

// limitUnit is the RLS unit of a limit: its calendar period (DAY, WEEK or
// MONTH), or periodUnit's.
func limitUnit(l algo.Limit) (rlsv3.RateLimitResponse_RateLimit_Unit, uint32) {
	switch l.Calendar.Period {
	case algo.Day:
		return rlsv3.RateLimitResponse_RateLimit_DAY, 1
	case algo.Week:
		return rlsv3.RateLimitResponse_RateLimit_WEEK, 1
	case algo.Month:
		return rlsv3.RateLimitResponse_RateLimit_MONTH, 1
	}
	return periodUnit(l.Period)
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
