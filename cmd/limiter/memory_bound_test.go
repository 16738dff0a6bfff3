package main_test

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sync/errgroup"
)

// TestAttackMemoryStoreFlood: a real limiter in memory mode (the chart's
// default), with --memory-max-bytes 16MiB, takes a flood of SlidingLog
// counters of the largest limit under 120,000 distinct users (about 20MB
// of counters by the store's estimate). The store was bounded by key
// count only (a million), so such a flood grew the process until the
// kernel killed it and every tenant's counters with it. Now the store's
// byte gauge stays under the cap, it evicts, the process's heap stays
// bounded, and another domain's counters still count.
func TestAttackMemoryStoreFlood(t *testing.T) {
	const maxBytes = 16 << 20
	path := filepath.Join(t.TempDir(), "policies.yaml")
	writeAtomic(t, path, policy(3)+`---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: flood, namespace: shop}
spec:
  domain: flood
  descriptors: [{key: user}]
  algorithm: SlidingLog
  rate: {limit: 10000, period: 1h}
`)
	p := startLimiter(t, "--policies", path, "--memory-max-bytes", fmt.Sprint(maxBytes))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	var g errgroup.Group
	g.SetLimit(16)
	const users = 120_000
	for i := range users {
		g.Go(func() error {
			body := `{"domain":"flood","descriptors":[{"entries":[{"key":"user","value":"u` + fmt.Sprint(i) + `"}]}]}`
			resp, err := client.Post(p.http+"/v1/ratelimit/check", "application/json", strings.NewReader(body))
			if err != nil {
				return err
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("flood user %d: %d %s", i, resp.StatusCode, b)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	mfs := p.metrics(t)
	value := func(name string) float64 {
		mf := mfs[name]
		if mf == nil || len(mf.Metric) == 0 {
			t.Fatalf("no %s in /metrics", name)
		}
		return sampleValue(mf.Metric[0])
	}
	used, max, evicted, keys := value("sluice_memory_store_bytes"), value("sluice_memory_store_max_bytes"),
		value("sluice_memory_store_evictions_total"), value("sluice_memory_store_keys")
	heap := value("go_memstats_heap_inuse_bytes")
	t.Logf("after %d flood users: store %v bytes of %v in %v keys, %v evicted; heap in use %v bytes", users, used, max, keys, evicted, heap)
	if max != maxBytes || used > max {
		t.Errorf("sluice_memory_store_bytes %v, sluice_memory_store_max_bytes %v: want at most %d", used, max, maxBytes)
	}
	if evicted == 0 || keys >= users {
		t.Errorf("%v keys kept and %v evicted after %d flood users: the bound did not hold", keys, evicted, users)
	}
	// The heap holds the store and the rest of the process (policies,
	// connections, the runtime): well within four times the store's cap.
	if heap > 4*maxBytes {
		t.Errorf("heap in use %v bytes after the flood, more than 4 × --memory-max-bytes", heap)
	}
	p.expectLimit(t, "calm", 3)
}
