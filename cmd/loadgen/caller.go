package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// outcome is one answered decision.
type outcome int

const (
	outcomeOK outcome = iota
	outcomeOver
	outcomeUnknown
)

// Protocols loadgen speaks (--protocol).
const (
	protoRLS        = "rls"        // Envoy RLS v3 ShouldRateLimit
	protoGubernator = "gubernator" // gubernator's V1 GetRateLimits
)

// caller sends one decision for key index k. A caller is not safe for
// concurrent use: each goroutine owns one (its request is reused).
type caller interface {
	call(ctx context.Context, k int, opts ...grpc.CallOption) (outcome, error)
}

// newCallerFunc returns a factory of callers on connection cc.
func newCallerFunc(protocol string, tmpl *template, domain string, hits uint32) (func(cc *grpc.ClientConn) caller, error) {
	switch protocol {
	case protoRLS, "":
		return func(cc *grpc.ClientConn) caller {
			return &rlsCaller{client: rlsv3.NewRateLimitServiceClient(cc), b: newRequestBuilder(tmpl, domain, hits)}
		}, nil
	case protoGubernator:
		return func(cc *grpc.ClientConn) caller {
			return &gubernatorCaller{cc: cc, tmpl: tmpl, domain: domain, hits: max(int64(hits), 1)}
		}, nil
	}
	return nil, fmt.Errorf("--protocol %q: want %s or %s", protocol, protoRLS, protoGubernator)
}

// rlsCaller sends Envoy RLS v3 ShouldRateLimit calls.
type rlsCaller struct {
	client rlsv3.RateLimitServiceClient
	b      *requestBuilder
}

func (c *rlsCaller) call(ctx context.Context, k int, opts ...grpc.CallOption) (outcome, error) {
	resp, err := c.client.ShouldRateLimit(ctx, c.b.build(k), opts...)
	if err != nil {
		return 0, err
	}
	switch resp.GetOverallCode() {
	case rlsv3.RateLimitResponse_OK:
		return outcomeOK, nil
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		return outcomeOver, nil
	}
	return outcomeUnknown, nil
}

// gubernatorLimit is the limit of every gubernator rate limit loadgen
// asks for: high enough never to deny, so a run measures decisions.
const (
	gubernatorLimit    = 1_000_000_000
	gubernatorDuration = time.Second
)

// gubernatorCaller sends one GetRateLimits call per decision with one
// rate limit per descriptor of the template: name the domain, unique_key
// the descriptor's entries as key=value joined by ','.
type gubernatorCaller struct {
	cc     *grpc.ClientConn
	tmpl   *template
	domain string
	hits   int64
	buf    []byte
	keys   []string
}

func (c *gubernatorCaller) call(ctx context.Context, k int, opts ...grpc.CallOption) (outcome, error) {
	c.keys = c.tmpl.render(c.keys[:0], k)
	c.buf = appendGetRateLimitsReq(c.buf[:0], c.domain, c.keys, c.hits)
	var resp []byte
	opts = append(opts, grpc.ForceCodecV2(rawCodec{}))
	if err := c.cc.Invoke(ctx, gubernatorMethod, &c.buf, &resp, opts...); err != nil {
		return 0, err
	}
	return parseGetRateLimitsResp(resp, len(c.keys))
}

// render returns, for key index k, each descriptor of t as its entries
// key=value joined by ','.
func (t *template) render(out []string, k int) []string {
	var b []byte
	for _, d := range t.descs {
		b = b[:0]
		for i, e := range d {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(append(b, e.key...), '=')
			for j, p := range e.parts {
				if j > 0 {
					b = strconv.AppendInt(b, int64(k), 10)
				}
				b = append(b, p...)
			}
		}
		out = append(out, string(b))
	}
	return out
}
