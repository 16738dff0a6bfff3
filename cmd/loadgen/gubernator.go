package main

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// gubernator's V1 API (gubernator.proto, package pb.gubernator, of
// github.com/gubernator-io/gubernator/v2): loadgen encodes the few fields
// it sends and reads with protowire instead of importing the module,
// whose root package is the whole server (etcd, Kubernetes client-go
// v0.23 and more) and would pin them in Sluice's go.mod.
const gubernatorMethod = "/pb.gubernator.V1/GetRateLimits"

// Field numbers of gubernator.proto.
const (
	fieldReqRequests   = 1 // GetRateLimitsReq.requests
	fieldRLName        = 1 // RateLimitReq.name
	fieldRLUniqueKey   = 2 // RateLimitReq.unique_key
	fieldRLHits        = 3 // RateLimitReq.hits
	fieldRLLimit       = 4 // RateLimitReq.limit
	fieldRLDuration    = 5 // RateLimitReq.duration, ms
	fieldRespResponses = 1 // GetRateLimitsResp.responses
	fieldRespStatus    = 1 // RateLimitResp.status: 0 UNDER_LIMIT, 1 OVER_LIMIT
	fieldRespError     = 5 // RateLimitResp.error
)

// appendGetRateLimitsReq appends a GetRateLimitsReq with one token-bucket
// rate limit per key (algorithm and behavior left at 0: TOKEN_BUCKET,
// BATCHING).
func appendGetRateLimitsReq(b []byte, name string, keys []string, hits int64) []byte {
	for _, k := range keys {
		var rl []byte
		rl = protowire.AppendTag(rl, fieldRLName, protowire.BytesType)
		rl = protowire.AppendString(rl, name)
		rl = protowire.AppendTag(rl, fieldRLUniqueKey, protowire.BytesType)
		rl = protowire.AppendString(rl, k)
		rl = protowire.AppendTag(rl, fieldRLHits, protowire.VarintType)
		rl = protowire.AppendVarint(rl, uint64(hits))
		rl = protowire.AppendTag(rl, fieldRLLimit, protowire.VarintType)
		rl = protowire.AppendVarint(rl, gubernatorLimit)
		rl = protowire.AppendTag(rl, fieldRLDuration, protowire.VarintType)
		rl = protowire.AppendVarint(rl, uint64(gubernatorDuration.Milliseconds()))
		b = protowire.AppendTag(b, fieldReqRequests, protowire.BytesType)
		b = protowire.AppendBytes(b, rl)
	}
	return b
}

// parseGetRateLimitsResp reads a GetRateLimitsResp of want responses: over
// limit when any is, an error when any carries one.
func parseGetRateLimitsResp(b []byte, want int) (outcome, error) {
	out, n := outcomeOK, 0
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return 0, protowire.ParseError(l)
		}
		b = b[l:]
		if num != fieldRespResponses || typ != protowire.BytesType {
			l = protowire.ConsumeFieldValue(num, typ, b)
			if l < 0 {
				return 0, protowire.ParseError(l)
			}
			b = b[l:]
			continue
		}
		rl, l := protowire.ConsumeBytes(b)
		if l < 0 {
			return 0, protowire.ParseError(l)
		}
		b = b[l:]
		n++
		over, err := parseRateLimitResp(rl)
		if err != nil {
			return 0, err
		}
		if over {
			out = outcomeOver
		}
	}
	if n != want {
		return 0, fmt.Errorf("gubernator answered %d rate limits, want %d", n, want)
	}
	return out, nil
}

// parseRateLimitResp reads one RateLimitResp: whether it is over the
// limit, or its error.
func parseRateLimitResp(b []byte) (bool, error) {
	over := false
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return false, protowire.ParseError(l)
		}
		b = b[l:]
		switch {
		case num == fieldRespStatus && typ == protowire.VarintType:
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return false, protowire.ParseError(l)
			}
			over, b = v == 1, b[l:]
		case num == fieldRespError && typ == protowire.BytesType:
			v, l := protowire.ConsumeString(b)
			if l < 0 {
				return false, protowire.ParseError(l)
			}
			if v != "" {
				return false, errors.New("gubernator: " + v)
			}
			b = b[l:]
		default:
			l = protowire.ConsumeFieldValue(num, typ, b)
			if l < 0 {
				return false, protowire.ParseError(l)
			}
			b = b[l:]
		}
	}
	return over, nil
}

// rawCodec passes messages already encoded: it marshals a *[]byte and
// unmarshals into one.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	p, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*p)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	*p = data.Materialize()
	return nil
}

var _ encoding.CodecV2 = rawCodec{}
