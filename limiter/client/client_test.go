package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/limiter/client"
)

func newClient(t *testing.T, url string, mode client.FailureMode) *client.Client {
	t.Helper()
	c, err := client.New(url, client.Options{FailureMode: mode, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// llmRequest is a request of key: a slot of llm/inflight, and estimate
// tokens of llm/tokens.
func llmRequest(key string, estimate uint64) client.Request {
	return client.Request{Domain: "llm", Descriptors: []client.Descriptor{{
		Entries: []client.Entry{{Key: "api_key", Value: key}, {Key: "model", Value: "m1"}}, Cost: estimate}}}
}

// The middleware holds a slot while the handler runs: with 2 in flight a
// third request is answered 429 with the headers; when one ends, its slot
// and the tokens it did not use come back.
func TestMiddleware(t *testing.T) {
	c := newClient(t, limiterURL, "")
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		client.SetCost(r.Context(), 100)
		_, _ = io.WriteString(w, "done")
	})
	endErrs := make(chan error, 4)
	srv := httptest.NewServer(c.Middleware(func(r *http.Request) (client.Request, bool) {
		if r.URL.Path == "/free" {
			return client.Request{}, false
		}
		return llmRequest("mw-key", 300), true
	}, func(err error) { endErrs <- err })(h))
	defer srv.Close()

	type result struct {
		code   int
		header http.Header
	}
	results := make(chan result, 2)
	for range 2 {
		go func() {
			resp, err := http.Post(srv.URL+"/v1/chat", "application/json", nil)
			if err != nil {
				results <- result{}
				return
			}
			resp.Body.Close()
			results <- result{resp.StatusCode, resp.Header}
		}()
	}
	<-entered
	<-entered
	resp, err := http.Post(srv.URL+"/v1/chat", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("RateLimit-Policy") != `"llm/inflight";q=2;qu="concurrent-requests"` ||
		resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a third request in flight: %d %v, want 429 with the headers", resp.StatusCode, resp.Header)
	}
	close(release)
	for range 2 {
		if r := <-results; r.code != http.StatusOK || r.header.Get("X-RateLimit-Limit") == "" {
			t.Fatalf("an admitted request: %d %v", r.code, r.header)
		}
	}
	// A request the describer leaves out is served unchecked.
	if resp, err := http.Get(srv.URL + "/free"); err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("X-RateLimit-Limit") != "" {
		t.Fatalf("an unchecked request: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// Both ended: 2 slots free; each settled at 100 of its 300.
	d, err := c.Check(context.Background(), llmRequest("mw-key", 0))
	if err != nil || !d.Allowed {
		t.Fatalf("after both ended: %+v %v", d, err)
	}
	endings, err := d.Lease.Release(context.Background())
	if err != nil || endings[1].Remaining != 800-1 {
		t.Fatalf("tokens after two requests of 100 and a check of 1: %+v %v", endings, err)
	}
	select {
	case err := <-endErrs:
		t.Fatalf("ending a lease: %v", err)
	default:
	}
}

// blockingHealth is a gRPC service whose Check waits for release.
type blockingHealth struct {
	healthpb.UnimplementedHealthServer
	entered chan struct{}
	release chan struct{}
}

func (b *blockingHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	b.entered <- struct{}{}
	<-b.release
	client.SetCost(ctx, 10)
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// The interceptor, on a real gRPC server: RESOURCE_EXHAUSTED with the
// headers as metadata for the call over the limit, the lease ended when a
// call completes.
func TestUnaryServerInterceptor(t *testing.T) {
	c := newClient(t, limiterURL, "")
	svc := &blockingHealth{entered: make(chan struct{}, 4), release: make(chan struct{})}
	srv := grpc.NewServer(grpc.UnaryInterceptor(c.UnaryServerInterceptor(func(ctx context.Context, method string, _ any) (client.Request, bool) {
		return llmRequest("grpc-key", 50), method == "/grpc.health.v1.Health/Check"
	}, nil)))
	healthpb.RegisterHealthServer(srv, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)

	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
			errs <- err
		}()
	}
	<-svc.entered
	<-svc.entered
	var md metadata.MD
	_, err = hc.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "rate limited") ||
		md.Get("ratelimit-policy")[0] != `"llm/inflight";q=2;qu="concurrent-requests"` || len(md.Get("retry-after")) != 1 {
		t.Fatalf("a third call in flight: %v, metadata %v; want RESOURCE_EXHAUSTED with the headers", err, md)
	}
	close(svc.release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Both calls ended: their slots are free.
	go func() { <-svc.entered }()
	if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a call after both ended: %v", err)
	}
}

// When the limiter can't be reached the client follows the failure mode:
// the one it learned from the limiter's answers for that kind of request,
// else its own.
func TestFailureModes(t *testing.T) {
	ctx := context.Background()
	lim := startLimiter(t, "--store", "memory")
	open, closed := newClient(t, lim.http, client.FailOpen), newClient(t, lim.http, client.FailClosed)
	login := client.Request{Domain: "strict", Descriptors: []client.Descriptor{{Entries: []client.Entry{{Key: "user", Value: "u1"}}}}}
	chat := llmRequest("fm-key", 10)
	// The limiter answers: open learns that logins fail Closed, and chats
	// Open; closed learns nothing about logins.
	for _, tc := range []struct {
		c   *client.Client
		req client.Request
	}{{open, login}, {open, chat}, {closed, chat}} {
		d, err := tc.c.Check(ctx, tc.req)
		if err != nil || !d.Allowed || d.Unavailable {
			t.Fatalf("while the limiter runs: %+v %v", d, err)
		}
		if d.Lease != nil {
			if _, err := d.Lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	lim.stop()
	for _, tc := range []struct {
		name    string
		c       *client.Client
		req     client.Request
		allowed bool
	}{
		{"learned Closed beats the client's Open", open, login, false},
		{"learned Open", open, chat, true},
		{"learned Open beats the client's Closed", closed, chat, true},
		{"the client's Closed, nothing learned", closed, login, false},
		{"the client's Open, nothing learned", open, client.Request{Domain: "other", Descriptors: login.Descriptors}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := tc.c.Check(ctx, tc.req)
			if err != nil || !d.Unavailable || d.Allowed != tc.allowed || !errors.Is(d.Err, client.ErrUnavailable) || d.Lease != nil {
				t.Fatalf("got %+v %v, want unavailable, allowed %v, holding nothing", d, err, tc.allowed)
			}
			if !d.Allowed && (d.RetryAfter != time.Second || d.Header.Get("Retry-After") != "1") {
				t.Fatalf("a denial: %+v, want Retry-After 1", d)
			}
		})
	}
	// The middleware answers a failed-closed request 429, naming why.
	srv := httptest.NewServer(open.Middleware(func(*http.Request) (client.Request, bool) { return login, true }, nil)(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(resp.Header.Get("X-Sluice-Reason"), "limiter unavailable") {
		t.Fatalf("failed closed through the middleware: %d %v", resp.StatusCode, resp.Header)
	}
}

// Ends: twice is ErrNotHeld, sent nowhere; a bad cost is an *Error naming
// it, after which the lease can still be ended; a check that selects no
// policy is an *Error.
func TestEnds(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, limiterURL, "")
	d, err := c.Check(ctx, llmRequest("end-key", 100))
	if err != nil || d.Lease == nil || len(d.Lease.ID()) != 22 {
		t.Fatalf("check: %+v %v", d, err)
	}
	// Above maxCost, a settle charges the cap (1000).
	if endings, err := d.Lease.Settle(ctx, 5_000); err != nil || len(endings) != 2 || endings[1].Outcome != "settled" || endings[1].Cost == nil || *endings[1].Cost != 1000 {
		t.Fatalf("settle: %+v %v", endings, err)
	}
	if _, err := d.Lease.Release(ctx); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("a second end: %v, want ErrNotHeld", err)
	}
	var apiErr *client.Error
	_, err = c.Check(ctx, client.Request{Domain: "", Descriptors: []client.Descriptor{{Entries: []client.Entry{{Key: "api_key", Value: "k"}}}}})
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || !strings.Contains(apiErr.Message, "domain is empty") {
		t.Fatalf("an empty domain: %v", err)
	}
	if _, err := client.New("localhost:8080", client.Options{}); err == nil {
		t.Fatal("New took a URL without a scheme")
	}
	if _, err := client.New("http://x", client.Options{FailureMode: "Sometimes"}); err == nil {
		t.Fatal("New took an unknown failure mode")
	}
}

// A penalized key's denial comes with the policy's status (403 here, from
// spec.penalty): a Decision, not an *Error, and the middleware answers it
// with that status and the penalty's reason.
func TestPenalizedDenial(t *testing.T) {
	c := newClient(t, limiterURL, "")
	req := func(ip string) client.Request {
		return client.Request{Domain: "guarded", Descriptors: []client.Descriptor{{Entries: []client.Entry{{Key: "ip", Value: ip}}}}}
	}
	if d, err := c.Check(context.Background(), req("198.51.100.1")); err != nil || !d.Allowed || d.Status != 0 {
		t.Fatalf("the first: %+v %v, want allowed", d, err)
	}
	d, err := c.Check(context.Background(), req("198.51.100.1"))
	if err != nil || d.Allowed || d.Unavailable || d.Status != http.StatusForbidden || d.RetryAfter < 10*time.Minute ||
		d.Header.Get("X-Sluice-Reason") != "blocked for 10 minutes" {
		t.Fatalf("over the limit: %+v %v, want a 403 denial for 10 minutes with the penalty's reason", d, err)
	}
	srv := httptest.NewServer(c.Middleware(func(*http.Request) (client.Request, bool) { return req("198.51.100.1"), true }, nil)(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "served") })))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Sluice-Reason") != "blocked for 10 minutes" || strings.Contains(string(body), "served") {
		t.Fatalf("the middleware, penalized: %d %v %s, want 403 with the penalty's reason", resp.StatusCode, resp.Header, body)
	}
	// Another address is neither penalized nor limited.
	if d, err := c.Check(context.Background(), req("198.51.100.2")); err != nil || !d.Allowed {
		t.Fatalf("another address: %+v %v", d, err)
	}
}

// A cost above a policy's cap is a denial (Refused, with the reason), not
// an *Error that an application failing open on errors would let through;
// the middleware answers it 429 and does not serve it.
func TestAttackClientCostAboveCapIsADenial(t *testing.T) {
	c := newClient(t, limiterURL, "")
	d, err := c.Check(context.Background(), llmRequest("cap-key", 5_000))
	if err != nil || d.Allowed || !d.Refused || d.Status != http.StatusTooManyRequests || d.Lease != nil ||
		!strings.Contains(d.Header.Get("X-Sluice-Reason"), "costs 5000, above the maximum cost of 1000 of policy llm/tokens") {
		t.Fatalf("cost 5000: %+v %v, want a refused denial naming the cap", d, err)
	}
	srv := httptest.NewServer(c.Middleware(func(*http.Request) (client.Request, bool) { return llmRequest("cap-key", 5_000), true }, nil)(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "served") })))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || strings.Contains(string(body), "served") || resp.Header.Get("X-Sluice-Reason") == "" {
		t.Fatalf("the middleware: %d %v %s, want 429 with the reason", resp.StatusCode, resp.Header, body)
	}
}
