package service_test

import (
	"context"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/memory"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
	"github.com/sluice-dev/sluice/limiter/store/redis/redistest"
)

// Two domains with the same descriptor key, for keys that must not collide
// across domains.
const twoDomains = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: orders, namespace: a}
spec:
  domain: orders
  descriptors: [{key: user}]
  algorithm: FixedWindow
  rate: {limit: 5, period: 1h}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: refunds, namespace: b}
spec:
  domain: refunds
  descriptors: [{key: user}]
  algorithm: FixedWindow
  rate: {limit: 5, period: 1h}
`

func idemService(t *testing.T, st store.Store, ttl time.Duration) *service.Service {
	t.Helper()
	if st == nil {
		m := memory.New(memory.Options{})
		t.Cleanup(func() { _ = m.Close() })
		st = m
	}
	svc := service.New(st, service.Options{Registerer: prometheus.NewRegistry(), RetryAfterJitter: -1, IdempotencyTTL: ttl})
	t.Cleanup(func() { _ = svc.Close() })
	snap, err := config.Parse("inline", []byte(twoDomains))
	if err != nil {
		t.Fatal(err)
	}
	svc.Swap(snap)
	return svc
}

func decideKey(t *testing.T, svc *service.Service, domain, user, key string) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := svc.Decide(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{desc("user", user)}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func remaining(r *rlsv3.RateLimitResponse) uint32 { return r.Statuses[0].LimitRemaining }

// 1,000 retries of one key cost one unit, on the memory store and on real
// Redis (where the record is kept by the decision's own script).
func TestThousandRetriesCostOneUnit(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	for name, st := range map[string]store.Store{"memory": nil, "redis": rs} {
		t.Run(name, func(t *testing.T) {
			svc := idemService(t, st, 0)
			first := decideKey(t, svc, "orders", "ann", "charge-1")
			if first.OverallCode != rlsv3.RateLimitResponse_OK || remaining(first) != 4 || header(first, "Idempotent-Replayed") != "" {
				t.Fatalf("first: %v", first)
			}
			for i := range 1000 {
				r := decideKey(t, svc, "orders", "ann", "charge-1")
				if r.OverallCode != rlsv3.RateLimitResponse_OK || remaining(r) != 4 || header(r, "Idempotent-Replayed") != "true" {
					t.Fatalf("retry %d: %v", i, r)
				}
			}
			if r := decideKey(t, svc, "orders", "ann", ""); remaining(r) != 3 {
				t.Fatalf("a new request after 1,000 retries: %d remaining, want 3", remaining(r))
			}
			// Over RLS the key is a descriptor entry, left out of matching
			// and of the counter: it spends ann's units.
			withEntry := desc("user", "ann", "idempotency_key", "charge-2")
			for i := range 3 {
				r := call(t, svc, "orders", 0, withEntry)
				if r.OverallCode != rlsv3.RateLimitResponse_OK || remaining(r) != 2 || (i > 0) != (header(r, "Idempotent-Replayed") == "true") {
					t.Fatalf("RLS entry, request %d: %v", i, r)
				}
			}
		})
	}
}

// The same key from two domains (or users) does not collide: each is a
// first request.
func TestIdempotencyKeysAreScoped(t *testing.T) {
	svc := idemService(t, nil, 0)
	for _, tc := range []struct{ domain, user string }{{"orders", "bo"}, {"refunds", "bo"}, {"orders", "cy"}} {
		r := decideKey(t, svc, tc.domain, tc.user, "same-key")
		if remaining(r) != 4 || header(r, "Idempotent-Replayed") != "" {
			t.Errorf("%s/%s with a key used elsewhere: %v", tc.domain, tc.user, r)
		}
	}
}

// A record expires after its TTL: the retry is then decided again.
func TestIdempotencyRecordExpires(t *testing.T) {
	svc := idemService(t, nil, 300*time.Millisecond)
	decideKey(t, svc, "orders", "di", "k")
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := decideKey(t, svc, "orders", "di", "k")
		if header(r, "Idempotent-Replayed") == "" {
			if remaining(r) != 3 {
				t.Fatalf("after expiry: %d remaining, want 3", remaining(r))
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the idempotency record did not expire within 10s of a 300ms TTL")
		}
		time.Sleep(20 * time.Millisecond) // polling the record's expiry
	}
}

// Bad idempotency keys are rejected with a clear error.
func TestBadIdempotencyKeys(t *testing.T) {
	svc := idemService(t, nil, 0)
	long := strings.Repeat("k", 257)
	if _, err := svc.Decide(context.Background(), &rlsv3.RateLimitRequest{Domain: "orders", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "ed")}}, long); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "Idempotency-Key: idempotency key is 257 bytes long, the maximum is 256") {
		t.Errorf("257-byte key: %v", err)
	}
	if _, err := svc.Decide(context.Background(), &rlsv3.RateLimitRequest{Domain: "orders", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "ed")}}, long[:256]); err != nil {
		t.Errorf("256-byte key: %v", err)
	}
	for _, tc := range []struct {
		d    *rlv3.RateLimitDescriptor
		want string
	}{
		{desc("user", "ed", "idempotency_key", long), "descriptors[0].entries[1] (idempotency_key): idempotency key is 257 bytes long, the maximum is 256"},
		{desc("user", "ed", "idempotency_key", ""), "descriptors[0].entries[1] (idempotency_key) is empty"},
		{desc("idempotency_key", "a", "user", "ed", "idempotency_key", "b"), "descriptors[0] has more than one idempotency_key entry"},
	} {
		_, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "orders", Descriptors: []*rlv3.RateLimitDescriptor{tc.d}})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want InvalidArgument %q", tc.d, err, tc.want)
		}
	}
}
