package controllers_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/redistest"
)

// DashboardExpositionsEnv names the directory TestDashboardExpositions
// writes to: make test-dashboard sets it, then runs hack/dashboardcheck
// over what it wrote.
const dashboardExpositionsEnv = "SLUICE_DASHBOARD_EXPOSITIONS"

// TestDashboardExpositions scrapes what a real limiter (on a real Redis,
// with a two-tier and an ordinary policy, some requests allowed and some
// denied) and the operator that enforced those policies expose, four
// times, 30 requests apart, into $SLUICE_DASHBOARD_EXPOSITIONS as
// {limiter,operator}-{1,2,3,4}.prom; between the first two a third policy
// is applied and enforced, between the second and third Redis stops
// (errors, an open breaker, decisions failed open), so that every series
// has two samples by the last. hack/dashboardcheck runs every query of the
// chart's Grafana dashboard over them. Without the variable it has
// nothing to write to and is skipped (make test-integration sets it).
func TestDashboardExpositions(t *testing.T) {
	dir := os.Getenv(dashboardExpositionsEnv)
	if dir == "" {
		t.Skip("$" + dashboardExpositionsEnv + " is not set: make test-dashboard runs this test with it")
	}
	needSuite(t)
	ctx := context.Background()
	srv := redistest.Start(t)
	ns := namespace(t, "dashboard")
	fleet := &v1alpha1.LimiterFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dash"},
		Spec: v1alpha1.LimiterFleetSpec{
			Replicas:       ptr.To(int32(1)),
			PolicySelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "dash"}},
			Redis:          v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisExternal), Addresses: []string{srv.Addr}},
		},
	}
	if err := k8s.Create(ctx, fleet); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteFleet(t, fleet) })
	pods := fleetPodsWithArgs(t, fleet, 1, "redis://"+srv.Addr, "--redis-timeout=2s")
	tier := statsPolicy(ns, "two-tier", "dash", "dash-tier", 1000, false)
	tier.Spec.Algorithm = ptr.To(v1alpha1.TokenBucket)
	tier.Spec.LocalTier = &v1alpha1.LocalTier{Enabled: ptr.To(true), MaxOvershoot: ptr.To(intstr.FromString("5%"))}
	small := statsPolicy(ns, "per-user", "dash", "dash-api", 2, false)
	enforce := func(p *v1alpha1.RateLimitPolicy) {
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, p) })
		waitPolicy(t, ns, p.Name, v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
	}
	enforce(tier)
	enforce(small)
	traffic := func() {
		for i := range 15 {
			pods[0].check(t, "dash-tier", "user", "kim")
			pods[0].check(t, "dash-api", "user", fmt.Sprintf("u%d", i%3)) // 2 allowed per user, then denied
		}
	}
	// Between the scrapes: a policy applied and enforced (apply-to-enforced),
	// then Redis gone (errors, an open breaker, decisions failed open).
	between := []func(){
		func() { enforce(statsPolicy(ns, "late", "dash", "dash-late", 10, false)) },
		func() {
			srv.Stop()
			eventually(t, 2*time.Minute, "the limiter's Redis breaker open", func() error {
				pods[0].check(t, "dash-api", "user", "u9")
				if v := pods[0].metric(t, "sluice_redis_breaker_opened_total"); v < 1 {
					return fmt.Errorf("sluice_redis_breaker_opened_total %v", v)
				}
				return nil
			})
		},
		func() {}, // more traffic without Redis: a second sample of its errors
	}
	for scrape := 1; scrape <= len(between)+1; scrape++ {
		if scrape > 1 {
			between[scrape-2]()
		}
		traffic()
		resp, err := getWithToken("https://"+pods[0].adminAddr+"/metrics", metricsToken)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("the limiter's /metrics: %d %v", resp.StatusCode, err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("limiter-%d.prom", scrape)), body, 0o644); err != nil {
			t.Fatal(err)
		}
		families, err := ctrlmetrics.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("operator-%d.prom", scrape)))
		if err != nil {
			t.Fatal(err)
		}
		enc := expfmt.NewEncoder(f, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, mf := range families {
			if err := enc.Encode(mf); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
