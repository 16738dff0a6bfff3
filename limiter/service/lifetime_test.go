package service_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// lifetimePolicies: an LLM API. Each API key may have 2 requests in
// flight, 1000 tokens a day (reserved at the check, settled at the end;
// a day, so that no test sees a refill), and 3 chats an hour.
const lifetimePolicies = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: inflight, namespace: llm}
spec:
  domain: llm
  descriptors: [{key: api_key}]
  algorithm: Concurrency
  concurrency: {maxInFlight: 2, leaseDuration: 1m}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: tokens, namespace: llm}
spec:
  domain: llm
  descriptors: [{key: api_key}, {key: model}]
  algorithm: TokenBucket
  rate: {limit: 1000, period: 24h}
  reserve: {expireAfter: 5m}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: chats, namespace: llm}
spec:
  domain: llm
  descriptors: [{key: api_key}, {key: path, value: /v1/chat}]
  algorithm: FixedWindow
  rate: {limit: 3, period: 1h}
`

func lifetimeService(t *testing.T, st store.Store, yaml string) *service.Service {
	t.Helper()
	svc, _ := newService(t, st)
	snap, err := config.Parse("inline", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	svc.Swap(snap)
	return svc
}

// stores are the stores the lifetime tests run on: memory, a real Redis
// and a real Redis Cluster.
func stores(t *testing.T) map[string]func(t *testing.T) store.Store {
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
		"redis-cluster": func(t *testing.T) store.Store {
			c := redistest.StartCluster(t, 3)
			st, err := redisstore.New(redisstore.Options{Addrs: c.Addrs(), Cluster: true, Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st
		},
	}
}

func end(t *testing.T, svc *service.Service, lease string, cost int64, ds ...service.Descriptor) []service.Ending {
	t.Helper()
	out, err := svc.End(context.Background(), &service.EndRequest{Domain: "llm", Descriptors: ds, Lease: lease, Cost: cost})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// left peeks at the policy's remaining units for a descriptor.
func left(t *testing.T, svc *service.Service, policy string, d service.Descriptor) int64 {
	t.Helper()
	st, err := svc.Peek(context.Background(), "llm", d.Entries)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st {
		if p.Policy == policy {
			return p.Remaining
		}
	}
	t.Fatalf("no policy %s in %+v", policy, st)
	return 0
}

func outcomes(es []service.Ending) string {
	var b strings.Builder
	for _, e := range es {
		b.WriteString(e.Policy.ID() + "=" + e.Outcome() + " ")
	}
	return strings.TrimSpace(b.String())
}

// Concurrency: a lease per admitted check, at most maxInFlight at once;
// its end frees the slot; ending it twice, or a lease never taken, is
// harmless and says so.
func TestConcurrencyLeases(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			svc := lifetimeService(t, newStore(t), lifetimePolicies)
			alice := desc("api_key", "alice")
			var leases []string
			for i := range 3 {
				r := call(t, svc, "llm", 0, alice)
				if r.OverLimit != (i == 2) {
					t.Fatalf("check %d: over limit %v, want %v", i, r.OverLimit, i == 2)
				}
				if (r.Lease == "") != r.OverLimit {
					t.Fatalf("check %d: lease %q with over limit %v: an admitted check holds a slot, a denied one none", i, r.Lease, r.OverLimit)
				}
				if r.OverLimit && r.Reported.Result.RetryAfter != time.Second {
					t.Fatalf("denied check: retry after %v, want 1s", r.Reported.Result.RetryAfter)
				}
				leases = append(leases, r.Lease)
			}
			if got := left(t, svc, "llm/inflight", alice); got != 0 {
				t.Fatalf("remaining %d with 2 in flight, want 0", got)
			}
			if got := outcomes(end(t, svc, leases[0], store.AtEstimate, alice)); got != "llm/inflight=released" {
				t.Fatalf("first end: %s", got)
			}
			if got := outcomes(end(t, svc, leases[0], store.AtEstimate, alice)); got != "llm/inflight=not-held" {
				t.Fatalf("second end of one lease: %s, want not-held", got)
			}
			if got := left(t, svc, "llm/inflight", alice); got != 1 {
				t.Fatalf("remaining %d after one release, want 1", got)
			}
			if r := call(t, svc, "llm", 0, alice); r.OverLimit || r.Lease == "" {
				t.Fatalf("after a release: %+v, want a slot", r)
			}
		})
	}
}

// A check denied by another policy holds nothing: the slot and the
// reservation it took are given back, and it answers no lease.
func TestDeniedCheckHoldsNothing(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			svc := lifetimeService(t, newStore(t), lifetimePolicies)
			// Envoy sends a descriptor per rate_limits entry: the chat
			// (cost 1) and its tokens (the estimate).
			chat, tokens := desc("api_key", "bob", "path", "/v1/chat"), desc("api_key", "bob", "model", "m1")
			tokens.HitsAddend, tokens.HasHitsAddend = 100, true
			for i := range 3 {
				r := call(t, svc, "llm", 0, chat, tokens)
				if r.OverLimit || r.Lease == "" {
					t.Fatalf("chat %d: %+v", i, r)
				}
				if es := end(t, svc, r.Lease, 100, chat, tokens); outcomes(es) != "llm/inflight=released llm/tokens=settled" {
					t.Fatalf("chat %d end: %s", i, outcomes(es))
				}
			}
			r := call(t, svc, "llm", 0, chat, tokens) // the 4th chat of the hour
			if !r.OverLimit || policyOf(r.Reported) != "llm/chats" || r.Lease != "" {
				t.Fatalf("4th chat: over limit %v by %s, lease %q; want denied by llm/chats with no lease", r.OverLimit, policyOf(r.Reported), r.Lease)
			}
			if got := left(t, svc, "llm/inflight", chat); got != 2 {
				t.Fatalf("in flight slots left %d, want 2: the denied check gave its slot back", got)
			}
			if got := left(t, svc, "llm/tokens", tokens); got < 700 || got > 702 {
				t.Fatalf("tokens left %d, want 700: 3 × 100 spent, the denied check's 100 given back", got)
			}
		})
	}
}

// Reserve, then settle: the reservation is denied when it doesn't fit; the
// settlement refunds what it did not spend, or charges what it spent beyond
// it; a reservation never settled stays at its estimate.
func TestReserveThenSettle(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			svc := lifetimeService(t, newStore(t), lifetimePolicies)
			d := desc("api_key", "carol", "model", "m1")
			first := call(t, svc, "llm", 600, d)
			if first.OverLimit || first.Lease == "" {
				t.Fatalf("reserve 600: %+v", first)
			}
			second := call(t, svc, "llm", 300, d)
			if second.OverLimit {
				t.Fatalf("reserve 300 more: %+v", second)
			}
			if r := call(t, svc, "llm", 200, d); !r.OverLimit || policyOf(r.Reported) != "llm/tokens" {
				t.Fatalf("reserve 200 with 100 left: over limit %v by %s, want denied by llm/tokens", r.OverLimit, policyOf(r.Reported))
			}
			// The first used 250: 350 back.
			es := end(t, svc, first.Lease, 250, d)
			if got := outcomes(es); got != "llm/inflight=released llm/tokens=settled" {
				t.Fatalf("settle: %s", got)
			}
			if es[1].Held != 600 || es[1].Cost != 250 {
				t.Fatalf("settlement %+v, want held 600 settled at 250", es[1])
			}
			if got := left(t, svc, "llm/tokens", d); got < 450 || got > 452 {
				t.Fatalf("tokens left %d, want 450 (and what refilled since)", got)
			}
			// The second used 700: 400 more charged, past the limit.
			end(t, svc, second.Lease, 700, d)
			if got := left(t, svc, "llm/tokens", d); got != 50 && got != 51 {
				t.Fatalf("tokens left %d, want 50", got)
			}
		})
	}
}

// The bad input of the issue: each is refused with an error naming what is
// wrong, and changes no counter.
func TestEndBadInput(t *testing.T) {
	svc := lifetimeService(t, nil, lifetimePolicies)
	d := desc("api_key", "dave", "model", "m1")
	r := call(t, svc, "llm", 100, d)
	start, before := time.Now(), left(t, svc, "llm/tokens", d)
	// llm/tokens refills 1000 a day by the clock (a loaded machine takes
	// its time between reads); a refund of the reservation would be 100.
	unchanged := func(what string) {
		t.Helper()
		got, refill := left(t, svc, "llm/tokens", d), int64(time.Since(start)*1000/(24*time.Hour))+1
		if got < before || got > before+refill {
			t.Fatalf("tokens left %d after %s, want %d (plus at most %d refilled in %v)", got, what, before, refill, time.Since(start))
		}
	}
	for _, tc := range []struct {
		name  string
		req   service.EndRequest
		want  string
		field string
	}{
		{"negative cost", service.EndRequest{Lease: r.Lease, Cost: -5}, "cost -5 is negative", "cost"},
		{"malformed lease", service.EndRequest{Lease: "not-a-lease", Cost: 1}, `lease: lease ID "not-a-lease" is malformed`, "lease"},
		{"empty lease", service.EndRequest{Cost: 1}, `lease: lease ID "" is malformed`, "lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.Domain, req.Descriptors = "llm", []service.Descriptor{d}
			_, err := svc.End(context.Background(), &req)
			if !errors.Is(err, service.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), tc.field) {
				t.Fatalf("got %v, want an invalid argument on %s: %q", err, tc.field, tc.want)
			}
			unchanged("a refused end")
		})
	}
	// A reservation larger than the capacity is refused at the check.
	if got := answer(svc.Decide(context.Background(), &service.Request{Domain: "llm", Descriptors: []service.Descriptor{d}, HitsAddend: 1001})); !strings.HasPrefix(got, "refused: descriptors[0] costs 1001, above the maximum cost of 1000 of policy llm/tokens") {
		t.Fatalf("reservation above capacity: %s", got)
	}
	unchanged("a refused reservation")
	// An expired reservation: the end finds nothing, and changes nothing.
	// (Unknown and foreign leases: TestForeignLeaseIsRefused.)
}

// A tenant can't end another tenant's lease: its own descriptors with the
// other's lease find nothing, and change no counter; another counter's
// lease, or a lease never answered, is not held either.
func TestForeignLeaseIsRefused(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			svc := lifetimeService(t, newStore(t), lifetimePolicies)
			victim, attacker := desc("api_key", "victim", "model", "m1"), desc("api_key", "mallory", "model", "m1")
			vl := call(t, svc, "llm", 900, victim).Lease
			al := call(t, svc, "llm", 900, attacker).Lease
			if vl == "" || al == "" || vl == al {
				t.Fatalf("leases %q and %q: want two distinct leases", vl, al)
			}
			counts := func() [4]int64 {
				return [4]int64{left(t, svc, "llm/tokens", victim), left(t, svc, "llm/inflight", victim),
					left(t, svc, "llm/tokens", attacker), left(t, svc, "llm/inflight", attacker)}
			}
			start := time.Now()
			before := counts()
			// Mallory ends Victim's lease on her own key: refunding her
			// reservation, or freeing her slot, with it.
			if got := outcomes(end(t, svc, vl, 0, attacker)); got != "llm/inflight=not-held llm/tokens=not-held" {
				t.Fatalf("a foreign lease on the attacker's key: %s, want not-held", got)
			}
			// A made-up lease on Victim's key.
			if got := outcomes(end(t, svc, service.Lease{1, 2, 3}.String(), 0, victim)); got != "llm/inflight=not-held llm/tokens=not-held" {
				t.Fatalf("a made-up lease on the victim's key: %s, want not-held", got)
			}
			// llm/tokens refills 1000 a day meanwhile, by the clock (a
			// loaded machine takes its time): a refund would be 900.
			after := counts()
			refill := int64(time.Since(start)*1000/(24*time.Hour)) + 1
			if after[0] > before[0]+refill || after[1] != before[1] || after[2] > before[2]+refill || after[3] != before[3] {
				t.Fatalf("counters moved: before %v, after %v (tokens may refill %d in %v)", before, after, refill, time.Since(start))
			}
			// The leases still end their own holdings.
			if got := outcomes(end(t, svc, vl, 0, victim)); got != "llm/inflight=released llm/tokens=settled" {
				t.Fatalf("the victim's own end: %s", got)
			}
		})
	}
}

// The end of a request over RLS: a descriptor with the lease entry ends
// the holdings of the policies it matches, at its hits_addend, and spends
// nothing on the others.
func TestEndDescriptor(t *testing.T) {
	svc := lifetimeService(t, nil, lifetimePolicies)
	chat, tokens := desc("api_key", "erin", "path", "/v1/chat"), desc("api_key", "erin", "model", "m1")
	tokens.HitsAddend, tokens.HasHitsAddend = 100, true
	r := call(t, svc, "llm", 0, chat, tokens)
	// At stream end Envoy sends the descriptors of the rate_limits entries
	// with apply_on_stream_done: here the tokens', with the lease from the
	// check's dynamic metadata and the actual cost.
	done := desc("api_key", "erin", "model", "m1", "sluice_lease", r.Lease)
	done.HitsAddend, done.HasHitsAddend = 40, true
	resp := call(t, svc, "llm", 0, done)
	if resp.OverLimit || len(resp.Endings) != 2 || outcomes(resp.Endings) != "llm/inflight=released llm/tokens=settled" {
		t.Fatalf("stream-done call: over limit %v, endings %s", resp.OverLimit, outcomes(resp.Endings))
	}
	if resp.Endings[1].Cost != 40 || resp.Lease != "" {
		t.Fatalf("stream-done call: %+v, lease %q", resp.Endings[1], resp.Lease)
	}
	// chats counted the check, not the end: 2 left of 3.
	if got := left(t, svc, "llm/chats", chat); got != 2 {
		t.Fatalf("chats left %d, want 2: the end spends nothing", got)
	}
	if got := left(t, svc, "llm/tokens", tokens); got < 960 || got > 962 {
		t.Fatalf("tokens left %d, want 960: 40 spent", got)
	}
	// A malformed lease entry is refused before anything is decided.
	bad := desc("api_key", "erin", "sluice_lease", "xyz")
	if got := answer(svc.Decide(context.Background(), &service.Request{Domain: "llm", Descriptors: []service.Descriptor{desc("api_key", "erin"), bad}})); !strings.HasPrefix(got, `refused: descriptors[1].entries[1] (sluice_lease): lease ID "xyz" is malformed`) {
		t.Fatalf("malformed lease entry: %s", got)
	}
	if got := left(t, svc, "llm/inflight", chat); got != 2 {
		t.Fatalf("slots left %d, want 2: the refused request took none", got)
	}
}

func concurrencyYAML(name, extra string) string {
	return `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: ` + name + `, namespace: llm}
