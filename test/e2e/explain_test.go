package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// The explain step's tenants and domain.
const (
	explainDomain = "e2e-shop"
	tenantA       = "e2e-tenant-a"
	tenantB       = "e2e-tenant-b"
)

// explainStep is the journey's kubectl sluice explain, as
// docs/guides/kubectl-sluice.md runs it: the admin plane port-forwarded,
// its CA from the fleet's admin TLS Secret (ca.crt), a token of the caller's own
// ServiceAccount. Five policies of one domain in two tenants' namespaces
// match one request, sent twice from the client pod: tenant A sees its
// own allowed, denied and penalized policies, B's hidden one only as "a
// policy you may not see" and B's shadow one not at all; the platform
// team sees the hidden and shadow ones in full. Explaining spends nothing.
func (j *journey) explainStep(t *testing.T) {
	c, f := j.c, j.fleet
	for _, ns := range []string{tenantA, tenantB} {
		c.restrictedNamespace(t, ns)
	}
	j.allowDomainTo(t, explainDomain, tenantA, tenantB)
	sel := map[string]string{}
	if f.Spec.PolicySelector != nil {
		sel = f.Spec.PolicySelector.MatchLabels
	}
	c.apply(t, explainPolicies(sel))
	waitFor(t, "the five explain policies Enforced", 2*time.Minute, func() (bool, string) {
		for _, p := range [][2]string{{tenantA, "per-user"}, {tenantA, "per-plan"}, {tenantA, "per-ip"}, {tenantB, "secret-per-path"}, {tenantB, "trial-per-region"}} {
			if s, msg := condition(c.policy(t, p[0], p[1]).Status.Conditions, v1beta1.EnforcedCondition); s != metav1.ConditionTrue {
				return false, p[0] + "/" + p[1] + ": " + msg
			}
		}
		return true, ""
	})
	c.apply(t, explainRBAC)

	// The request, twice: the second is denied and strikes per-ip.
	svc := fmt.Sprintf("%s.%s.svc", resources.LimiterName(betaOf(f)), f.Namespace)
	req := `{"domain":"` + explainDomain + `","descriptors":[{"entries":[{"key":"user","value":"alice"},{"key":"plan","value":"free"},` +
		`{"key":"ip","value":"10.1.2.3"},{"key":"path","value":"/checkout"},{"key":"region","value":"eu"}]}]}`
	var answers []struct{ Status int }
	c.execJSON(t, &answers, appNS, clientPod, "/e2eclient", "http", "-n", "2", "-method", "POST",
		"-url", "http://"+svc+":8080/v1/ratelimit/check", "-data", req)
	if len(answers) != 2 || answers[0].Status != 200 || answers[1].Status != 429 {
		t.Fatalf("the request twice: %+v, want 200 then 429", answers)
	}

	url := c.portForward(t, f.Namespace, "deploy/"+resources.LimiterName(betaOf(f)), 8082)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	ca := &corev1.Secret{}
	if err := c.c.Get(context.Background(), client.ObjectKey{Namespace: f.Namespace, Name: resources.AdminTLSSecretName(betaOf(f))}, ca); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, ca.Data["ca.crt"], 0o600); err != nil {
		t.Fatal(err)
	}
	bin := c.buildPlugin(t, dir)
	entries := []string{"user=alice", "plan=free", "ip=10.1.2.3", "path=/checkout", "region=eu"}
	run := func(ns, sa string, extra ...string) string {
		t.Helper()
		token := filepath.Join(dir, ns+"-"+sa+".token")
		if err := os.WriteFile(token, []byte(strings.TrimSpace(c.kubectl(t, "create", "token", sa, "-n", ns, "--audience", limiterwire.FleetAdminAudience(f.Namespace, f.Name)))), 0o600); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"explain", "--kubeconfig", c.kubeconfig, "--limiter", url, "--limiter-ca", caFile,
			"--tls-server-name", svc, "--fleet", f.Namespace + "/" + f.Name, "--token-file", token, "--domain", explainDomain}, extra...)
		out, stderr, err := c.cmd("", bin, append(args, entries...)...)
		if err != nil {
			t.Fatalf("kubectl sluice explain as %s/%s: %v\n%s", ns, sa, err, stderr)
		}
		return out
	}
	explained := func(ns, sa string) (limiterwire.Explanation, string) {
		t.Helper()
		out := run(ns, sa, "-o", "json")
		var ex limiterwire.Explanation
		if err := json.Unmarshal([]byte(out), &ex); err != nil {
			t.Fatalf("explain as %s/%s: %v\n%s", ns, sa, err, out)
		}
		return ex, out
	}

	a, raw := explained(tenantA, "tenant")
	full := map[string]limiterwire.ExplainedPolicy{}
	redacted := 0
	for _, e := range a.Policies {
		if e.Redacted {
			redacted++
			if !e.WouldDeny {
				j.errorf(t, "tenant A: the hidden policy, redacted, would not deny: %+v", e)
			}
			continue
		}
		full[e.Namespace+"/"+e.Name] = e
	}
	for name, want := range map[string]func(limiterwire.ExplainedPolicy) bool{
		tenantA + "/per-user": func(e limiterwire.ExplainedPolicy) bool { // denied
			return e.WouldDeny && !e.Penalized && e.Remaining == 0 && e.Limit == 1 && e.RetryAfterSeconds > 0
		},
		tenantA + "/per-plan": func(e limiterwire.ExplainedPolicy) bool { // allowed
			return !e.WouldDeny && e.Limit == 1000 && e.Remaining >= 998
		},
		tenantA + "/per-ip": func(e limiterwire.ExplainedPolicy) bool { // penalized
			return e.WouldDeny && e.Penalized && e.RetryAfterSeconds > 60 && e.RetryAfterSeconds <= 900
		},
	} {
		if e, ok := full[name]; !ok || !want(e) {
			j.errorf(t, "tenant A: %s: %+v (found %v)", name, e, ok)
		}
	}
	if len(full) != 3 || redacted != 1 {
		j.errorf(t, "tenant A sees %d policies in full and %d redacted, want 3 and 1 (B's shadow one left out): %+v", len(full), redacted, a.Policies)
	}
	for _, leak := range []string{tenantB, "secret-per-path", "trial-per-region"} {
		if strings.Contains(raw, leak) {
			j.errorf(t, "tenant A's explanation names %q:\n%s", leak, raw)
		}
	}

	p, _ := explained(tenantB, "platform")
	byName := map[string]limiterwire.ExplainedPolicy{}
	for _, e := range p.Policies {
		if e.Redacted {
			j.errorf(t, "platform: a redacted policy: %+v", e)
		}
		byName[e.Name] = e
	}
	if e := byName["secret-per-path"]; !e.Hidden || e.Limit != 1 || !e.WouldDeny {
		j.errorf(t, "platform: secret-per-path %+v, want hidden, limit 1, would deny", e)
	}
	if e := byName["trial-per-region"]; !e.Shadow || !e.WouldDeny {
		j.errorf(t, "platform: trial-per-region %+v, want shadow, would deny", e)
	}
	// A spend would lower it; its token bucket refills one unit each 3.6s
	// meanwhile, so it may rise.
	if e := byName["per-plan"]; e.Remaining < full[tenantA+"/per-plan"].Remaining {
		j.errorf(t, "per-plan remaining %d after explaining, %d before: explain spent", e.Remaining, full[tenantA+"/per-plan"].Remaining)
	}

	text := run(tenantA, "tenant")
	want := "DENIED by " + tenantA + "/per-ip, " + tenantA + "/per-user, a policy you may not see: it would pass in"
	if !strings.Contains(text, want) || !strings.Contains(text, "penalized") {
		j.errorf(t, "explain's text as tenant A lacks %q or penalized:\n%s", want, text)
	}
	t.Logf("kubectl sluice explain as tenant A:\n%s", text)
	j.mark("kubectl sluice explain through a port-forward: tenant A sees allowed, denied and penalized in full, the hidden policy redacted and no shadow; the platform team sees all five")
}

