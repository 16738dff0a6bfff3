package server_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/memory"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

var update = flag.Bool("update", false, "rewrite testdata/golden.txt from the answers")

const goldenFile = "testdata/golden.txt"

// goldenEnv is a limiter serving testdata/golden.yaml over both protocols,
// with Retry-After jitter off so that every answer is reproducible.
type goldenEnv struct {
	svc  *service.Service
	http string // host:port
	rls  rlsv3.RateLimitServiceClient
}

func startGolden(t *testing.T, st store.Store, snap *config.Snapshot) *goldenEnv {
	t.Helper()
	svc := newService(t, st, service.Options{Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)})
	srv, err := server.New(svc, server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler),
		RetryAfterJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv.Swap(snap)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &goldenEnv{svc: svc, http: srv.HTTPAddr(), rls: rlsv3.NewRateLimitServiceClient(conn)}
}

// goldenStep is one request, over RLS (rls) or HTTP (method, path, ...).
type goldenStep struct {
	name   string
	down   bool             // on the limiter whose Redis is down
	before func(*goldenEnv) // runs first, e.g. to turn the kill switch
	rls    *rlsv3.RateLimitRequest
	method string
	path   string
	header []string // name, value, name, value, ...
	body   string
}

func rlsReq(domain string, hits uint32, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits}
}

