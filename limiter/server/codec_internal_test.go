package server

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A request with strings that are not UTF-8 decodes with the bytes sent,
// and every other field as protobuf decodes it.
func TestRLSCodecDecodesInvalidUTF8(t *testing.T) {
	req := &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 7, Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "ok"}}},
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "u", Value: "\xff"}, {Key: "\xfe", Value: "v"}},
			Limit:      &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: 2},
			HitsAddend: wrapperspb.UInt64(9)},
	}}
	// protobuf won't encode it: encode stand-in bytes, then swap them.
	b, err := proto.MarshalOptions{}.Marshal(req)
	if err == nil {
		t.Fatal("protobuf marshals invalid UTF-8 now: the test needs another way to build its bytes")
	}
	ok := proto.Clone(req).(*rlsv3.RateLimitRequest)
	ok.Descriptors[1].Entries[0].Value, ok.Descriptors[1].Entries[1].Key = "~", "|"
	if b, err = proto.Marshal(ok); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		switch b[i] {
		case '~':
			b[i] = 0xff
		case '|':
			b[i] = 0xfe
		}
	}
	got := &rlsv3.RateLimitRequest{}
	if err := newRLSCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, req) {
		t.Fatalf("decoded %v, want %v", got, req)
	}
}

// A response that protobuf can't encode is encoded with its strings made
// valid, not answered with an error.
func TestRLSCodecEncodesInvalidUTF8(t *testing.T) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT,
		ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "X-Sluice-Reason", Value: "bad \xff"}}}
	out, err := newRLSCodec().Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	got := &rlsv3.RateLimitResponse{}
	if err := proto.Unmarshal(out.Materialize(), got); err != nil {
		t.Fatal(err)
	}
	if got.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || got.ResponseHeadersToAdd[0].Value != "bad \uFFFD" {
		t.Fatalf("%v", got)
	}
}