// allowDomainTo lets the fleet enforce domain's policies from namespaces.
func (j *journey) allowDomainTo(t *testing.T, domain string, namespaces ...string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		f := &v1alpha1.LimiterFleet{}
		if err := j.c.c.Get(context.Background(), client.ObjectKeyFromObject(j.fleet), f); err != nil {
			return err
		}
		from := v1alpha1.NamespacesFromSelector
		f.Spec.Domains = append(f.Spec.Domains, v1alpha1.FleetDomain{Name: domain, AllowedNamespaces: &v1alpha1.AllowedNamespaces{
			From: &from, Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: namespaces}}},
		}})
		return j.c.c.Update(context.Background(), f)
	})
	if err != nil {
		t.Fatalf("allowing domain %s to namespaces %v on fleet %s: %v", domain, namespaces, j.fleet.Name, err)
	}
}

// explainPolicies are five policies of explainDomain, each on its own
// entry: tenant A's per user (1 an hour), per plan (1000) and per IP (1,
// penalized for 15m on the first denial); tenant B's hidden per path (1)
// and shadow per region (1). They carry the fleet's policy selector labels.
func explainPolicies(labels map[string]string) string {
	l, _ := json.Marshal(labels)
	doc := func(ns, name, spec string) string {
		return fmt.Sprintf("apiVersion: ratelimit.sluice.dev/v1alpha1\nkind: RateLimitPolicy\nmetadata: {name: %s, namespace: %s, labels: %s}\nspec: %s\n", name, ns, l, spec)
	}
	d := explainDomain
	return strings.Join([]string{
		doc(tenantA, "per-user", `{domain: `+d+`, descriptors: [{key: user}], algorithm: TokenBucket, rate: {limit: 1, period: 1h}}`),
		doc(tenantA, "per-plan", `{domain: `+d+`, descriptors: [{key: plan}], rate: {limit: 1000, period: 1h}}`),
		doc(tenantA, "per-ip", `{domain: `+d+`, descriptors: [{key: ip}], algorithm: FixedWindow, rate: {limit: 1, period: 1h}, penalty: {duration: 15m, after: 1}}`),
		doc(tenantB, "secret-per-path", `{domain: `+d+`, descriptors: [{key: path}], rate: {limit: 1, period: 1h}, visibility: Hidden}`),
		doc(tenantB, "trial-per-region", `{domain: `+d+`, descriptors: [{key: region}], rate: {limit: 1, period: 1h}, shadow: true}`),
	}, "---\n")
}

