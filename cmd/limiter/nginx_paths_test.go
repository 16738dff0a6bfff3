package main_test

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// Attack (issue 40, 3), through the shipped nginx sample, which sends
// $request_uri as X-Original-URI: with 2 logins a minute on /login, each
// spelling of /login made a fresh counter. Now, after 2 logins, each is
// denied (the /login counter) or refused (an encoded slash), and nginx
// answers 429 without the app serving it.
func TestAttackNginxForwardAuthPathSpellings(t *testing.T) {
	bin := nginxBinary(t)
	app, served := countingApp(t)
	path := filepath.Join(t.TempDir(), "policies.yaml")
	writeAtomic(t, path, `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: LimiterFleet
metadata: {name: edge, namespace: web}
spec:
  forwardAuth:
    - domain: gateway
      descriptors:
        - {key: path, from: Path}
        - {key: remote_address, from: ClientIP}
      denyStatus: 403
      pathCase: Insensitive
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: logins-per-client, namespace: web}
spec:
  domain: gateway
  descriptors: [{key: path, value: /login}, {key: remote_address}]
  algorithm: FixedWindow
  rate: {limit: 2, period: 1h}
`)
	lim := startLimiter(t, "--policies", path, "--trusted-proxies", "127.0.0.1")
	proxy := startNginx(t, bin, app, strings.TrimPrefix(lim.http, "http://"))
	for i := range 2 {
		if code := proxy.getPath(t, "/login"); code != http.StatusOK {
			t.Fatalf("login %d of 2: %d\n%s", i+1, code, proxy.stderr)
		}
	}
	for _, spelling := range []string{"/login;jsessionid=x", "/login;", "/LOGIN", "/login%2f", "/login."} {
		if code := proxy.getPath(t, spelling); code != http.StatusTooManyRequests {
			t.Errorf("%s after 2 logins of 2: %d, want 429 (the /login counter, or refused)", spelling, code)
		}
	}
	// Another path is no spelling of /login.
	if code := proxy.getPath(t, "/login2;x"); code != http.StatusOK {
		t.Errorf("/login2;x: %d, want 200\n%s", code, proxy.stderr)
	}
	if got := served.Load(); got != 3 {
		t.Errorf("the app served %d requests, want 3: a spelling of /login got through", got)
	}
}

// getPath sends GET path through nginx, as written, and returns the status.
func (n *nginxProxy) getPath(t *testing.T, path string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, n.url+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = path // sent as is: no re-encoding by the client
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s through nginx: %v\n%s", path, err, n.stderr)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
