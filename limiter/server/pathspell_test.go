package server_test

import (
	"fmt"
	"net/http"
	"net/netip"
	"testing"

	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/server"
)

// loginSpellings are spellings of /login that backends serve as /login
// (issue 40, 3), each of which got a fresh counter.
var loginSpellings = []string{"/login;jsessionid=x", "/login;", "/LOGIN", "/login%2f", "/login."}

// startLogin serves testdata/forward-auth-login.yaml: 2 logins per client
// in a FixedWindow of 720h (a minute's window could end between a test's
// logins), pathCase Insensitive, denyStatus 403.
func startLogin(t *testing.T) *env {
	t.Helper()
	snap, err := config.LoadFile("testdata/forward-auth-login.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return start(t, envOptions{snapshot: snap, trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
}

// loginCall sends one forward-auth call for path from client, as nginx's
// sample does (X-Original-URI), and returns the status and the reason.
func loginCall(t *testing.T, e *env, client, path string) (int, string) {
	t.Helper()
	resp, _ := forwardAuth(t, e, http.MethodGet, "web", map[string]string{"X-Original-URI": path, "X-Forwarded-For": client})
	return resp.StatusCode, resp.Header.Get(server.HeaderReason)
}

// Attack (issue 40, 3): with 2 logins a minute on /login, each spelling
// above made a fresh counter. Now, after 2 admitted, each is denied on
// the /login counter or refused with a reason (an encoded slash), with
// the mapping's denyStatus either way.
func TestAttackForwardAuthPathSpellings(t *testing.T) {
	e := startLogin(t)
	for i, spelling := range loginSpellings {
		t.Run(spelling, func(t *testing.T) {
			client := fmt.Sprintf("198.51.100.%d", i+1)
			for n := range 2 {
				if code, reason := loginCall(t, e, client, "/login"); code != http.StatusOK {
					t.Fatalf("login %d of 2: %d (%s)", n+1, code, reason)
				}
			}
			if code, reason := loginCall(t, e, client, spelling); code != http.StatusForbidden {
				t.Errorf("%s after 2 logins of 2: %d (reason %q), want 403: the /login counter, or refused", spelling, code, reason)
			}
		})
	}
	// The other way round: the spellings that count spend /login's units.
	client := "198.51.100.99"
	for _, spelling := range []string{"/login;jsessionid=x", "/LOGIN."} {
		if code, reason := loginCall(t, e, client, spelling); code != http.StatusOK {
			t.Fatalf("%s: %d (%s)", spelling, code, reason)
		}
	}
	if code, _ := loginCall(t, e, client, "/login"); code != http.StatusForbidden {
		t.Errorf("/login after two spellings of it: %d, want 403", code)
	}
}

// An encoded slash is refused with a reason from the first call, before
// any unit is spent: a denial with the mapping's status, never a 400 the
// gateway would fail open on.
func TestForwardAuthEncodedSlashRefused(t *testing.T) {
	e := startLogin(t)
	code, reason := loginCall(t, e, "198.51.100.200", "/login%2F")
	if code != http.StatusForbidden || reason == "" {
		t.Fatalf("/login%%2F: %d, reason %q; want 403 with a reason", code, reason)
	}
	if code, reason := loginCall(t, e, "198.51.100.200", "/login"); code != http.StatusOK {
		t.Fatalf("/login after a refused /login%%2F: %d (%s), want 200: a refusal spends nothing", code, reason)
	}
}
