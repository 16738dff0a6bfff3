package service_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/memory"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// overridePolicies: tenant a's per-tenant limit opted in to a request's
// own limit (at most 100 a minute); tenant b's per-user limit, in the same
// domain, did not.
const overridePolicies = `apiVersion: ratelimit.sluice.dev/v1beta1
kind: RateLimitPolicy
metadata: {name: per-tenant, namespace: a}
spec:
  domain: api
  descriptors: [{key: tenant}]
  limit:
    type: Rate
    rate: {algorithm: %s, limit: 5, period: 1m, requestOverride: {maximum: 100}}
---
apiVersion: ratelimit.sluice.dev/v1beta1
kind: RateLimitPolicy
metadata: {name: per-user, namespace: b}
spec:
  domain: api
  descriptors: [{key: user}]
  limit:
    type: Rate
    rate: {algorithm: FixedWindow, limit: 3, period: 1m}
`

const day = 4

// overrideStores runs f on a memory store and on a real redis-server, for
// each algorithm a policy with requestOverride may have. Both stores run
// on a stopped clock: the tests count a minute's window (the policies'
// period, which the overrides are converted to) and a bucket's refill, so
// neither a window's end nor a refill may fall between their requests.
func overrideStores(t *testing.T, f func(t *testing.T, svc *service.Service, alg string)) {
	for _, backend := range []string{"memory", "redis"} {
		for _, alg := range []string{"FixedWindow", "SlidingWindow", "TokenBucket", "GCRA"} {
			t.Run(backend+"/"+alg, func(t *testing.T) {
				clock := storetest.NewClock()
				var st store.Store
				if backend == "redis" {
					srv := redistest.Start(t)
					rs, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 10 * time.Second, PinnedClock: clock.Now})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = rs.Close() })
					st = rs
				} else {
					m := memory.New(memory.Options{Clock: clock.Now, SweepInterval: -1})
					t.Cleanup(func() { _ = m.Close() })
					st = m
				}
				snap, err := config.Parse("policies.yaml", []byte(strings.Replace(overridePolicies, "%s", alg, 1)))
				if err != nil {
					t.Fatal(err)
				}
				svc := service.New(st, service.Options{Registerer: prometheus.NewRegistry(), Fallback: memoryStore(t)})
				svc.Swap(snap)
				f(t, svc, alg)
			})
		}
	}
}

// hits sends n requests of d in domain api and returns how many were
// allowed and the last answer; every answer must be one (never an error).
func hits(t *testing.T, svc *service.Service, n int, ds ...service.Descriptor) (int, service.Response) {
	t.Helper()
	allowed := 0
	var last service.Response
	for range n {
		resp, err := svc.Decide(context.Background(), &service.Request{Domain: "api", Descriptors: ds})
		if err != nil {
			t.Fatalf("Decide: %v, want an answer (a gateway fails open on errors)", err)
		}
		if !resp.OverLimit {
			allowed++
		}
		last = resp
	}
	return allowed, last
}

// TestRequestOverrideReplacesTheLimit: on a policy that opted in, a
// request's own limit replaces the policy's (5 a minute), converted to the
// policy's period: 10/minute allows 10, 1/second 60 a minute.
func TestRequestOverrideReplacesTheLimit(t *testing.T) {
	overrideStores(t, func(t *testing.T, svc *service.Service, alg string) {
		if n, last := hits(t, svc, 12, withLimit(desc("tenant", "t1"), 10, minute)); n != 10 || !last.OverLimit {
			t.Fatalf("10/minute: %d of 12 allowed (last %+v), want 10", n, last.Reported)
		}
		if n, _ := hits(t, svc, 61, withLimit(desc("tenant", "t2"), 1, second)); n != 60 {
			t.Fatalf("1/second on a 1m policy: %d of 61 allowed, want 60", n)
		}
		// Without its own limit, a request meets the policy's.
		if n, _ := hits(t, svc, 6, desc("tenant", "t3")); n != 5 {
			t.Fatalf("no override: %d of 6 allowed, want 5", n)
		}
	})
}

// TestAttackRequestOverrideAboveMaximum: a client sets a huge limit of its
// own; it is clamped to the policy's maximum (100 a minute), whatever the
// unit, never an error.
func TestAttackRequestOverrideAboveMaximum(t *testing.T) {
	overrideStores(t, func(t *testing.T, svc *service.Service, alg string) {
		for i, d := range []service.Descriptor{
			withLimit(desc("tenant", "m1"), 101, minute),
			withLimit(desc("tenant", "m2"), 1_000_000, second),
			withLimit(desc("tenant", "m3"), 1<<32-1, second),
			withLimit(desc("tenant", "m4"), 1<<32-1, 6), // a year
		} {
			n, last := hits(t, svc, 101, d)
			if n != 100 || !last.OverLimit {
				t.Fatalf("override %d (%s): %d of 101 allowed, want the maximum, 100", i, d.Override, n)
			}
		}
	})
}

