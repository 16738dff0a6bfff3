package server_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

const benchPolicies = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: LimiterFleet
metadata: {name: bench}
spec:
  forwardAuth:
    - domain: bench
      descriptors:
        - {key: api_key, from: Header, header: X-Api-Key}
        - {key: remote_address, from: ClientIP}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-key, namespace: bench}
spec:
  domain: bench
  descriptors: [{key: api_key}]
  rate: {limit: 1000000000, period: 1h}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-client, namespace: bench}
spec:
  domain: bench
  descriptors: [{key: remote_address}]
  rate: {limit: 1000000000, period: 1h}
`

// BenchmarkGatewayHandlers compares, on one handler and a memory store,
// the three ways an HTTP caller asks: the JSON check, forward-auth (headers
// to descriptors) and the status peek (cost 0). 1,000 keys, never denied.
//
//	go test ./limiter/server -run '^$' -bench GatewayHandlers -benchmem
func BenchmarkGatewayHandlers(b *testing.B) {
	snap, err := config.Parse("bench", []byte(benchPolicies))
	if err != nil {
		b.Fatal(err)
	}
	st := memory.New(memory.Options{})
	defer st.Close()
	svc := newService(b, st, service.Options{Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)})
	srv, err := server.New(svc, server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler),
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	if err != nil {
		b.Fatal(err)
	}
	srv.Swap(snap)
	h := srv.Handler()
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	run := func(b *testing.B, req func(i int) *http.Request) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req(i))
			if w.Code != http.StatusOK {
				b.Fatalf("%d %s", w.Code, w.Body)
			}
		}
	}
	b.Run("check", func(b *testing.B) {
		run(b, func(i int) *http.Request {
			body := `{"domain":"bench","descriptors":[{"entries":[{"key":"api_key","value":"` + keys[i%len(keys)] +
				`"},{"key":"remote_address","value":"198.51.100.7"}]}]}`
			return httptest.NewRequest(http.MethodPost, server.CheckPath, strings.NewReader(body))
		})
	})
	b.Run("forward-auth", func(b *testing.B) {
		run(b, func(i int) *http.Request {
			r := httptest.NewRequest(http.MethodGet, server.ForwardAuthPath+"bench", nil)
			r.RemoteAddr = "127.0.0.1:40000"
			r.Header.Set("X-Api-Key", keys[i%len(keys)])
			r.Header.Set("X-Forwarded-For", "198.51.100.7")
			return r
		})
	})
	b.Run("status", func(b *testing.B) {
		run(b, func(i int) *http.Request {
			return httptest.NewRequest(http.MethodGet, server.StatusPath+"?domain=bench&remote_address=198.51.100.7&api_key="+keys[i%len(keys)], nil)
		})
	})
}