// explainRBAC is the RBAC of docs/guides/kubectl-sluice.md: tenant A's
// ServiceAccount may call explain and read A's policies; the platform
// team's may call explain and read every namespace's.
var explainRBAC = fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata: {name: tenant, namespace: %[1]s}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: platform, namespace: %[2]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: e2e-sluice-explain}
rules: [{nonResourceURLs: ["%[3]s", "%[4]s"], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: e2e-policy-reader}
rules: [{apiGroups: [ratelimit.sluice.dev], resources: [ratelimitpolicies], verbs: [get, list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-sluice-explain}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-sluice-explain}
subjects:
  - {kind: ServiceAccount, name: tenant, namespace: %[1]s}
  - {kind: ServiceAccount, name: platform, namespace: %[2]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: tenant-reads-policies, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-policy-reader}
subjects: [{kind: ServiceAccount, name: tenant, namespace: %[1]s}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-platform-reads-policies}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-policy-reader}
subjects: [{kind: ServiceAccount, name: platform, namespace: %[2]s}]
`, tenantA, tenantB, limiterwire.ExplainPath, limiterwire.TopPath)

// portForward runs kubectl port-forward to target's port on a free local
// port until the test ends, and answers https://127.0.0.1:<port>.
func (c *cluster) portForward(t *testing.T, ns, target string, port int) string {
	t.Helper()
	cmd := exec.Command(c.kubectlBin, "port-forward", "-n", ns, "--address", "127.0.0.1", target, fmt.Sprintf(":%d", port))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.kubeconfig)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	local := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+)`)
		s := bufio.NewScanner(out)
		for s.Scan() {
			if m := re.FindStringSubmatch(s.Text()); m != nil {
				select {
				case local <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case p := <-local:
		return "https://127.0.0.1:" + p
	case <-time.After(time.Minute):
		t.Fatalf("kubectl port-forward %s %d: no local port within 1m: %s", target, port, stderr.String())
		return ""
	}
}

// buildPlugin builds kubectl-sluice into dir.
func (c *cluster) buildPlugin(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "kubectl-sluice")
	if _, stderr, err := c.cmd("", "go", "build", "-o", bin, "./cmd/kubectl-sluice"); err != nil {
		t.Fatalf("building kubectl-sluice: %v\n%s", err, stderr)
	}
	return bin
}
