package server

// Tracing at the entry points: a span per decision (RLS, check,
// forward-auth, release, settle) continuing the caller's traceparent (see
// limiter/tracing), and what was decided as its attributes. A span names
// the domain, policies, result and failure mode; never a descriptor value,
// nor a refusal's reason (which may quote what the client sent).

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/tracing"
)

// Attribute keys of a decision's span.
const (
	attrDomain      = "sluice.domain"
	attrResult      = "sluice.result" // ok, over_limit, refused
	attrPolicies    = "sluice.policies"
	attrDenied      = "sluice.denied_policies"
	attrSoft        = "sluice.soft_limited_policies"
	attrFailureMode = "sluice.failure_mode"
	attrReason      = "sluice.reason"
	attrReplayed    = "sluice.replayed"
	attrPenalized   = "sluice.penalized"
	attrDescriptors = "sluice.descriptors"
	attrEndings     = "sluice.endings"
)

// startGRPC starts the span of an RLS call, continuing the traceparent in
// its gRPC metadata.
func startGRPC(t *tracing.Tracer, ctx context.Context, name string) (context.Context, tracing.Span) {
	if !t.Sampled() {
		return ctx, tracing.Span{} // the metadata is not read
	}
	return t.StartSampled(ctx, name, metadata.ValueFromIncomingContext(ctx, "traceparent"))
}

// startHTTP starts the span of an HTTP call, continuing its traceparent
// header, and returns r with it.
func startHTTP(t *tracing.Tracer, r *http.Request, name string) (*http.Request, tracing.Span) {
	if !t.Sampled() {
		return r, tracing.Span{}
	}
	ctx, sp := t.StartSampled(r.Context(), name, r.Header.Values("Traceparent"))
	if !sp.Recording() {
		return r, sp
	}
	return r.WithContext(ctx), sp
}

// traceDecision sets what resp decided on sp.
func traceDecision(sp tracing.Span, domain string, resp *service.Response) {
	if !sp.Recording() {
		return
	}
	result, penalized, reason := "ok", false, ""
	var policies, denied, soft []string
	for i := range resp.Decisions {
		d := &resp.Decisions[i]
		switch {
		case d.Refused:
			result = "refused"
		case d.OverLimit && result == "ok":
			result = "over_limit"
		}
		penalized = penalized || d.Penalized
		if d.Reason != "" && !d.Refused && reason == "" {
			reason = d.Reason // a failure mode's: the server's words
		}
		if d.Policy != nil {
			policies = appendOnce(policies, d.Policy.ID())
		}
		if d.Denied != nil {
			denied = appendOnce(denied, d.Denied.ID())
		}
	}
	for _, p := range resp.SoftLimited {
		soft = appendOnce(soft, p.ID())
	}
	kv := []attribute.KeyValue{attribute.String(attrDomain, domain), attribute.String(attrResult, result),
		attribute.Int(attrDescriptors, len(resp.Decisions)),
		attribute.StringSlice(attrPolicies, policies), attribute.StringSlice(attrDenied, denied),
		attribute.Bool(attrReplayed, resp.Replayed), attribute.Bool(attrPenalized, penalized)}
	if len(soft) > 0 {
		kv = append(kv, attribute.StringSlice(attrSoft, soft))
	}
	if resp.FailureMode != "" {
		kv = append(kv, attribute.String(attrFailureMode, string(resp.FailureMode)))
	}
	if reason != "" {
		kv = append(kv, attribute.String(attrReason, reason))
	}
	sp.Set(kv...)
}

// traceEnd sets what a release or settle ended on sp.
func traceEnd(sp tracing.Span, domain string, endings []service.Ending) {
	if !sp.Recording() {
		return
	}
	var policies []string
	for i := range endings {
		if p := endings[i].Policy; p != nil {
			policies = appendOnce(policies, p.ID())
		}
	}
	sp.Set(attribute.String(attrDomain, domain), attribute.StringSlice(attrPolicies, policies), attribute.Int(attrEndings, len(endings)))
}

func appendOnce(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}