func rlsDesc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func goldenSteps() []goldenStep {
	peek := rlsDesc("key", "k")
	peek.HitsAddend = wrapperspb.UInt64(0)
	override := rlsDesc("user_id", "x")
	override.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	check := func(body string, header ...string) goldenStep {
		return goldenStep{method: "POST", path: server.CheckPath, body: body, header: append([]string{"Content-Type", "application/json"}, header...)}
	}
	named := func(name string, s goldenStep) goldenStep { s.name = name; return s }
	return []goldenStep{
		{name: "rls allowed", rls: rlsReq("pay", 0, rlsDesc("user_id", "ann"))},
		{name: "rls two descriptors, one unmatched", rls: rlsReq("pay", 0, rlsDesc("user_id", "ann", "path", "/v1/charges"), rlsDesc("account", "a1", "path", "/v1/charges"), rlsDesc("nothing", "x"))},
		{name: "rls over limit", rls: rlsReq("pay", 0, rlsDesc("user_id", "ann"))},
		{name: "rls over limit and allowed descriptors", rls: rlsReq("pay", 0, rlsDesc("key", "k"), rlsDesc("user_id", "ann"))},
		{name: "rls shadow allowed", rls: rlsReq("pay", 0, rlsDesc("ip", "10.0.0.1"))},
		{name: "rls shadow would deny", rls: rlsReq("pay", 0, rlsDesc("ip", "10.0.0.1"))},
		{name: "rls shadow beside enforcing", rls: rlsReq("pay", 0, rlsDesc("ip", "10.0.0.1"), rlsDesc("user_id", "bea"))},
		{name: "rls burst above limit, hits 3", rls: rlsReq("pay", 3, rlsDesc("key", "k2"))},
		{name: "rls descriptor peek", rls: rlsReq("pay", 7, peek)},
		{name: "rls unknown domain", rls: rlsReq("nope", 0, rlsDesc("user_id", "ann"))},
		{name: "rls idempotency entry, first", rls: rlsReq("pay", 0, rlsDesc("user_id", "cy", "idempotency_key", "k1"))},
		{name: "rls idempotency entry, replay", rls: rlsReq("pay", 0, rlsDesc("user_id", "cy", "idempotency_key", "k1"))},
		{name: "rls kill switch", before: func(e *goldenEnv) { e.svc.SetEnforcement(false) }, rls: rlsReq("pay", 0, rlsDesc("user_id", "ann"))},
		{name: "rls kill switch off again", before: func(e *goldenEnv) { e.svc.SetEnforcement(true) }, rls: rlsReq("pay", 0, rlsDesc("user_id", "ann"))},
		{name: "rls invalid: empty domain", rls: rlsReq("", 0, rlsDesc("user_id", "ann"))},
		{name: "rls unmatched: no entries", rls: rlsReq("pay", 0, &rlv3.RateLimitDescriptor{})},
		{name: "rls refused: empty idempotency entry", rls: rlsReq("pay", 0, rlsDesc("user_id", "ann", "idempotency_key", ""))},
		{name: "rls limit override on a policy that did not opt in: ignored", rls: rlsReq("pay", 0, override)},
		{name: "rls refused: hits", rls: rlsReq("pay", 2_000_000, rlsDesc("user_id", "ann"))},

		named("http allowed", check(`{"domain":"pay","descriptors":[{"entries":[{"key":"user_id","value":"dee"}]}]}`)),
		named("http idempotency key, first", check(`{"domain":"pay","descriptors":[{"entries":[{"key":"user_id","value":"dee"}]}]}`, "Idempotency-Key", "order-1")),
		named("http idempotency key, replay", check(`{"domain":"pay","descriptors":[{"entries":[{"key":"user_id","value":"dee"}]}]}`, "Idempotency-Key", "order-1")),
		named("http over limit", check(`{"domain":"pay","descriptors":[{"entries":[{"key":"user_id","value":"dee"}]}]}`)),
		named("http shadow would deny", check(`{"domain":"pay","descriptors":[{"entries":[{"key":"ip","value":"10.0.0.1"}]}]}`)),
		named("http hitsAddend, 90s window", check(`{"domain":"pay","hitsAddend":2,"descriptors":[{"entries":[{"key":"account","value":"a2"},{"key":"path","value":"/v1/charges"}]}]}`)),
		named("http unknown domain", check(`{"domain":"nope","descriptors":[{"entries":[{"key":"user_id","value":"dee"}]}]}`)),
		named("http invalid: empty domain", check(`{"domain":"","descriptors":[{"entries":[{"key":"user_id","value":"dee"}]}]}`)),
		named("http refused: long idempotency key", check(`{"domain":"pay","descriptors":[{"entries":[{"key":"user_id","value":"dee"}]}]}`, "Idempotency-Key", strings.Repeat("k", 257))),
		named("http invalid: malformed", check(`{"domain":`)),
		named("http refused: negative hits", check(`{"domain":"pay","descriptors":[{"entries":[{"key":"user_id","value":"dee"}],"isNegativeHits":true}]}`)),
		{name: "http status peek", method: "GET", path: server.StatusPath + "?domain=pay&user_id=dee&account=a2&path=/v1/charges"},
		{name: "http status peek invalid", method: "GET", path: server.StatusPath + "?domain=pay&user_id=" + strings.Repeat("v", 1025)},
		{name: "http forward-auth allowed", method: "GET", path: server.ForwardAuthPath + "pay", header: []string{"X-User", "fay"}},
		{name: "http forward-auth again", method: "GET", path: server.ForwardAuthPath + "pay", header: []string{"X-User", "fay"}},
		{name: "http forward-auth denied", method: "GET", path: server.ForwardAuthPath + "pay", header: []string{"X-User", "fay"}},
		{name: "http forward-auth missing", method: "GET", path: server.ForwardAuthPath + "pay"},

		{name: "rls failure mode Open", down: true, rls: rlsReq("modes", 0, rlsDesc("open", "x"))},
		{name: "rls failure mode Closed", down: true, rls: rlsReq("modes", 0, rlsDesc("closed", "x"))},
		{name: "rls failure mode Local", down: true, rls: rlsReq("modes", 0, rlsDesc("local", "x"))},
		{name: "rls cost beyond the capacity, the default maxCost", down: true, rls: rlsReq("modes", 3, rlsDesc("local", "y"))},
		{name: "rls failure modes together", down: true, rls: rlsReq("modes", 0, rlsDesc("open", "x"), rlsDesc("closed", "x"))},
		named("http failure mode Closed", goldenStep{down: true, method: "POST", path: server.CheckPath,
			body: `{"domain":"modes","descriptors":[{"entries":[{"key":"closed","value":"y"}]}]}`}),
		named("http failure mode Open", goldenStep{down: true, method: "POST", path: server.CheckPath,
			body: `{"domain":"modes","descriptors":[{"entries":[{"key":"open","value":"y"}]}]}`}),

		// What clients are told: problem details.
		named("http over limit, problem details", check(`{"domain":"pay","descriptors":[{"entries":[{"key":"user_id","value":"dee"}]}]}`,
			"Accept", "application/json, application/problem+json")),
		{name: "rls over limit, problem details", rls: rlsReq("pay", 0, rlsDesc("user_id", "ann", "accept", "application/problem+json"))},
		{name: "http forward-auth denied, problem details", method: "GET", path: server.ForwardAuthPath + "pay",
			header: []string{"X-User", "fay", "Accept", "application/problem+json"}},

		// Hidden limits.
		{name: "rls hidden allowed", rls: rlsReq("pay", 0, rlsDesc("session", "s1"))},
		{name: "rls hidden denied", rls: rlsReq("pay", 0, rlsDesc("session", "s1"))},
		named("http hidden denied, problem details", check(`{"domain":"pay","descriptors":[{"entries":[{"key":"session","value":"s1"}]}]}`,
			"Accept", "application/problem+json")),
		{name: "rls hidden denied beside an allowed visible policy", rls: rlsReq("pay", 0, rlsDesc("session", "s1", "key", "k3"))},
		{name: "http status peek, hidden", method: "GET", path: server.StatusPath + "?domain=pay&session=s1"},
		{name: "rls failure mode Closed, hidden", down: true, rls: rlsReq("modes", 0, rlsDesc("closed_hidden", "x"))},

		// Soft limits.
		{name: "rls under a soft limit", rls: rlsReq("pay", 0, rlsDesc("tenant", "t1"))},
		{name: "rls over a soft limit", rls: rlsReq("pay", 0, rlsDesc("tenant", "t1"))},
		named("http over a soft limit", check(`{"domain":"pay","descriptors":[{"entries":[{"key":"tenant","value":"t1"}]}]}`)),
		named("http over a soft limit and the hard one", check(`{"domain":"pay","descriptors":[{"entries":[{"key":"tenant","value":"t1"}]}]}`)),
		{name: "http status peek, soft", method: "GET", path: server.StatusPath + "?domain=pay&tenant=t1"},
	}
}

