package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	llmSample   = "llm/envoy.yaml"
	llmPolicies = gatewaySamples + "/llm/policies.yaml"
	// ratelimitNamespace is where Envoy's ratelimit filter keeps the
	// dynamic metadata of an RLS answer.
	ratelimitNamespace = "envoy.filters.http.ratelimit"
)

// loadLLMSample parses the LLM sample strictly with go-control-plane,
// validates it deeply, and returns its ratelimit filter (whose own
// rate_limits carry the actions), checking the limiter's cluster.
func loadLLMSample(data []byte) (*ratelimitv3.RateLimit, error) {
	b := &bootstrapv3.Bootstrap{}
	if err := parseEnvoy(data, b); err != nil {
		return nil, err
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		return nil, err
	}
	rl, err := ratelimitFilter(hcm.GetHttpFilters())
	if err != nil {
		return nil, err
	}
	cluster := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == cluster {
			return rl, checkLimiterCluster(c)
		}
	}
	return nil, fmt.Errorf("the ratelimit filter's cluster %q is not defined", cluster)
}

// llmStream is one request through Envoy as the sample's actions see it:
// its headers, and the dynamic metadata by namespace and key.
type llmStream struct {
	headers  map[string]string
	metadata map[string]map[string]string
}

var substitution = regexp.MustCompile(`^%(REQ|DYNAMIC_METADATA)\(([^)]*)\)%$`)

// rlsCall builds the RLS request Envoy sends for s: at the start
// (streamDone false) from the rate_limits entries without
// apply_on_stream_done, at the end from those with it. It models what the
// sample uses (request_headers, metadata from dynamic metadata, a
// hits_addend format of one substitution) and fails on anything else; a
// descriptor whose action finds nothing, or whose hits_addend is not a
// number, is dropped, as Envoy drops it. nil when no descriptor is left.
func rlsCall(t *testing.T, rl *ratelimitv3.RateLimit, s llmStream, streamDone bool) *rlsv3.RateLimitRequest {
	t.Helper()
	req := &rlsv3.RateLimitRequest{Domain: rl.GetDomain()}
	for _, r := range rl.GetRateLimits() {
		if r.GetApplyOnStreamDone() != streamDone {
			continue
		}
		d := &rlv3.RateLimitDescriptor{}
		complete := true
		for _, a := range r.GetActions() {
			switch act := a.GetActionSpecifier().(type) {
			case *routev3.RateLimit_Action_RequestHeaders_:
				v, ok := s.headers[strings.ToLower(act.RequestHeaders.GetHeaderName())]
				if !ok {
					complete = false
					continue
				}
				d.Entries = append(d.Entries, entry(act.RequestHeaders.GetDescriptorKey(), v))
			case *routev3.RateLimit_Action_Metadata:
				md := act.Metadata
				if md.GetSource() != routev3.RateLimit_Action_MetaData_DYNAMIC || len(md.GetMetadataKey().GetPath()) != 1 {
					t.Fatalf("rlsCall models dynamic metadata one key deep, not %v", md)
				}
				v, ok := s.metadata[md.GetMetadataKey().GetKey()][md.GetMetadataKey().GetPath()[0].GetKey()]
				if !ok {
					complete = false
					continue
				}
				d.Entries = append(d.Entries, entry(md.GetDescriptorKey(), v))
			default:
				t.Fatalf("rlsCall does not model the action %T: teach it before using it in the sample", act)
			}
		}
		if h := r.GetHitsAddend(); h != nil && complete {
			m := substitution.FindStringSubmatch(h.GetFormat())
			if m == nil {
				t.Fatalf("rlsCall models a hits_addend format of one %%REQ()%% or %%DYNAMIC_METADATA()%%, not %q", h.GetFormat())
			}
			var v string
			var ok bool
			if m[1] == "REQ" {
				v, ok = s.headers[strings.ToLower(m[2])]
			} else {
				ns, key, _ := strings.Cut(m[2], ":")
				v, ok = s.metadata[ns][key]
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if !ok || err != nil {
				complete = false // Envoy ignores the descriptor
			}
			d.HitsAddend = wrapperspb.UInt64(n)
		}
		if complete && len(d.Entries) > 0 {
			req.Descriptors = append(req.Descriptors, d)
		}
	}
	if len(req.Descriptors) == 0 {
		return nil
	}
	return req
}

// TestLLMEnvoySample validates the LLM sample with go-control-plane, then
// plays its two calls per request against a real limiter over gRPC: the
// start takes a slot and reserves max_tokens, the stream-done call, with
// the lease the start answered in its dynamic metadata, releases the slot
// and settles the tokens used.
func TestLLMEnvoySample(t *testing.T) {
	rl, err := loadLLMSample(readSample(t, llmSample))
	if err != nil {
		t.Fatalf("%s: %v", llmSample, err)
	}
	if rl.GetDomain() != "llm" || rl.GetFailureModeDeny() {
		t.Fatalf("ratelimit filter: domain %q, failure_mode_deny %v; want llm, fail open", rl.GetDomain(), rl.GetFailureModeDeny())
	}
	lim := startLimiter(t, "--policies", llmPolicies)
	conn, err := grpc.NewClient(lim.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rls := rlsv3.NewRateLimitServiceClient(conn)
	send := func(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := rls.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// start sends a stream's start, and keeps the answer's dynamic
	// metadata as Envoy does.
	start := func(s llmStream) *rlsv3.RateLimitResponse {
		t.Helper()
		req := rlsCall(t, rl, s, false)
		if req == nil || len(req.Descriptors) != 2 {
			t.Fatalf("the start of %v: %v, want the in-flight and the tokens descriptors", s.headers, req)
		}
		resp := send(req)
		s.metadata[ratelimitNamespace] = map[string]string{}
		for k, v := range resp.GetDynamicMetadata().GetFields() {
			s.metadata[ratelimitNamespace][k] = v.GetStringValue()
		}
		return resp
	}
	stream := func(key string, maxTokens int) llmStream {
		return llmStream{
			headers:  map[string]string{"x-api-key": key, "x-model": "gpt-x", "x-max-tokens": strconv.Itoa(maxTokens)},
			metadata: map[string]map[string]string{},
		}
	}

	// Four streams of one key, each reserving 8000 tokens: all start.
	var streams []llmStream
	for i := range 4 {
		s := stream("team-a", 8000)
		if resp := start(s); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || s.metadata[ratelimitNamespace]["sluice_lease"] == "" {
			t.Fatalf("stream %d start: %v, want OK with a lease in the dynamic metadata", i, resp)
		}
		streams = append(streams, s)
	}
	// A fifth is one too many in flight: denied, no lease, and so no
	// stream-done call.
	fifth := stream("team-a", 8000)
	resp := start(fifth)
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || resp.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT ||
		fifth.metadata[ratelimitNamespace]["sluice_lease"] != "" {
		t.Fatalf("fifth start: %v, want over limit on llm-in-flight, no lease", resp)
	}
	if req := rlsCall(t, rl, fifth, true); req != nil {
		t.Fatalf("a denied stream's end sends %v, want no call", req)
	}
	if !hasHeader(resp, "RateLimit-Policy", `"ai/llm-in-flight";q=4;qu="concurrent-requests"`) {
		t.Fatalf("fifth start headers %v: want the concurrent-requests quota", resp.GetResponseHeadersToAdd())
	}

	// The first stream ends after 1200 tokens: its slot is released and
	// 6800 tokens come back.
	streams[0].metadata["io.envoy.ai_gateway"] = map[string]string{"llm_total_token": "1200"}
	done := rlsCall(t, rl, streams[0], true)
	if done == nil || len(done.Descriptors) != 1 {
		t.Fatalf("stream-done call %v: want one descriptor", done)
	}
	beforeEnd := time.Now()
	resp = send(done)
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetResponseHeadersToAdd()) != 0 {
		t.Fatalf("stream-done answer %v: want OK, no headers", resp)
	}
	// 100000 - 4×8000 + 6800 = 74800, plus what refilled since the first
	// start (100000 a minute).
	elapsed := time.Since(beforeEnd) + 10*time.Second
	if got := tokensLeft(t, lim, "team-a"); got < 74800 || got > 74800+int64(elapsed.Seconds()*100000/60) {
		t.Fatalf("tokens left after the settlement: %d, want 74800 and what refilled since", got)
	}
	// The slot is free: the fifth starts now.
	if resp := start(fifth); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("fifth start after a stream ended: %v", resp)
	}
	// The same stream-done call again changes nothing (and Envoy does not
	// care: the call is fire-and-forget).
	if resp := send(done); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a repeated stream-done call: %v", resp)
	}
	if resp := start(stream("team-a", 8000)); resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a sixth start with four in flight: %v, want over limit", resp)
	}
}

