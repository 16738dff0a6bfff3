package service_test

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// memoryAndRedis are a memory store and a real Redis: the seams between
// features hold on both.
func memoryAndRedis() map[string]func(t *testing.T) store.Store {
	return map[string]func(t *testing.T) store.Store{
		"memory": func(t *testing.T) store.Store { return memoryStore(t) },
		"redis": func(t *testing.T) store.Store {
			srv := redistest.Start(t)
			st, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st
		},
	}
}

// leaseSkipPolicies: a domain with a holding policy (its lease entry is
// sluice_lease) beside a hidden limit on the same key.
const leaseSkipPolicies = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: inflight, namespace: llm}
spec:
  domain: llm
  descriptors: [{key: api_key}, {key: model}]
  algorithm: Concurrency
  concurrency: {maxInFlight: 2, leaseDuration: 1m}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: hourly, namespace: llm}
spec:
  domain: llm
  descriptors: [{key: api_key}]
  algorithm: FixedWindow
  rate: {limit: 2, period: 1h}
  visibility: Hidden
`

// The attack: a client adds the holding policy's lease entry, with any
// well-formed 22-character value, to its descriptor. It must end only
// holdings (there are none to end) and every other policy must still
// decide: the hidden hourly limit denies the third request.
func TestAttackLeaseEntrySkipsOtherPolicies(t *testing.T) {
	for name, newStore := range memoryAndRedis() {
		t.Run(name, func(t *testing.T) {
			svc := lifetimeService(t, newStore(t), leaseSkipPolicies)
			for i := range 4 {
				d := desc("api_key", "mallory", "model", "m1", "sluice_lease", "AAAAAAAAAAAAAAAAAAAAA"+string(rune('A'+i)))
				r := call(t, svc, "llm", 1, d)
				if want := i >= 2; r.OverLimit != want {
					t.Fatalf("request %d with a made-up lease entry: over limit %v, want %v (the hidden limit of 2 an hour must decide it)", i+1, r.OverLimit, want)
				}
				if len(r.Endings) != 1 || r.Endings[0].Found {
					t.Fatalf("request %d: endings %s, want llm/inflight=not-held", i+1, outcomes(r.Endings))
				}
			}
			// The key's own requests are denied too: the made-up leases spent
			// its hourly limit, as any of its requests would.
			if r := call(t, svc, "llm", 1, desc("api_key", "mallory", "model", "m1")); !r.OverLimit {
				t.Fatalf("a plain request after the hourly limit was spent: %+v, want over limit", r)
			}
		})
	}
}

// zeroReservePolicies: 1000 tokens a minute per API key, reserved at the
// check and settled at the end.
const zeroReservePolicies = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: tokens, namespace: llm}
spec:
  domain: llm
  descriptors: [{key: api_key}]
  algorithm: TokenBucket
  rate: {limit: 1000, period: 1h}
  reserve: {expireAfter: 5m}
`

// The attack: x-max-tokens: 0. A check that reserves an estimate of 0
// must still take a holding that its end settles at the actual cost;
// otherwise the tokens it spends are never charged and the key buys
// unlimited tokens.
func TestAttackZeroReservationIsNeverCharged(t *testing.T) {
	for name, newStore := range memoryAndRedis() {
		t.Run(name, func(t *testing.T) {
			svc := lifetimeService(t, newStore(t), zeroReservePolicies)
			d := desc("api_key", "mallory")
			d.HitsAddend, d.HasHitsAddend = 0, true
			for i := range 2 {
				r := call(t, svc, "llm", 0, d)
				if r.OverLimit || r.Lease == "" {
					t.Fatalf("check %d reserving 0: over limit %v, lease %q; want admitted with a lease to settle", i+1, r.OverLimit, r.Lease)
				}
				es := end(t, svc, r.Lease, 600, desc("api_key", "mallory"))
				if len(es) != 1 || !es[0].Found || es[0].Cost != 600 {
					t.Fatalf("settling check %d at 600: %+v, want the reservation found and settled at 600", i+1, es)
				}
			}
			// 1200 tokens spent of 1000: the bucket owes 200, and admits
			// nothing, an estimate of 0 included, until it has refilled.
			if got := left(t, svc, "llm/tokens", desc("api_key", "mallory")); got != 0 {
				t.Fatalf("tokens left %d after 1200 spent, want 0", got)
			}
			if r := call(t, svc, "llm", 0, d); !r.OverLimit || r.Lease != "" {
				t.Fatalf("a third check reserving 0 with the bucket in debt: over limit %v, lease %q; want denied, holding nothing", r.OverLimit, r.Lease)
			}
		})
	}
}
