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
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// /readyz shows DegradedDetail on the data plane: a hidden policy that
// runs degraded is not named there (the admin plane's Degraded lists it).
func TestAttackReadyzDegradedRevealsNoHiddenPolicy(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr
	srv.Stop() // nothing answers there: every decision falls back
	st, err := redisstore.New(redisstore.Options{Addrs: []string{addr}, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	snap, err := config.Parse("inline", []byte(`
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: guard, namespace: security}
spec: {domain: d, descriptors: [{key: user}], algorithm: FixedWindow, rate: {limit: 5, period: 1m}, visibility: Hidden}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: plain, namespace: shop}
spec: {domain: d, descriptors: [{key: ip}], algorithm: FixedWindow, rate: {limit: 5, period: 1m}}
`))
	if err != nil {
		t.Fatal(err)
	}
	svc := service.New(st, service.Options{Registerer: prometheus.NewRegistry(), Fallback: memoryStore(t)})
	svc.Swap(snap)
	call(t, svc, "d", 0, desc("user", "x", "ip", "10.0.0.1"))
	var names []string
	for _, d := range svc.Degraded() {
		names = append(names, d.Policy)
	}
	if got := strings.Join(names, " "); got != "security/guard shop/plain" {
		t.Fatalf("Degraded (the admin plane) lists %q, want both policies", got)
	}
	if d := svc.DegradedDetail(); strings.Contains(d, "security/guard") || !strings.Contains(d, "shop/plain runs degraded") {
		t.Fatalf("DegradedDetail (the data plane's /readyz) %q: want shop/plain named, the hidden security/guard not", d)
	}
}

// A refused request never reaches the store: it is never a strike of
// spec.penalty, however many come. The window is 720h, so that none ends
// between mallory's requests.
func TestRefusedIsNeverAPenaltyStrike(t *testing.T) {
	svc := service.New(memoryStore(t), service.Options{Registerer: prometheus.NewRegistry()})
	snap, err := config.Parse("inline", []byte(`
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: strict, namespace: a}
spec: {domain: d, descriptors: [{key: user}], algorithm: FixedWindow, rate: {limit: 2, period: 720h}, maxCost: 1, penalty: {duration: 10m, after: 1}}
`))
	if err != nil {
		t.Fatal(err)
	}
	svc.Swap(snap)
	long := desc("user", strings.Repeat("m", 1100))
	for i := range 10 {
		if got := answer(svc.Decide(context.Background(), &service.Request{Domain: "d", HitsAddend: 5, Descriptors: []service.Descriptor{desc("user", "mallory")}})); !strings.HasPrefix(got, "refused: ") {
			t.Fatalf("cost 5, request %d: %s, want refused", i+1, got)
		}
		if got := answer(svc.Decide(context.Background(), &service.Request{Domain: "d", Descriptors: []service.Descriptor{long}})); !strings.HasPrefix(got, "refused: ") {
			t.Fatalf("over-long value, request %d: %s, want refused", i+1, got)
		}
	}
	for i := range 2 {
		if r := call(t, svc, "d", 1, desc("user", "mallory")); r.OverLimit || r.Reported.Penalized {
			t.Fatalf("mallory's request %d within the limit after 20 refusals: %+v, want allowed, not penalized", i+1, r.Reported)
		}
	}
	// The first real denial is the first strike (after: 1).
	if r := call(t, svc, "d", 1, desc("user", "mallory")); !r.OverLimit || !r.Reported.Penalized {
		t.Fatalf("mallory over the limit: %+v, want penalized", r.Reported)
	}
}