spec:
  domain: llm
  descriptors: [{key: api_key}]
  algorithm: Concurrency
  concurrency: {maxInFlight: 1}
` + extra
}

// Shadow and the kill switch: a Concurrency policy never denies, holds
// what it admits, and counts its would-be denials.
func TestConcurrencyShadowAndKillSwitch(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		kill        bool
	}{{"shadow", "  shadow: true\n", false}, {"kill switch", "", true}} {
		t.Run(tc.name, func(t *testing.T) {
			svc := lifetimeService(t, nil, concurrencyYAML("one", tc.extra))
			svc.SetEnforcement(!tc.kill)
			k := desc("api_key", "frank")
			first := call(t, svc, "llm", 0, k)
			if first.OverLimit || first.Lease == "" {
				t.Fatalf("first: %+v, want a held slot", first)
			}
			for range 2 {
				if r := call(t, svc, "llm", 0, k); r.OverLimit || r.Lease != "" {
					t.Fatalf("would-be denial: over limit %v, lease %q; want allowed, holding nothing", r.OverLimit, r.Lease)
				}
			}
			st := svc.PolicyStats()[0]
			if st.Allowed != 1 || st.ShadowLimited != 2 {
				t.Fatalf("stats %+v, want 1 allowed and 2 shadow-limited", st)
			}
			if got := outcomes(end(t, svc, first.Lease, 0, k)); got != "llm/one=released" {
				t.Fatalf("end: %s", got)
			}
			if st := svc.PolicyStats()[0]; st.Released != 1 {
				t.Fatalf("stats %+v, want 1 released", st)
			}
		})
	}
}

// Failure modes: with the store down, Open admits holding nothing, Closed
// denies, and Local holds in this pod's memory, where the end finds it.
func TestConcurrencyFailureModes(t *testing.T) {
	for _, tc := range []struct {
		mode      string
		overLimit bool
		held      bool
	}{{"Open", false, false}, {"Closed", true, false}, {"Local", false, true}} {
		t.Run(tc.mode, func(t *testing.T) {
			svc := lifetimeService(t, downStore(t), concurrencyYAML("one", "  failureMode: "+tc.mode+"\n"))
			k := desc("api_key", "grace")
			r := call(t, svc, "llm", 0, k)
			if r.OverLimit != tc.overLimit || (r.Lease != "") != tc.held || r.Reported.Reason == "" {
				t.Fatalf("check: over limit %v, lease %q, reason %q; want over limit %v, held %v, and a reason", r.OverLimit, r.Lease, r.Reported.Reason, tc.overLimit, tc.held)
			}
			if !tc.held {
				return
			}
			// Local: this pod's share (1 of 1 pod) is taken.
			if again := call(t, svc, "llm", 0, k); !again.OverLimit {
				t.Fatalf("second check under Local: %+v, want denied by the local share", again)
			}
			if got := outcomes(end(t, svc, r.Lease, 0, k)); got != "llm/one=released" {
				t.Fatalf("end under Local: %s, want the slot found in memory", got)
			}
			if again := call(t, svc, "llm", 0, k); again.OverLimit {
				t.Fatalf("check after the release: %+v", again)
			}
		})
	}
	// An end while the store is down and nothing is in memory says so.
	svc := lifetimeService(t, downStore(t), concurrencyYAML("one", ""))
	es := end(t, svc, service.Lease{9}.String(), 0, desc("api_key", "heidi"))
	if len(es) != 1 || es[0].Outcome() != "unavailable" || es[0].Reason != service.ReasonEndUnavailable {
		t.Fatalf("end with the store down: %+v", es)
	}
}

// A settle above a reservation's maxCost (or above the limiter's maximum)
// charges the cap: refusing it would leave the request charged at its
// estimate, and whoever reports usage could then spend without paying.
func TestEndAboveMaxCostSettlesAtTheCap(t *testing.T) {
	for _, cost := range []int64{1001, 5_000_000} {
		t.Run(fmt.Sprint(cost), func(t *testing.T) {
			svc := lifetimeService(t, nil, lifetimePolicies)
			d := desc("api_key", "dave", "model", "m1")
			r := call(t, svc, "llm", 100, d)
			es := end(t, svc, r.Lease, cost, d)
			var settled *service.Ending
			for i := range es {
				if es[i].Policy.ID() == "llm/tokens" {
					settled = &es[i]
				}
			}
			if settled == nil || !settled.Found || settled.Cost != 1000 {
				t.Fatalf("settling at %d: %+v, want llm/tokens settled at its maxCost, 1000", cost, es)
			}
			if got := left(t, svc, "llm/tokens", d); got != 0 {
				t.Fatalf("tokens left %d after a settle at the cap, want 0", got)
			}
		})
	}
}

// A stream-done call whose actual cost is above the reservation's maxCost
// settles it at the cap: refusing it would leave the request charged at
// its estimate.
func TestEndDescriptorAboveMaxCostSettlesAtTheCap(t *testing.T) {
	for name, newStore := range memoryAndRedis() {
		t.Run(name, func(t *testing.T) {
			svc := lifetimeService(t, newStore(t), lifetimePolicies)
			tokens := desc("api_key", "fay", "model", "m1")
			tokens.HitsAddend, tokens.HasHitsAddend = 100, true
			r := call(t, svc, "llm", 0, tokens)
			done := desc("api_key", "fay", "model", "m1", "sluice_lease", r.Lease)
			done.HitsAddend, done.HasHitsAddend = 5000, true
			resp := call(t, svc, "llm", 0, done)
			if resp.OverLimit || outcomes(resp.Endings) != "llm/inflight=released llm/tokens=settled" || resp.Endings[1].Cost != 1000 {
				t.Fatalf("stream-done at 5000: over limit %v, endings %s %+v; want settled at the cap, 1000", resp.OverLimit, outcomes(resp.Endings), resp.Endings)
			}
			if got := left(t, svc, "llm/tokens", desc("api_key", "fay", "model", "m1")); got != 0 {
				t.Fatalf("tokens left %d, want 0: 1000 spent", got)
			}
		})
	}
}
