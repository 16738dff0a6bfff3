package server

import (
	"errors"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// decodeCheckRequest turns the body of POST /v1/ratelimit/check, the
// protojson form of an RLS RateLimitRequest, into a request that validate
// accepts, or an error that says what is wrong with it. Unknown fields are
// errors, not ignored: a misspelt "hitsAdend" must not silently cost 1.
func decodeCheckRequest(body []byte, validate func(*rlsv3.RateLimitRequest) error) (*rlsv3.RateLimitRequest, error) {
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil, errors.New("request body is empty: send a JSON RateLimitRequest such as " +
			`{"domain":"payments-api","descriptors":[{"entries":[{"key":"user_id","value":"alice"}]}]}`)
	}
	req := &rlsv3.RateLimitRequest{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(body, req); err != nil {
		// protobuf-go writes "proto:" and then, unpredictably, a plain or a
		// non-breaking space; drop both.
		msg := strings.TrimLeft(strings.TrimPrefix(err.Error(), "proto:"), " \u00a0")
		return nil, errors.New("invalid request body: " + msg)
	}
	if err := validate(req); err != nil {
		return nil, err
	}
	return req, nil
}