// TestAttackRequestOverrideAllowsNothing: a limit of 0 (ERL's deny all),
// one that rounds down to 0 a minute, and a unit that is none of the RLS
// units are denials with a reason, not errors, and spend nothing.
func TestAttackRequestOverrideAllowsNothing(t *testing.T) {
	overrideStores(t, func(t *testing.T, svc *service.Service, alg string) {
		for _, tc := range []struct {
			d    service.Descriptor
			want string
		}{
			{withLimit(desc("tenant", "z"), 0, minute), "allows nothing per the policy's period 1m0s"},
			{withLimit(desc("tenant", "z"), 1, day), "1/day allows nothing per the policy's period"},
			{withLimit(desc("tenant", "z"), 5, 0), "unit 0 is none of the RLS units"},
			{withLimit(desc("tenant", "z"), 5, 9), "unit 9 is none of the RLS units"},
		} {
			n, last := hits(t, svc, 1, tc.d)
			if n != 0 || !strings.Contains(last.Reported.Reason, tc.want) {
				t.Fatalf("%s: allowed %d, reported %+v; want denied for %q", tc.d.Override, n, last.Reported, tc.want)
			}
		}
		if n, _ := hits(t, svc, 6, desc("tenant", "z")); n != 5 {
			t.Fatalf("after the denied overrides: %d of 6 allowed, want the policy's 5 (they spent nothing)", n)
		}
	})
}

// TestAttackRequestOverrideSwitchingUnits: a client spends its own limit
// of 10 a minute, then asks for the same limit in another unit to get a
// fresh window: the counter is the policy's, so it meets what it spent;
// asking for more (1/second, 60 a minute) gives only what is left of 60
// (of a bucket: what refills).
func TestAttackRequestOverrideSwitchingUnits(t *testing.T) {
	overrideStores(t, func(t *testing.T, svc *service.Service, alg string) {
		if n, _ := hits(t, svc, 10, withLimit(desc("tenant", "s"), 10, minute)); n != 10 {
			t.Fatalf("10/minute: %d of 10 allowed", n)
		}
		for _, d := range []service.Descriptor{withLimit(desc("tenant", "s"), 600, hour), withLimit(desc("tenant", "s"), 14400, day), withLimit(desc("tenant", "s"), 10, minute)} {
			if n, last := hits(t, svc, 1, d); n != 0 {
				t.Fatalf("%s after 10/minute was spent: allowed (%+v), want the same window, denied", d.Override, last.Decisions[0])
			}
		}
		// A window algorithm has counted 10 of the 60; a bucket is empty,
		// and refills at the new rate (1 a second), but the clock stands
		// still.
		want := 50
		if alg == "TokenBucket" || alg == "GCRA" {
			want = 0
		}
		if n, _ := hits(t, svc, 60, withLimit(desc("tenant", "s"), 1, second)); n != want {
			t.Fatalf("1/second after 10 spent: %d of 60 allowed, want %d", n, want)
		}
	})
}

// TestAttackRequestOverrideOnAnotherTenantsPolicy: a request's own limit
// is ignored by a policy that did not opt in (tenant b's 3 a minute), also
// when it is sent in a descriptor that tenant a's opted-in policy matches
// too: it changes a's limit only.
func TestAttackRequestOverrideOnAnotherTenantsPolicy(t *testing.T) {
	overrideStores(t, func(t *testing.T, svc *service.Service, alg string) {
		n, last := hits(t, svc, 4, withLimit(desc("user", "u1"), 100, minute))
		if n != 3 || !last.OverLimit || last.Decisions[0].Policy == nil || last.Decisions[0].Policy.ID() != "b/per-user" {
			t.Fatalf("b's policy with an override: %d of 4 allowed (last %+v), want its own 3", n, last.Decisions[0])
		}
		// One descriptor that both policies match: a's takes 100, b's
		// stays at 3, so b denies the fourth.
		n, last = hits(t, svc, 4, withLimit(desc("tenant", "t", "user", "u2"), 100, minute))
		if n != 3 || last.Reported.Policy == nil || last.Reported.Policy.ID() != "b/per-user" {
			t.Fatalf("both policies with an override: %d of 4 allowed (last %+v), want b's 3", n, last.Reported)
		}
		// Tenant a's counter took all 4 of its 100 (a denial of b spends
		// nothing of a's on window algorithms; at most 4).
		if n, _ := hits(t, svc, 1, withLimit(desc("tenant", "t"), 100, minute)); n != 1 {
			t.Fatal("tenant a's own limit of 100 was not honoured beside b's policy")
		}
	})
}

// BenchmarkRequestOverride is one memory-store decision of a policy that
// opted in to a request's own limit, allowed, without and with one (the
// same limit): the override costs one copy of the policy per request,
// whatever the limit asked.
func BenchmarkRequestOverride(b *testing.B) {
	snap, err := config.Parse("policies.yaml", []byte(strings.NewReplacer("%s", "TokenBucket", "limit: 5, period: 1m", "limit: 1000000000, period: 1h", "maximum: 100", "maximum: 1000000000").Replace(overridePolicies)))
	if err != nil {
		b.Fatal(err)
	}
	st := memory.New(memory.Options{})
	b.Cleanup(func() { _ = st.Close() })
	svc := service.New(st, service.Options{})
	svc.Swap(snap)
	for _, tc := range []struct {
		name string
		d    service.Descriptor
	}{
		{"policy-limit", desc("tenant", "t")},
		{"own-limit", withLimit(desc("tenant", "t"), 1_000_000_000, hour)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			req := &service.Request{Domain: "api", Descriptors: []service.Descriptor{tc.d}}
			var resp service.Response
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := svc.DecideInto(ctx, req, &resp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
