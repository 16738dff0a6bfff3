package main_test

import (
	"path/filepath"
	"testing"
)

// TestGCPercentUnderMemoryLimit: a real limiter given a memory limit
// (GOMEMLIMIT, as the operator sets it) and no GOGC collects at 400%
// (app.GCPercent), so that its small heap is not collected several times a
// second; with GOGC given, or without a limit, the runtime's setting
// stands. The runtime's own gauge on /metrics says which it runs with.
func TestGCPercentUnderMemoryLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	writeAtomic(t, path, policy(3))
	for _, tc := range []struct {
		name string
		env  []string
		want float64
	}{
		{"memory limit", []string{"GOMEMLIMIT=241591860", "GOGC="}, 400},
		{"memory limit and GOGC", []string{"GOMEMLIMIT=241591860", "GOGC=150"}, 150},
		{"no memory limit", []string{"GOMEMLIMIT=", "GOGC="}, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startLimiterEnv(t, tc.env, "--policies", path)
			mf := p.metrics(t)["go_gc_gogc_percent"]
			if mf == nil || len(mf.Metric) == 0 {
				t.Fatalf("no go_gc_gogc_percent in /metrics")
			}
			if got := sampleValue(mf.Metric[0]); got != tc.want {
				t.Errorf("go_gc_gogc_percent %v with %v, want %v", got, tc.env, tc.want)
			}
		})
	}
}
