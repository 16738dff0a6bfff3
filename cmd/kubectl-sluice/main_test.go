package main

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api/limiterwire"
)

func TestExplainQuery(t *testing.T) {
	q, err := explainQuery("shop", []string{"user=alice", "domain=x", "path=/a=b"})
	if err != nil {
		t.Fatal(err)
	}
	// Every key is an entry, even one named domain; a value may hold "=".
	if got, want := q.Encode(), "domain=shop&entry.domain=x&entry.path=%2Fa%3Db&entry.user=alice"; got != want {
		t.Errorf("query %s, want %s", got, want)
	}
	for _, c := range []struct {
		domain string
		pairs  []string
		want   string
	}{
		{"", []string{"a=b"}, "--domain is required"},
		{"shop", nil, "key=value arguments"},
		{"shop", []string{"novalue"}, `argument "novalue": want key=value`},
		{"shop", []string{"=v"}, `argument "=v": want key=value`},
		{"shop", []string{"a=1", "a=2"}, `key "a" is given twice`},
	} {
		if _, err := explainQuery(c.domain, c.pairs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("explainQuery(%q, %q): %v, want %q", c.domain, c.pairs, err, c.want)
		}
	}
}

func TestVerdict(t *testing.T) {
	for _, c := range []struct {
		name     string
		policies []limiterwire.ExplainedPolicy
		want     string
	}{
		{"no policy", nil, "ALLOWED: no policy of domain shop matches"},
		{"room", []limiterwire.ExplainedPolicy{{Namespace: "a", Name: "p", Remaining: 3}}, "ALLOWED: every enforcing policy"},
		{"shadow and soft never deny", []limiterwire.ExplainedPolicy{{Name: "s", WouldDeny: true, Shadow: true}, {Name: "t", WouldDeny: true, Soft: true}}, "ALLOWED"},
		{"longest wait", []limiterwire.ExplainedPolicy{{Namespace: "a", Name: "p", WouldDeny: true, RetryAfterSeconds: 5}, {Redacted: true, WouldDeny: true, RetryAfterSeconds: 90}},
			"DENIED by a/p, a policy you may not see: it would pass in 1m30s at most."},
	} {
		if got := verdict(&limiterwire.Explanation{Domain: "shop", Policies: c.policies}); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// The admin plane's URL: the user's token never crosses the network in
// the clear, and usage errors exit 2 naming what is wrong.
func TestExplainUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"explain", "--domain", "shop", "a=b"}, 2, "--limiter is required"},
		{[]string{"explain", "--limiter", "https://10.0.0.1:8082", "--fleet", "edge/f", "--domain", "shop", "--kubeconfig", "/nonexistent", "a=b"}, 1, "kubeconfig"},
		{[]string{"explain", "--limiter", "http://10.0.0.1:8082", "--fleet", "edge/f", "--domain", "shop", "a=b"}, 2, "in the clear"},
		{[]string{"explain", "--limiter", "http://127.0.0.1:8082", "--domain", "shop", "a=b"}, 2, "--fleet is required"},
		{[]string{"explain", "--limiter", "http://127.0.0.1:8082", "--fleet", "edge", "--domain", "shop", "a=b"}, 2, `--fleet "edge": want namespace/name`},
		{[]string{"explain", "--limiter", "http://127.0.0.1:8082", "--fleet", "edge/f", "-o", "yaml", "--domain", "shop", "a=b"}, 2, `-o "yaml": want text or json`},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{nil, 2, "Commands:"},
	} {
		var out, errOut bytes.Buffer
		if code := run(c.args, &out, &errOut); code != c.code || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%q: exit %d, %q; want %d and %q", c.args, code, errOut.String(), c.code, c.want)
		}
	}
}

func TestCleartextTokenRefused(t *testing.T) {
	_, err := callExplain("t", "http://10.0.0.1:8082", "", "", nil)
	if err == nil || !strings.Contains(err.Error(), "in the clear") {
		t.Errorf("plain HTTP to another host: %v, want a refusal", err)
	}
}

// checkAudience reads the aud claim, a string or a list, and takes the
// admin audience alone.
func TestCheckAudience(t *testing.T) {
	jwt := func(claims string) string {
		return "e30." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".sig"
	}
	const aud = "sluice-limiter-admin.edge.f"
	for _, c := range []struct {
		token string
		ok    bool
	}{
		{jwt(`{"aud":"sluice-limiter-admin.edge.f"}`), true},
		{jwt(`{"aud":["sluice-limiter-admin.edge.f"]}`), true},
		{jwt(`{"aud":["https://kubernetes.default.svc"]}`), false},
		{jwt(`{"aud":["sluice-limiter-admin.edge.f","https://kubernetes.default.svc"]}`), false},
		{jwt(`{"aud":"sluice-limiter-admin.edge.g"}`), false},
		{jwt(`{}`), false},
		{"not-a-jwt", false},
	} {
		if err := checkAudience(c.token, aud); (err == nil) != c.ok {
			t.Errorf("checkAudience(%s): %v, want ok %v", c.token, err, c.ok)
		}
	}
}
