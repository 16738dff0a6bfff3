package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store"
)

func postWithKey(t *testing.T, e *env, body string, keys ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, e.http+server.CheckPath, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		req.Header.Add("Idempotency-Key", k)
	}
	return do(t, req)
}

// An HTTP check with an Idempotency-Key: retries replay the first decision
// (Idempotent-Replayed: true) and consume nothing, up to the bound of
// replays.
func TestHTTPIdempotencyKey(t *testing.T) {
	e := start(t, envOptions{})
	for i := range 1 + store.DefaultIdempotencyMaxReplays {
		resp, body := postWithKey(t, e, chargeBody("ida"), "order-7")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-RateLimit-Remaining") != "4" {
			t.Fatalf("request %d: %d %s remaining %q", i, resp.StatusCode, body, resp.Header.Get("X-RateLimit-Remaining"))
		}
		if got := resp.Header.Get("Idempotent-Replayed"); (i > 0) != (got == "true") {
			t.Fatalf("request %d: Idempotent-Replayed %q", i, got)
		}
	}
	resp, _ := post(t, e.http, "", chargeBody("ida"))
	if got := resp.Header.Get("X-RateLimit-Remaining"); got != "3" {
		t.Fatalf("a request without the key after retries with it: remaining %q, want 3", got)
	}
}

// Bad Idempotency-Key headers are refused: 429 with a clear reason.
func TestHTTPBadIdempotencyKey(t *testing.T) {
	e := start(t, envOptions{})
	for _, tc := range []struct {
		keys []string
		want string
	}{
		{[]string{strings.Repeat("x", 257)}, "Idempotency-Key header: idempotency key is 257 bytes long, the maximum is 256"},
		{[]string{""}, "Idempotency-Key header is empty: send a key, or leave the header out"},
		{[]string{"a", "b"}, "2 Idempotency-Key headers: send one"},
	} {
		resp, body := postWithKey(t, e, chargeBody("bea"), tc.keys...)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(server.HeaderReason) != tc.want {
			t.Errorf("keys %q: %d %s, want 429 refused: %s", tc.keys, resp.StatusCode, body, tc.want)
		}
	}
	if got := decisions(t, e.reg, "") - decisions(t, e.reg, service.ResultRefused); got != 0 {
		t.Errorf("%v decisions made for rejected requests", got)
	}
}