// TestGoldenAnswers holds the wire answers of both protocols to
// testdata/golden.txt, byte for byte: RLS responses as their deterministic
// protobuf encoding (and JSON to read), HTTP responses as sent, but for
// the Date header, and the body's length and JSON whitespace, which
// protobuf-go varies from one binary to the next. The counters run on a
// memory store with a stopped clock, and on a Redis that is down for the
// failure modes. -update rewrites the file. The answers are the same
// with a request's descriptors decided concurrently (gathered: the memory
// store made a store.Gatherer, as the Redis store is).
func TestGoldenAnswers(t *testing.T) {
	for _, gathered := range []bool{false, true} {
		t.Run(fmt.Sprintf("gathered=%v", gathered), func(t *testing.T) { testGoldenAnswers(t, gathered) })
	}
}

// gatheringMemory is a memory store that says it gathers a request's
// calls: the service decides its descriptors concurrently.
type gatheringMemory struct{ *memory.Store }

func (gatheringMemory) GathersCalls() {}

func testGoldenAnswers(t *testing.T, gathered bool) {
	snap, err := config.LoadFile("testdata/golden.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clock := storetest.NewClock()
	m := memory.New(memory.Options{Clock: clock.Now, SweepInterval: -1})
	t.Cleanup(func() { _ = m.Close() })
	var st store.Store = m
	if gathered {
		st = gatheringMemory{m}
	}
	up := startGolden(t, st, snap)

	rs := redistest.Start(t)
	down, err := redisstore.New(redisstore.Options{Addrs: []string{rs.Addr}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = down.Close() })
	rs.Stop()
	broken := startGolden(t, down, snap)

	var out bytes.Buffer
	for _, s := range goldenSteps() {
		e := up
		if s.down {
			e = broken
		}
		if s.before != nil {
			s.before(e)
		}
		fmt.Fprintf(&out, "== %s\n", s.name)
		if s.rls != nil {
			out.WriteString(rlsAnswer(t, e, s.rls))
		} else {
			out.WriteString(httpAnswer(t, e, s))
		}
	}
	if *update && !gathered {
		if err := os.WriteFile(goldenFile, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != string(want) {
		gotLines, wantLines := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gotLines), len(wantLines)) {
			var g, w string
			if i < len(gotLines) {
				g = gotLines[i]
			}
			if i < len(wantLines) {
				w = wantLines[i]
			}
			if g != w {
				t.Fatalf("answers differ from %s at line %d:\n got: %s\nwant: %s\n(go test -run TestGoldenAnswers -update rewrites it)", goldenFile, i+1, g, w)
			}
		}
	}
}

// rlsAnswer is a call's gRPC status, and the response's deterministic wire
// encoding and JSON.
func rlsAnswer(t *testing.T, e *goldenEnv, req *rlsv3.RateLimitRequest) string {
	t.Helper()
	resp, err := e.rls.ShouldRateLimit(ctxT(t), req)
	if err != nil {
		st := status.Convert(err)
		return fmt.Sprintf("grpc %s: %s\n", st.Code(), st.Message())
	}
	wire, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	js, err := protojson.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("grpc OK\nwire %s\njson %s\n", base64.StdEncoding.EncodeToString(wire), compactJSON(t, js))
}

// httpAnswer sends the step's request on its own connection and returns the
// response as it came, less the Date and Content-Length headers, with the
// JSON body compacted.
func httpAnswer(t *testing.T, e *goldenEnv, s goldenStep) string {
	t.Helper()
	conn, err := net.Dial("tcp", e.http)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var req strings.Builder
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: limiter\r\nConnection: close\r\n", s.method, s.path)
	for i := 0; i < len(s.header); i += 2 {
		fmt.Fprintf(&req, "%s: %s\r\n", s.header[i], s.header[i+1])
	}
	if s.body != "" {
		fmt.Fprintf(&req, "Content-Length: %d\r\n", len(s.body))
	}
	req.WriteString("\r\n" + s.body)
	if _, err := io.WriteString(conn, req.String()); err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	head, body, ok := strings.Cut(string(raw), "\r\n\r\n")
	if !ok {
		t.Fatalf("%s: no end of headers in %q", s.name, raw)
	}
	var b strings.Builder
	for _, line := range strings.Split(head, "\r\n") {
		if strings.HasPrefix(line, "Date: ") || strings.HasPrefix(line, "Content-Length: ") {
			continue
		}
		b.WriteString(line + "\n")
	}
	nl := ""
	if strings.HasSuffix(body, "\n") {
		nl = " (newline)"
	}
	fmt.Fprintf(&b, "body%s %s\n", nl, compactJSON(t, []byte(body)))
	return b.String()
}

func compactJSON(t *testing.T, js []byte) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, js); err != nil {
		t.Fatalf("%q: %v", js, err)
	}
	return b.String()
}
