package service_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

// erlStatsService is a service on a memory store with the ERL file cfg
// (domain erl), its metrics and the edge's ERL statistics
// (server.ERLStats) in the registry it returns. The store's clock stands
// still: ERL's limits are fixed windows of a unit (a minute, a second),
// and none may end between the requests a test counts.
func erlStatsService(t *testing.T, cfg string, opts service.Options) (*service.Service, *prometheus.Registry) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "erl.yaml")
	if err := os.WriteFile(path, []byte("domain: erl\ndescriptors:\n"+cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err := config.LoadPath(path)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	clock := storetest.NewClock()
	st := memory.New(memory.Options{Clock: clock.Now, SweepInterval: -1})
	t.Cleanup(func() { _ = st.Close() })
	svc := service.New(st, opts)
	reg.MustRegister(server.ERLStats(svc))
	svc.Swap(snap)
	return svc, reg
}

// erlHits reads sluice_erl_hits_total: by key, by stat.
func erlHits(t *testing.T, reg *prometheus.Registry) map[string]map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_erl_hits_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["domain"] != "erl" {
				t.Errorf("series %v: domain %q, want erl", l, l["domain"])
			}
			if out[l["key"]] == nil {
				out[l["key"]] = map[string]float64{}
			}
			out[l["key"]][l["stat"]] = m.GetCounter().GetValue()
		}
	}
	return out
}

func decideHits(t *testing.T, svc *service.Service, hits uint64, d service.Descriptor) {
	t.Helper()
	if _, err := svc.Decide(context.Background(), &service.Request{Domain: "erl", HitsAddend: hits, Descriptors: []service.Descriptor{d}}); err != nil {
		t.Fatal(err)
	}
}

// TestERLHitStats: ERL's per-limit statistics count hits as ERL's base
// limiter does (src/limiter/base_limiter.go): near_limit past 80% of the
// limit, over_limit for denied hits, shadow_mode for a shadow_mode
// limit's; an unlimited limit counts nothing.
func TestERLHitStats(t *testing.T) {
	svc, reg := erlStatsService(t, `  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: s
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
`, service.Options{})
	for range 3 {
		decideHits(t, svc, 0, desc("user", "a"))
	}
	decideHits(t, svc, 2, desc("user", "a")) // 5 of 5: one hit past 4, the 80% mark
	decideHits(t, svc, 0, desc("user", "a")) // over
	decideHits(t, svc, 0, desc("user", "b")) // its own counter
	for range 3 {
		decideHits(t, svc, 0, desc("s", "x"))
	}
	decideHits(t, svc, 0, desc("free", "x"))
	got := erlHits(t, reg)
	want := map[string]map[string]float64{
		"erl.user": {"total_hits": 7, "within_limit": 6, "near_limit": 1, "over_limit": 1, "shadow_mode": 0},
		"erl.s":    {"total_hits": 3, "within_limit": 1, "near_limit": 1, "over_limit": 2, "shadow_mode": 2},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("sluice_erl_hits_total:\n got %v\nwant %v", got, want)
	}
}

// TestERLMetricKeys: detailed_metric keys a limit's statistics by every
// entry's value, value_to_metric by the values of its levels (a wildcard
// keeps its pattern, share_threshold too), as ERL's GetLimit builds them.
func TestERLMetricKeys(t *testing.T) {
	svc, reg := erlStatsService(t, `  - key: route
    value_to_metric: true
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: hour, requests_per_unit: 10}
  - key: path
    value_to_metric: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: api
    value: v1*
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: tenant
    value: t-*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: op
        value_to_metric: true
        rate_limit: {unit: hour, requests_per_unit: 10}
`, service.Options{})
	decideHits(t, svc, 0, desc("route", "r1", "user", "u1"))
	decideHits(t, svc, 0, desc("path", "/x"))
	decideHits(t, svc, 0, desc("api", "v1abc"))
	decideHits(t, svc, 0, desc("tenant", "t-7", "op", "read"))
	got := erlHits(t, reg)
	for _, key := range []string{"erl.route_r1.user_u1", "erl.path_/x", "erl.api_v1*", "erl.tenant_t-*.op_read"} {
		if got[key]["total_hits"] != 1 {
			t.Errorf("key %s: %v, want one hit (keys: %v)", key, got[key], got)
		}
	}
	if len(got) != 4 {
		t.Errorf("%d keys, want 4: %v", len(got), got)
	}
}

// TestAttackERLMetricValues: a client sends a new value on every request
// to a detailed_metric limit, to grow the metric's series (and the
// limiter's memory) without bound. Past Options.HitStatsKeys keys built
// from values, a new value's hits count under the limit's full key: the
// series stop growing, and no hit is lost.
func TestAttackERLMetricValues(t *testing.T) {
	svc, reg := erlStatsService(t, `  - key: user
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 10}
`, service.Options{HitStatsKeys: 5})
	for i := range 50 {
		decideHits(t, svc, 0, desc("user", fmt.Sprintf("u%d", i)))
	}
	got := erlHits(t, reg)
	total := 0.0
	for _, stats := range got {
		total += stats["total_hits"]
	}
	if len(got) != 6 || got["erl.user"]["total_hits"] != 45 || total != 50 {
		t.Fatalf("%d keys, erl.user %v, %v hits in all; want 6 keys (5 values and the full key, with 45 hits), 50 hits: %v",
			len(got), got["erl.user"], total, got)
	}
}
