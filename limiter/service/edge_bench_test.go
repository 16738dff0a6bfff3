package service_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

// edgeBenchConfig is an envoyproxy/ratelimit file exercising each property
// its compiled policies carry: a plain limit, an unlimited one, a quota,
// a limit replaced by name, and the domain's override policies.
const edgeBenchConfig = `domain: erl
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000000, name: user}
  - key: vip
    rate_limit: {unlimited: true}
  - key: quota
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 1000000000, replaces: [{name: user}]}
`

// BenchmarkEdgeDecide is one memory-store decision in an ERL domain,
// allowed, for each kind of compiled property the domain's policies carry.
func BenchmarkEdgeDecide(b *testing.B) {
	path := filepath.Join(b.TempDir(), "erl.yaml")
	if err := os.WriteFile(path, []byte(edgeBenchConfig), 0o644); err != nil {
		b.Fatal(err)
	}
	snap, err := config.LoadPath(path)
	if err != nil {
		b.Fatal(err)
	}
	st := memory.New(memory.Options{})
	b.Cleanup(func() { _ = st.Close() })
	svc := service.New(st, service.Options{})
	svc.Swap(snap)
	one := func(k, v string) service.Descriptor {
		return service.Descriptor{Entries: []compiled.Entry{{Key: k, Value: v}}}
	}
	own := one("user", "u")
	own.LimitOverride, own.Override = true, compiled.UnitRate{RequestsPerUnit: 1000000000, Unit: 3}
	for _, tc := range []struct {
		name string
		ds   []service.Descriptor
	}{
		{"limit", []service.Descriptor{one("user", "u")}},
		{"unlimited", []service.Descriptor{one("vip", "v")}},
		{"quota", []service.Descriptor{one("quota", "q")}},
		{"replaces", []service.Descriptor{one("user", "u"), one("route", "r")}},
		{"own-limit", []service.Descriptor{own}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			req := &service.Request{Domain: "erl", Descriptors: tc.ds}
			var resp service.Response
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := svc.DecideInto(ctx, req, &resp); err != nil || resp.OverLimit {
					b.Fatalf("not allowed: %v %+v", err, resp.Reported)
				}
			}
		})
	}
}
