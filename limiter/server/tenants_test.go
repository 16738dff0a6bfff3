package server_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

// twoNamespaces: alice's logins (namespace a, 3 in 720h) and namespace
// b's long quotas (720h), in one domain. Both windows are long: a fixed
// window of a minute rolled over between alice's checks in a CI run (her
// last check met a fresh window, not an eviction).
const twoNamespaces = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: logins, namespace: a}
spec:
  domain: api
  descriptors: [{key: user}]
  algorithm: FixedWindow
  rate: {limit: 3, period: 720h}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: quotas, namespace: b}
spec:
  domain: api
  descriptors: [{key: tenant}]
  algorithm: FixedWindow
  rate: {limit: 10, period: 720h}
`

// Attack (issue 40, 4), through the HTTP check of a server on a memory
// store of 640 keys: the service names each counter's namespace to the
// store, so namespace b's 960 long counters evict b's own, and alice
// (namespace a) stays denied.
func TestAttackMemoryEvictionAcrossNamespacesHTTP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(path, []byte(twoNamespaces), 0o600); err != nil {
		t.Fatal(err)
	}
	snap, err := config.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New(memory.Options{MaxKeys: 640})
	t.Cleanup(func() { _ = st.Close() })
	e := start(t, envOptions{snapshot: snap, store: st})
	alice := checkBody("user", "alice")
	for i := range 4 {
		if resp, body := postWithKey(t, e, alice); (resp.StatusCode == http.StatusOK) != (i < 3) {
			t.Fatalf("alice's check %d of a limit of 3: %d %s", i+1, resp.StatusCode, body)
		}
	}
	for i := range 960 {
		if resp, body := postWithKey(t, e, checkBody("tenant", fmt.Sprint("b-", i))); resp.StatusCode != http.StatusOK {
			t.Fatalf("namespace b's check %d: %d %s", i+1, resp.StatusCode, body)
		}
	}
	if st.Evicted() == 0 {
		t.Fatalf("960 counters in a store of 640: none evicted (%d stored)", st.Len())
	}
	if resp, body := postWithKey(t, e, alice); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("alice after namespace b's 960 counters (%d evicted): %d %s, want 429: her counter kept", st.Evicted(), resp.StatusCode, body)
	}
}
