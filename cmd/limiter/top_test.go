package main_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/sluice-dev/sluice/api/limiterwire"
)

// top runs kubectl sluice top as s with args, answering its JSON and the
// raw output.
func (x *explainSetup) top(t *testing.T, s rbacv1.Subject, args ...string) (limiterwire.Top, string) {
	t.Helper()
	code, out, errOut := plugin(t, append([]string{"top", "--kubeconfig", x.kubeconfigOf(s), "--limiter", x.p.adminURL, "--fleet", x.fleet, "-o", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("top %q as %s: exit %d: %s", args, s.Name, code, errOut)
	}
	var top limiterwire.Top
	if err := json.Unmarshal([]byte(out), &top); err != nil {
		t.Fatalf("top as %s: %v\n%s", s.Name, err, out)
	}
	return top, out
}

func topNames(top limiterwire.Top) []string {
	var names []string
	for _, p := range top.Policies {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	return names
}

// hashedValue is how --top-descriptor-values=hash shows a user: its key,
// then 16 hex digits of the value.
var hashedValue = regexp.MustCompile(`^user=[0-9a-f]{16}$`)

// kubectl sluice top, against a real limiter after the two checks of
// setUpExplain: tenant A sees its three policies, ranked by decisions or
// by denials, with the hottest user hashed as status shows it; the
// platform team sees all five with -A.
func TestKubectlSluiceTop(t *testing.T) {
	x := setUpExplain(t, "--top-descriptors", "3", "--top-descriptor-interval", "1s")
	nsA := x.nsA
	a, _ := x.top(t, x.tenantA, "-n", nsA)
	wantA := []string{nsA + "/per-ip", nsA + "/per-plan", nsA + "/per-user"}
	if got := topNames(a); !slices.Equal(got, wantA) {
		t.Errorf("tenant A, -n %s: %q, want %q (two decisions each, then by name)", nsA, got, wantA)
	}
	for _, p := range a.Policies {
		if p.Decisions != 2 {
			t.Errorf("%s/%s: %d decisions, want 2: %+v", p.Namespace, p.Name, p.Decisions, p)
		}
	}
	// By denials: per-plan (never denied) comes last.
	limited, _ := x.top(t, x.tenantA, "-n", nsA, "--sort", "limited")
	if got := topNames(limited); len(got) != 3 || got[2] != nsA+"/per-plan" || limited.Sort != limiterwire.TopSortLimited {
		t.Errorf("tenant A by denials: %q (sort %s), want per-plan last", got, limited.Sort)
	}
	if one, _ := x.top(t, x.tenantA, "-n", nsA, "--top", "1"); len(one.Policies) != 1 {
		t.Errorf("--top 1: %q", topNames(one))
	}

	// The hottest user of per-user, hashed: it shows once an interval
	// with requests has completed, so keep sending them.
	req := `{"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}`
	eventually(t, "per-user's hottest user in top", func() (bool, string) {
		if code, _, body := x.p.post(t, "/v1/ratelimit/check", req); code != 429 {
			return false, fmt.Sprintf("check: %d %s", code, body)
		}
		top, raw := x.top(t, x.tenantA, "-n", nsA)
		for _, p := range top.Policies {
			if p.Name == "per-user" && len(p.Hottest) == 1 && p.HottestSince != nil {
				h := p.Hottest[0]
				return hashedValue.MatchString(h.Value) && h.Requests >= 1 && h.Limited >= 1 && !strings.Contains(raw, "alice"), raw
			}
		}
		return false, raw
	})

	all, _ := x.top(t, x.platform, "-A", "--top", "50")
	if got := topNames(all); len(got) != 5 || !slices.Contains(got, x.nsB+"/secret-per-path") || !slices.Contains(got, x.nsB+"/trial-per-region") {
		t.Errorf("platform, -A: %q, want all five policies", got)
	}

	// The text a person reads, again once an interval with requests has
	// completed.
	eventually(t, "top's text with per-user's hottest keys", func() (bool, string) {
		if code, _, body := x.p.post(t, "/v1/ratelimit/check", req); code != 429 {
			return false, fmt.Sprintf("check: %d %s", code, body)
		}
		code, out, errOut := plugin(t, "top", "--kubeconfig", x.kubeconfigOf(x.tenantA), "--limiter", x.p.adminURL, "--fleet", x.fleet, "-n", nsA)
		return code == 0 && strings.Contains(out, "POLICY") && strings.Contains(out, nsA+"/per-user") &&
			strings.Contains(out, "Hottest keys of "+nsA+"/per-user"), fmt.Sprintf("exit %d, %s:\n%s", code, errOut, out)
	})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--top", "51"}, "--top 51: want 1 to 50"},
		{[]string{"--sort", "name"}, `--sort "name": want decisions or limited`},
		{[]string{"-A", "-n", nsA}, "give one"},
	} {
		code, _, errOut := plugin(t, append([]string{"top", "--kubeconfig", x.kubeconfigOf(x.tenantA), "--limiter", x.p.adminURL, "--fleet", x.fleet}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("top %q: exit %d, %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

// TestAttackTopAnotherNamespace: tenant A asks top for tenant B's
// namespace, and for every namespace. It learns nothing of B: no policy,
// name, count or hottest key, not even that B has policies. One who may
// read policies but not call top is refused.
func TestAttackTopAnotherNamespace(t *testing.T) {
	x := setUpExplain(t)
	b, raw := x.top(t, x.tenantA, "-n", x.nsB)
	if len(b.Policies) != 0 || b.Incomplete {
		t.Errorf("tenant A, -n %s: %q (incomplete %v), want nothing", x.nsB, topNames(b), b.Incomplete)
	}
	all, rawAll := x.top(t, x.tenantA, "-A", "--top", "50")
	if got, want := topNames(all), []string{x.nsA + "/per-ip", x.nsA + "/per-plan", x.nsA + "/per-user"}; !slices.Equal(got, want) {
		t.Errorf("tenant A, -A: %q, want its own three", got)
	}
	for _, leak := range []string{x.nsB, "secret-per-path", "trial-per-region"} {
		if strings.Contains(raw, leak) || strings.Contains(rawAll, leak) {
			t.Errorf("tenant A's top names %q:\n%s\n%s", leak, raw, rawAll)
		}
	}
	code, _, errOut := plugin(t, "top", "--kubeconfig", x.kubeconfigOf(x.outsider), "--limiter", x.p.adminURL, "--fleet", x.fleet, "-A")
	if code != 1 || !strings.Contains(errOut, "403") {
		t.Errorf("outsider: exit %d: %s, want 1 and 403", code, errOut)
	}
}
