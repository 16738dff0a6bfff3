package service_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

const statsPolicies = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: enforced, namespace: shop, uid: uid-enforced, generation: %d}
spec:
  domain: shop
  descriptors: [{key: user}]
  algorithm: FixedWindow
  rate: {limit: 10, period: 1h}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: shadow, namespace: shop, uid: uid-shadow, generation: 1}
spec:
  domain: shop
  descriptors: [{key: user, value: kim}]
  algorithm: FixedWindow
  rate: {limit: 4, period: 1h}
  shadow: true
`

func statsSnapshot(t *testing.T, gen int) *config.Snapshot {
	t.Helper()
	snap, err := config.Parse("inline", []byte(fmt.Sprintf(statsPolicies, gen)))
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func statsOf(t *testing.T, svc *service.Service, name string) service.PolicyStats {
	t.Helper()
	for _, s := range svc.PolicyStats() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no stats for %s in %+v", name, svc.PolicyStats())
	return service.PolicyStats{}
}

// Counts are kept by policy UID: a new snapshot (a new generation) carries
// them over; shadow denials are counted apart and never limit; allowed
// decisions that leave under 20% of the limit count as near the limit.
func TestPolicyStatsSurviveSwaps(t *testing.T) {
	st := memory.New(memory.Options{})
	t.Cleanup(func() { _ = st.Close() })
	svc := service.New(st, service.Options{})
	svc.Swap(statsSnapshot(t, 1))
	entries := []config.Entry{{Key: "user", Value: "kim"}}
	ctx := context.Background()
	for range 8 {
		svc.Check(ctx, "shop", entries, 1)
	}
	svc.Swap(statsSnapshot(t, 2))
	for range 7 {
		svc.Check(ctx, "shop", entries, 1)
	}
	got := statsOf(t, svc, "enforced")
	want := service.PolicyStats{UID: "uid-enforced", Namespace: "shop", Name: "enforced", Generation: 2,
		Allowed: 10, Limited: 5, NearLimit: 2} // remaining 1 and 0 are under 2
	if !reflect.DeepEqual(got, want) {
		t.Errorf("enforced:\n got %+v\nwant %+v", got, want)
	}
	// The shadow policy saw every request (denials spend nothing, so it
	// counts on): 4 allowed, 11 would-be denials, none enforced.
	if s := statsOf(t, svc, "shadow"); s.Allowed != 4 || s.ShadowLimited != 11 || s.Limited != 0 {
		t.Errorf("shadow: %+v, want allowed 4, shadowLimited 11, limited 0", s)
	}

	// A policy that leaves the snapshot leaves the stats.
	first, _, _ := strings.Cut(fmt.Sprintf(statsPolicies, 3), "\n---\n")
	snap, err := config.Parse("inline", []byte(first))
	if err != nil {
		t.Fatal(err)
	}
	svc.Swap(snap)
	if ps := svc.PolicyStats(); len(ps) != 1 || ps[0].Name != "enforced" || ps[0].Allowed != 10 {
		t.Errorf("after the shadow policy left: %+v", ps)
	}

	off := service.New(st, service.Options{DisablePolicyStats: true})
	off.Swap(statsSnapshot(t, 1))
	if ps := off.PolicyStats(); len(ps) != 0 {
		t.Errorf("DisablePolicyStats: %+v, want none", ps)
	}
}

// The hottest descriptor values are off by default; on, each policy
// reports its top K of the last complete interval, values hashed, and the
// same figures go to /metrics.
func TestPolicyStatsHottest(t *testing.T) {
	st := memory.New(memory.Options{})
	t.Cleanup(func() { _ = st.Close() })
	ctx := context.Background()
	kim := []config.Entry{{Key: "user", Value: "kim"}}
	lee := []config.Entry{{Key: "user", Value: "lee"}}

	off := service.New(st, service.Options{})
	off.Swap(statsSnapshot(t, 1))
	off.Check(ctx, "shop", kim, 1)
	if s := statsOf(t, off, "enforced"); s.Hottest != nil || !s.HottestSince.IsZero() {
		t.Fatalf("hottest values without Options.Top: %+v", s)
	}

	reg := prometheus.NewRegistry()
	key := []byte("the fleet's key: 32 bytes, test.")
	svc := service.New(st, service.Options{Registerer: reg, Top: service.TopOptions{K: 1, Key: key}})
	now := time.Date(2026, 11, 22, 10, 0, 30, 0, time.UTC)
	service.SetClock(svc, func() time.Time { return now })
	svc.Swap(statsSnapshot(t, 1))
	for range 12 {
		svc.Check(ctx, "shop", lee, 1) // 10 allowed, 2 limited
	}
	svc.Check(ctx, "shop", kim, 1)
	now = now.Add(time.Minute)
	s := statsOf(t, svc, "enforced")
	want := []service.HotValue{{Value: "user=" + hmac16(key, "lee"), Requests: 12, Limited: 2}}
	if !reflect.DeepEqual(s.Hottest, want) || !s.HottestSince.Equal(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)) {
		t.Fatalf("hottest %+v since %v, want %+v since 10:00", s.Hottest, s.HottestSince, want)
	}
	// A swap keeps the sketch, as it keeps the counts.
	svc.Swap(statsSnapshot(t, 2))
	if s := statsOf(t, svc, "enforced"); !reflect.DeepEqual(s.Hottest, want) {
		t.Fatalf("after a swap: %+v", s.Hottest)
	}
	n, err := testutil.GatherAndCount(reg, "sluice_hottest_descriptor_requests", "sluice_hottest_descriptor_limited")
	if err != nil || n != 4 { // one value each of two policies, two metrics
		t.Fatalf("hottest series: %d, %v; want 4", n, err)
	}
}

// hmac16 is the first 64 bits of v's HMAC-SHA-256 under key, in hex.
func hmac16(key []byte, v string) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(v))
	return hex.EncodeToString(mac.Sum(nil)[:8])
}