// tokensLeft peeks at llm-tokens of key over HTTP (/v1/ratelimit/status).
func tokensLeft(t *testing.T, lim *process, key string) int64 {
	t.Helper()
	resp, err := http.Get(lim.http + "/v1/ratelimit/status?domain=llm&api_key=" + key + "&model=gpt-x")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Policies []struct {
			Policy    string `json:"policy"`
			Remaining int64  `json:"remaining"`
		} `json:"policies"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Policies {
		if p.Policy == "ai/llm-tokens" {
			return p.Remaining
		}
	}
	t.Fatalf("no ai/llm-tokens in %+v", st)
	return 0
}

func hasHeader(resp *rlsv3.RateLimitResponse, name, value string) bool {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == name && h.GetValue() == value {
			return true
		}
	}
	return false
}

// TestLLMEnvoySampleTypos shows that a typo in the LLM sample fails.
func TestLLMEnvoySampleTypos(t *testing.T) {
	data := string(readSample(t, llmSample))
	for _, tc := range []struct{ old, new, want string }{
		{"apply_on_stream_done: true", "apply_on_stream_don: true", `unknown field "apply_on_stream_don"`},
		{"source: DYNAMIC", "source: DYNAMO", `invalid value for enum field source: "DYNAMO"`},
		{"format: \"%REQ(x-max-tokens)%\"", "number: -1", "invalid value for uint64"},
		{"descriptor_key: sluice_lease", "descriptor_key: \"\"", "DescriptorKey: value length must be at least 1 runes"},
	} {
		t.Run(tc.new, func(t *testing.T) {
			if !strings.Contains(data, tc.old) {
				t.Fatalf("%s no longer holds %q", llmSample, tc.old)
			}
			_, err := loadLLMSample([]byte(strings.Replace(data, tc.old, tc.new, 1)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("with %q: got %v, want an error containing %q", tc.new, err, tc.want)
			}
		})
	}
}
