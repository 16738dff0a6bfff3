package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
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

// penaltyPolicy is a FixedWindow of 5 per account that bans the account
// for 30 days, with the penalty's settings in penalty. The window is 720h:
// a minute's could end between the requests that spend it and the denial
// a test expects.
func penaltyPolicy(penalty string) string {
	return `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: calls, namespace: api}
spec:
  domain: api
  descriptors: [{key: account}]
  algorithm: FixedWindow
  rate: {limit: 5, period: 720h}
  penalty: {duration: 720h` + penalty + `}
`
}

// penalized reports whether the account's next plain request is denied as
// penalized.
func penalized(t *testing.T, svc *service.Service, account string) bool {
	t.Helper()
	r := call(t, svc, "api", 1, desc("account", account))
	return r.OverLimit && r.Reported.Penalized
}

// The attack: a client that can name another account sends one request
// costing the whole limit while the account has used one unit. Its denial
// is for its size, not for the account's traffic: it must not strike, even
// with a penalty on the first strike.
func TestAttackPenaltyStrikeFromOversizedCost(t *testing.T) {
	for name, newStore := range memoryAndRedis() {
		t.Run(name, func(t *testing.T) {
			svc := lifetimeService(t, newStore(t), penaltyPolicy(", after: 1"))
			if r := call(t, svc, "api", 1, desc("account", "victim")); r.OverLimit {
				t.Fatalf("the victim's first request: %+v", r)
			}
			if r := call(t, svc, "api", 5, desc("account", "victim")); !r.OverLimit || r.Reported.Penalized {
				t.Fatalf("a request of cost 5 with 4 left: over limit %v, penalized %v; want denied, not penalized", r.OverLimit, r.Reported.Penalized)
			}
			if penalized(t, svc, "victim") {
				t.Fatal("the victim is banned for 30 days by one oversized request it never sent")
			}
			// The account's own traffic still strikes: 4 more units spend
			// the window (the one above included), the next is a strike.
			for range 3 {
				call(t, svc, "api", 1, desc("account", "victim"))
			}
			if !penalized(t, svc, "victim") {
				t.Fatal("a denial with nothing left did not strike")
			}
		})
	}
}

// The attack: a priority's share denies low-priority requests of a shared
// counter. Those denials are shedding, not abuse: they must never strike,
// or batch traffic bans the key for every priority.
func TestAttackPriorityShareDenialsStrike(t *testing.T) {
	const policy = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: shed, namespace: api}
spec:
  domain: api
  descriptors: [{key: account}]
  algorithm: FixedWindow
  rate: {limit: 10, period: 720h}
  priority:
    key: priority
    levels: [{value: critical, share: 100}, {value: batch, share: 50}]
    default: critical
  penalty: {duration: 720h, after: 2}
`
	for name, newStore := range memoryAndRedis() {
		t.Run(name, func(t *testing.T) {
			svc := lifetimeService(t, newStore(t), policy)
			batch := desc("account", "acme", "priority", "batch")
			for i := range 8 {
				r := call(t, svc, "api", 1, batch)
				if want := i >= 5; r.OverLimit != want || r.Reported.Penalized {
					t.Fatalf("batch request %d: over limit %v, penalized %v; want over limit %v (its share is 5 of 10), never penalized", i+1, r.OverLimit, r.Reported.Penalized, want)
				}
			}
			if r := call(t, svc, "api", 1, desc("account", "acme", "priority", "critical")); r.OverLimit {
				t.Fatalf("a critical request with 5 of 10 left: %+v (penalized %v); want admitted", r.Reported, r.Reported.Penalized)
			}
		})
	}
}

// The attack: with after defaulting to 1, the first denial of a key bans
// it, so two requests (one that spends the limit, one denied) ban any key a
// client can name. after defaults to 3.
func TestAttackPenaltyOnTheFirstDenialByDefault(t *testing.T) {
	for name, newStore := range memoryAndRedis() {
		t.Run(name, func(t *testing.T) {
			svc := lifetimeService(t, newStore(t), penaltyPolicy(""))
			if r := call(t, svc, "api", 5, desc("account", "victim")); r.OverLimit {
				t.Fatalf("a request spending the limit: %+v", r)
			}
			for i := range 3 {
				r := call(t, svc, "api", 1, desc("account", "victim"))
				if want := i == 2; !r.OverLimit || r.Reported.Penalized != want {
					t.Fatalf("denial %d: over limit %v, penalized %v; want the third denial to start the penalty (after defaults to 3)", i+1, r.OverLimit, r.Reported.Penalized)
				}
			}
		})
	}
}

// A request refused before it is decided (here a malformed lease entry in
// a domain whose Concurrency policy names it) strikes no penalty, whether
// it is answered with an error or with a denial: only a decision by the
// key's own counter strikes.
func TestRefusedRequestIsNoStrike(t *testing.T) {
	policies := penaltyPolicy(", after: 1") + `---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: inflight, namespace: api}
spec:
  domain: api
  descriptors: [{key: account}, {key: op, value: stream}]
  algorithm: Concurrency
  concurrency: {maxInFlight: 2}
`
	for name, newStore := range memoryAndRedis() {
		t.Run(name, func(t *testing.T) {
			svc := lifetimeService(t, newStore(t), policies)
			if r := call(t, svc, "api", 5, desc("account", "acme")); r.OverLimit {
				t.Fatalf("spending the window: %+v", r)
			}
			for range 3 {
				req := &service.Request{Domain: "api", Descriptors: []service.Descriptor{desc("account", "acme", "sluice_lease", "not-a-lease")}}
				resp, err := svc.Decide(context.Background(), req)
				if err == nil && (!resp.OverLimit || resp.Reported.Penalized) {
					t.Fatalf("a malformed lease: %+v, want refused (an error or a denial), not penalized", resp)
				}
			}
			st, err := svc.Peek(context.Background(), "api", []config.Entry{{Key: "account", Value: "acme"}})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range st {
				if p.Penalized {
					t.Fatalf("status %+v: refused requests struck the key", st)
				}
			}
		})
	}
}

const zeroSlotPolicies = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: inflight, namespace: llm}
spec:
  domain: llm
  descriptors: [{key: api_key}]
  algorithm: Concurrency
  concurrency: {maxInFlight: 2, leaseDuration: 1m}
`

// The attack: a descriptor whose hits_addend the client sets to 0. A
// Concurrency check of cost 0 must still take a slot, or any number of
// requests are in flight at once.
func TestAttackZeroCostTakesNoSlot(t *testing.T) {
	for name, newStore := range memoryAndRedis() {
		t.Run(name, func(t *testing.T) {
			svc := lifetimeService(t, newStore(t), zeroSlotPolicies)
			d := desc("api_key", "mallory")
			d.HitsAddend, d.HasHitsAddend = 0, true
			for i := range 2 {
				if r := call(t, svc, "llm", 0, d); r.OverLimit || r.Lease == "" {
					t.Fatalf("check %d of cost 0: over limit %v, lease %q; want admitted holding a slot", i+1, r.OverLimit, r.Lease)
				}
			}
			if r := call(t, svc, "llm", 0, d); !r.OverLimit {
				t.Fatalf("a third check of cost 0 with 2 slots held: over limit %v, lease %q; want denied", r.OverLimit, r.Lease)
			}
		})
	}
}
