package service_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
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
		st = memoryStore(t)
	}
	svc := service.New(st, service.Options{Registerer: prometheus.NewRegistry(), IdempotencyTTL: ttl})
	snap, err := config.Parse("inline", []byte(twoDomains))
	if err != nil {
		t.Fatal(err)
	}
	svc.Swap(snap)
	return svc
}

func decideKey(t *testing.T, svc *service.Service, domain, user, key string) service.Response {
	t.Helper()
	resp, err := svc.Decide(context.Background(), &service.Request{Domain: domain, Descriptors: []service.Descriptor{desc("user", user)}, IdempotencyKey: key})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func remaining(r service.Response) int64 { return r.Decisions[0].Result.Remaining }

// Retries of one request cost one unit, up to the bound of replays, on the
// memory store and on real Redis (where the record is kept by the
// decision's own script); past the bound each is decided afresh.
func TestRetriesCostOneUnitUpToTheBound(t *testing.T) {
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
			if first.OverLimit || remaining(first) != 4 || first.Replayed {
				t.Fatalf("first: %+v", first)
			}
			for i := range store.DefaultIdempotencyMaxReplays {
				r := decideKey(t, svc, "orders", "ann", "charge-1")
				if r.OverLimit || remaining(r) != 4 || !r.Replayed {
					t.Fatalf("retry %d: %+v", i, r)
				}
			}
			if r := decideKey(t, svc, "orders", "ann", "charge-1"); r.Replayed || remaining(r) != 3 {
				t.Fatalf("a retry past %d replays: %+v, want decided afresh with 3 remaining", store.DefaultIdempotencyMaxReplays, r)
			}
			// Over RLS the key is a descriptor entry, left out of matching
			// and of the counter: it spends ann's units.
			withEntry := desc("user", "ann", "idempotency_key", "charge-2")
			for i := range 3 {
				r := call(t, svc, "orders", 0, withEntry)
				if r.OverLimit || remaining(r) != 2 || (i > 0) != r.Replayed {
					t.Fatalf("RLS entry, request %d: %+v", i, r)
				}
			}
		})
	}
}

// Attack (issue 16, 4): a client that reuses one Idempotency-Key gets
// unlimited requests for 24 hours, whatever it sends. Now a key replays
// only the request it was first sent with (domain, descriptor entries,
// cost), at most IdempotencyMaxReplays times: a different request with
// the key, or one replay too many, is decided afresh and spends units.
func TestAttackIdempotencyKeyReplaysWithoutEnd(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	for name, st := range map[string]store.Store{"memory": nil, "redis": rs} {
		t.Run(name, func(t *testing.T) {
			svc := idemService(t, st, 0)
			// One key, sent 100 times against a limit of 5 an hour.
			admitted := 0
			for range 100 {
				if r := decideKey(t, svc, "orders", "eve", "same-key"); !r.OverLimit {
					admitted++
				}
			}
			if want := 5 + store.DefaultIdempotencyMaxReplays; admitted != want {
				t.Errorf("one key sent 100 times: %d admitted, want %d (5 units and the first one's %d replays)",
					admitted, want, store.DefaultIdempotencyMaxReplays)
			}
			// A key replays only its own request: another cost, another
			// entry, another user are decided afresh.
			fresh := func(what string, req *service.Request) {
				t.Helper()
				r, err := svc.Decide(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				if r.Replayed {
					t.Errorf("%s with a used key: replayed %+v, want decided afresh", what, r)
				}
			}
			decideKey(t, svc, "orders", "fay", "k")
			fresh("a higher cost", &service.Request{Domain: "orders", HitsAddend: 3,
				Descriptors: []service.Descriptor{desc("user", "fay")}, IdempotencyKey: "k"})
			fresh("another entry", &service.Request{Domain: "orders",
				Descriptors: []service.Descriptor{desc("user", "fay", "path", "/refund")}, IdempotencyKey: "k"})
			if r := decideKey(t, svc, "orders", "fay", "k"); !r.Replayed || remaining(r) != 4 {
				t.Errorf("the first request again: %+v, want its decision replayed", r)
			}
			if r := decideKey(t, svc, "orders", "fay", ""); remaining(r) != 0 {
				t.Errorf("fay after three different requests: %d remaining, want 0 (1 + 3 + 1 spent)", remaining(r))
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
		if remaining(r) != 4 || r.Replayed {
			t.Errorf("%s/%s with a key used elsewhere: %+v", tc.domain, tc.user, r)
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
		if !r.Replayed {
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

// Bad idempotency keys are refused (denied) with a clear reason.
func TestBadIdempotencyKeys(t *testing.T) {
	svc := idemService(t, nil, 0)
	long := strings.Repeat("k", 257)
	withKey := func(k string) *service.Request {
		return &service.Request{Domain: "orders", Descriptors: []service.Descriptor{desc("user", "ed")}, IdempotencyKey: k}
	}
	if got := answer(svc.Decide(context.Background(), withKey(long))); got != "refused: Idempotency-Key: idempotency key is 257 bytes long, the maximum is 256" {
		t.Errorf("257-byte key: %s", got)
	}
	if _, err := svc.Decide(context.Background(), withKey(long[:256])); err != nil {
		t.Errorf("256-byte key: %v", err)
	}
	for _, tc := range []struct {
		d    service.Descriptor
		want string
	}{
		{desc("user", "ed", "idempotency_key", long), "descriptors[0].entries[1] (idempotency_key): idempotency key is 257 bytes long, the maximum is 256"},
		{desc("user", "ed", "idempotency_key", ""), "descriptors[0].entries[1] (idempotency_key) is empty"},
		{desc("idempotency_key", "a", "user", "ed", "idempotency_key", "b"), "descriptors[0] has more than one idempotency_key entry"},
	} {
		got := answer(svc.Decide(context.Background(), &service.Request{Domain: "orders", Descriptors: []service.Descriptor{tc.d}}))
		if !strings.HasPrefix(got, "refused: ") || !strings.Contains(got, tc.want) {
			t.Errorf("%v: %s, want refused %q", tc.d, got, tc.want)
		}
	}
}
