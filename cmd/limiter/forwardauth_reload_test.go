package main_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// A policy file's LimiterFleet is hot-reloaded like its policies: a new
// forwardAuth mapping is served without a restart.
func TestForwardAuthHotReload(t *testing.T) {
	fleet := func(status string) string {
		return policy(1) + `---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: LimiterFleet
metadata: {name: edge}
spec:
  forwardAuth:
    - domain: shop
      denyStatus: ` + status + `
      descriptors: [{key: user, from: Header, header: X-User}]
`
	}
	path := filepath.Join(t.TempDir(), "policies.yaml")
	writeAtomic(t, path, fleet("403"))
	lim := startLimiter(t, "--policies", path)
	call := func() int {
		req, err := http.NewRequest(http.MethodGet, lim.http+"/v1/forward-auth/shop", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-User", "ann")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := call(); code != http.StatusOK {
		t.Fatalf("first call: %d", code)
	}
	if code := call(); code != http.StatusForbidden {
		t.Fatalf("over the limit: %d, want 403", code)
	}
	writeAtomic(t, path, fleet("418"))
	eventually(t, "the new denyStatus served", func() (bool, string) {
		code := call()
		return code == http.StatusTeapot, fmt.Sprintf("status %d", code)
	})

	// A bad mapping is refused; the last good one stays in force.
	writeAtomic(t, path, fleet("500"))
	eventually(t, "the bad file refused", func() (bool, string) {
		return strings.Contains(lim.log.String(), "denyStatus must be a 4xx status"), "the limiter's log:\n" + lim.log.String()
	})
	if code := call(); code != http.StatusTeapot {
		t.Fatalf("after a bad file: %d, want the last good mapping's 418", code)
	}
}
