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
