package server_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-dev/sluice/limiter/server"
)

// rawCodec sends a []byte message as the bytes it holds, and decodes the
// answer as protobuf: a client that sends what Envoy's C++ protobuf may
// serialize, strings that are not UTF-8 among it.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.([]byte); ok {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return encoding.GetCodecV2("proto").Marshal(v)
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

func (rawCodec) Name() string { return "proto" }

// rawRLSRequest encodes an RLS request by hand: domain, then one
// descriptor per list of key, value pairs, then hits_addend.
func rawRLSRequest(domain string, hits uint64, descriptors ...[]string) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, domain)
	for _, d := range descriptors {
		var db []byte
		for i := 0; i+1 < len(d); i += 2 {
			var eb []byte
			eb = protowire.AppendTag(eb, 1, protowire.BytesType)
			eb = protowire.AppendString(eb, d[i])
			eb = protowire.AppendTag(eb, 2, protowire.BytesType)
			eb = protowire.AppendString(eb, d[i+1])
			db = protowire.AppendTag(db, 1, protowire.BytesType)
			db = protowire.AppendBytes(db, eb)
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, db)
	}
	if hits > 0 {
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, hits)
	}
	return b
}

// A descriptor value that is not UTF-8 (Envoy copies a header's bytes,
// 0x80-0xff among them, and C++ protobuf serializes them) is a denial with
// its reason, not grpc-go's Internal "string field contains invalid
// UTF-8", on which every shipped Envoy sample (failure_mode_deny: false)
// admits the request. Raw bytes on a real gRPC connection.
func TestAttackInvalidUTF8SkipsNoLimitOverRLS(t *testing.T) {
	e := startRefusals(t)
	call := func(req []byte) (*rlsv3.RateLimitResponse, error) {
		resp := &rlsv3.RateLimitResponse{}
		err := e.conn.Invoke(ctxT(t), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", req, resp,
			grpc.ForceCodecV2(rawCodec{}))
		return resp, err
	}
	// The address's limit of 2 spent by well-formed requests, sent raw too.
	for i := range 2 {
		resp, err := call(rawRLSRequest("llm", 1, []string{"user", "a"}, []string{"remote_address", "192.0.2.7"}))
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d: %v %v, want OK", i+1, resp, err)
		}
	}
	for _, tc := range []struct {
		name string
		req  []byte
		want string
	}{
		{"a value of 0xff 0xfe", rawRLSRequest("llm", 1, []string{"user", "\xff\xfe"}, []string{"remote_address", "192.0.2.7"}),
			"descriptors[0].entries[0].value is not valid UTF-8"},
		{"a Latin-1 value", rawRLSRequest("llm", 1, []string{"user", "Jos\xe9"}, []string{"remote_address", "192.0.2.7"}),
			"descriptors[0].entries[0].value is not valid UTF-8"},
		{"the address's value", rawRLSRequest("llm", 1, []string{"user", "a"}, []string{"remote_address", "192.0.2.7\x80"}),
			"descriptors[1].entries[0].value is not valid UTF-8"},
		{"a key", rawRLSRequest("llm", 1, []string{"user", "a", "x\xc3", "b"}, []string{"remote_address", "192.0.2.7"}),
			"descriptors[0].entries[1].key is not valid UTF-8"},
	} {
		for range 3 {
			resp, err := call(tc.req)
			wantRefusedRLS(t, tc.name, resp, err, tc.want)
		}
	}
	// Nothing was spent, and the address is still over its limit.
	resp, err := call(rawRLSRequest("llm", 1, []string{"user", "b"}, []string{"remote_address", "192.0.2.7"}))
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a well-formed request after the refusals: %v %v, want OVER_LIMIT (the address spent its 2)", resp, err)
	}
	if got := decisions(t, e.reg, "refused"); got != 24 {
		t.Fatalf("sluice_decisions_total{result=refused} = %v, want 24 (12 requests, 2 policies each)", got)
	}
}

// rawHTTP sends raw, a request written by hand, on a new connection to
// addr, and reads one response.
func rawHTTP(t *testing.T, addr, raw string) *http.Response {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer to %.80q: %v", raw, err)
	}
	resp.Body.Close()
	return resp
}

// forwardAuthRaw is a forward-auth GET of domain shop-strict for key,
// with extra header lines, written by hand so that they may hold any byte.
func forwardAuthRaw(key string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "GET %sshop-strict HTTP/1.1\r\nHost: limiter\r\nX-Forwarded-Uri: /\r\n", server.ForwardAuthPath)
	if key != "" {
		fmt.Fprintf(&b, "X-Api-Key: %s\r\n", key)
	}
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// A control byte in any client header (nginx passes 0x01-0x1f and 0x7f to
// its auth subrequest) is no 400 from Go's parser, which nginx turns into
// a 500 that the sample serves from @fail_open: a header the limiter
// doesn't read changes nothing, one it reads is refused with the
// mapping's deny status. A head of 1 MiB is no 431 either.
func TestAttackForwardAuthControlByteSkipsNoLimit(t *testing.T) {
	e := startForwardAuth(t)
	addr := strings.TrimPrefix(e.http, "http://")
	if resp := rawHTTP(t, addr, forwardAuthRaw("key-a")); resp.StatusCode != http.StatusOK {
		t.Fatalf("key-a's first request: %d", resp.StatusCode)
	}
	for _, tc := range []struct {
		name   string
		raw    string
		reason string
	}{
		{"key-a over its limit", forwardAuthRaw("key-a"), ""},
		{"X-Junk: a\\x01b", forwardAuthRaw("key-a", "X-Junk: a\x01b"), ""},
		{"X-Junk: DEL", forwardAuthRaw("key-a", "X-Junk: \x7f"), ""},
		{"X-Junk: NUL", forwardAuthRaw("key-a", "X-Junk: a\x00"), ""},
		{"a control byte in the name", forwardAuthRaw("key-a", "X-J\x02nk: a"), ""},
		{"X-Api-Key: key-a\\x01", forwardAuthRaw("key-a\x01"), "value is not valid UTF-8"},
		{"X-Api-Key: \\x1b[31m", forwardAuthRaw("\x1b[31m"), "value is not valid UTF-8"},
		{"X-Api-Key of obs-text", forwardAuthRaw("k\xe9y"), "value is not valid UTF-8"},
		{"a 1 MiB head", forwardAuthRaw("key-a", "X-Junk: "+strings.Repeat("j", 1<<20)), ""},
	} {
		resp := rawHTTP(t, addr, tc.raw)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(resp.Header.Get(server.HeaderReason), tc.reason) {
			t.Errorf("%s: %d %s %q, want 403 (the mapping's denyStatus) with a reason containing %q", tc.name, resp.StatusCode,
				server.HeaderReason, resp.Header.Get(server.HeaderReason), tc.reason)
		}
	}
}

// The scrubbing of request heads follows each request's framing: a JSON
// body, then a second request on the same connection, each answered as
// sent; a control byte in the second's head changes no answer.
func TestScrubFollowsRequestFraming(t *testing.T) {
	e := startForwardAuth(t)
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(e.http, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	body := `{"domain":"unknown","descriptors":[{"entries":[{"key":"k","value":"a\u0001 \u007f"}]}]}`
	raw := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: l\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", server.CheckPath, len(body), body) +
		forwardAuthRaw("key-z", "X-Junk: \x01") + forwardAuthRaw("key-z")
	if _, err := c.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusForbidden} {
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i+1, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("answer %d: %d (%s %q), want %d", i+1, resp.StatusCode, server.HeaderReason, resp.Header.Get(server.HeaderReason), want)
		}
	}
}
