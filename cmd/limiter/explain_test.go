package main_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/limiterwire"
)

// pluginBin is kubectl-sluice, built once when a test needs it.
var pluginBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "kubectl-sluice-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "kubectl-sluice")
	out, err := exec.Command("go", "build", "-o", bin, "../kubectl-sluice").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ../kubectl-sluice: %v\n%s", err, out)
	}
	return bin, nil
})

// plugin runs kubectl sluice with args, answering its exit code and
// output.
func plugin(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	bin, err := pluginBin()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

// explainPolicies are five policies of domain shop, each on its own entry,
// in two tenants' namespaces: A's limit per user (1 an hour), per plan
// (1000) and per IP (1, penalized for 15m on the first denial); B's hidden
// per path (1) and shadow per region (1).
func explainPolicies(a, b string) string {
	return fmt.Sprintf(`apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-user, namespace: %[1]s}
spec: {domain: shop, descriptors: [{key: user}], algorithm: TokenBucket, rate: {limit: 1, period: 1h}}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-plan, namespace: %[1]s}
spec: {domain: shop, descriptors: [{key: plan}], rate: {limit: 1000, period: 1h}}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-ip, namespace: %[1]s}
spec:
  domain: shop
  descriptors: [{key: ip}]
  algorithm: FixedWindow
  rate: {limit: 1, period: 1h}
  penalty: {duration: 15m, after: 1}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: secret-per-path, namespace: %[2]s}
spec: {domain: shop, descriptors: [{key: path}], rate: {limit: 1, period: 1h}, visibility: Hidden}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: trial-per-region, namespace: %[2]s}
spec: {domain: shop, descriptors: [{key: region}], rate: {limit: 1, period: 1h}, shadow: true}
`, a, b)
}

// explainSetup is a limiter on explainPolicies (with extra arguments)
// whose admin plane reviews
// each caller with envtest's API server, after two checks of one request
// that match all five (the second denied, and a strike of per-ip), and
// the people who explain: tenant A (reads A's policies), the platform
// team (reads every namespace's) and an outsider (reads policies, may not
// call explain nor top).
type explainSetup struct {
	p                           *process
	fleet                       string // namespace/name: the limiter's audience
	nsA, nsB                    string
	tenantA, platform, outsider rbacv1.Subject
	entries                     []string
	kubeconfigOf                func(rbacv1.Subject) string
}

func setUpExplain(t *testing.T, extra ...string) *explainSetup {
	c, _ := apiServer(t)
	ctx := t.Context()
	nsA, nsB := createNamespace(t, c, "tenant-a"), createNamespace(t, c, "tenant-b")
	cs, err := kubernetes.NewForConfig(api.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	create := func(objs ...client.Object) {
		t.Helper()
		for _, o := range objs {
			if err := c.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Delete(ctx, o) })
		}
	}
	// Each may mint its own tokens (kubectl sluice mints one for the
	// fleet's audience).
	sa := func(ns, name string) rbacv1.Subject {
		subject := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
		create(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-mints-own-token"},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{name}, Verbs: []string{"create"}}}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-mints-own-token"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name + "-mints-own-token"},
				Subjects: []rbacv1.Subject{subject}})
		return subject
	}
	limiter, tenantA, platform, outsider := sa(nsA, "limiter"), sa(nsA, "tenant"), sa(nsB, "platform"), sa(nsB, "outsider")
	explainer := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: nsA + "-sluice-explain"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{limiterwire.ExplainPath, limiterwire.TopPath}, Verbs: []string{"get"}}}}
	policyReader := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: nsA + "-policy-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"ratelimit.sluice.dev"}, Resources: []string{"ratelimitpolicies"}, Verbs: []string{"get", "list"}}}}
	ref := func(name string) rbacv1.RoleRef {
		return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}
	}
	create(explainer, policyReader,
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: nsA + "-limiter"}, RoleRef: ref("system:auth-delegator"), Subjects: []rbacv1.Subject{limiter}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: nsA + "-explain"}, RoleRef: ref(explainer.Name), Subjects: []rbacv1.Subject{tenantA, platform}},
		// A reads its own namespace's policies; the platform team every namespace's.
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "tenant-reads-policies"}, RoleRef: ref(policyReader.Name), Subjects: []rbacv1.Subject{tenantA}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: nsA + "-platform-reads-policies"}, RoleRef: ref(policyReader.Name), Subjects: []rbacv1.Subject{platform}},
		// The outsider may read policies everywhere, but not call explain.
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: nsA + "-outsider-reads-policies"}, RoleRef: ref(policyReader.Name), Subjects: []rbacv1.Subject{outsider}},
	)
	// Each caller's kubeconfig holds its ordinary API token.
	kubeconfigOf := func(s rbacv1.Subject) string {
		return tokenKubeconfig(t, saToken(t, cs, s.Namespace, s.Name))
	}

	path := filepath.Join(t.TempDir(), "policies.yaml")
	writeAtomic(t, path, explainPolicies(nsA, nsB))
	p := startLimiter(t, append([]string{"--policies", path, "--admin-auth", "kubernetes",
		"--admin-token-audience", limiterwire.FleetAdminAudience(nsA, "edge"), "--kubeconfig", tokenKubeconfig(t, saToken(t, cs, limiter.Namespace, limiter.Name))}, extra...)...)
	req := `{"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"alice"},{"key":"plan","value":"free"},` +
		`{"key":"ip","value":"10.1.2.3"},{"key":"path","value":"/checkout"},{"key":"region","value":"eu"}]}]}`
	for i, want := range []int{200, 429} { // the second strikes per-ip: penalized
		if code, _, body := p.post(t, "/v1/ratelimit/check", req); code != want {
			t.Fatalf("check %d: %d %s, want %d", i+1, code, body, want)
		}
	}
	return &explainSetup{p: p, fleet: nsA + "/edge", nsA: nsA, nsB: nsB, tenantA: tenantA, platform: platform, outsider: outsider,
		entries: []string{"user=alice", "plan=free", "ip=10.1.2.3", "path=/checkout", "region=eu"}, kubeconfigOf: kubeconfigOf}
}

// explain runs kubectl sluice explain as s, answering its JSON.
func (x *explainSetup) explain(t *testing.T, s rbacv1.Subject) (limiterwire.Explanation, string) {
	t.Helper()
	code, out, errOut := plugin(t, append([]string{"explain", "--kubeconfig", x.kubeconfigOf(s), "--limiter", x.p.adminURL, "--fleet", x.fleet, "--domain", "shop", "-o", "json"}, x.entries...)...)
	if code != 0 {
		t.Fatalf("explain as %s: exit %d: %s", s.Name, code, errOut)
	}
	var ex limiterwire.Explanation
	if err := json.Unmarshal([]byte(out), &ex); err != nil {
		t.Fatalf("explain as %s: %v\n%s", s.Name, err, out)
	}
	return ex, out
}

// kubectl sluice explain, against a real limiter: tenant A sees its own
// policies in full (allowed, denied, penalized) and of B's only what a
// client is told (the hidden one's denial and wait, nothing of the shadow
// one); the platform team sees all five, hidden and shadow among them.
// Explaining spends nothing.
func TestExplain(t *testing.T) {
	x := setUpExplain(t)
	nsA := x.nsA
	a, _ := x.explain(t, x.tenantA)
	if len(a.Policies) != 4 {
		t.Fatalf("tenant A: %d policies, want 4 (B's shadow one left out): %+v", len(a.Policies), a.Policies)
	}
	byName := map[string]limiterwire.ExplainedPolicy{}
	var redacted []limiterwire.ExplainedPolicy
	for _, e := range a.Policies {
		if e.Redacted {
			redacted = append(redacted, e)
			continue
		}
		byName[e.Namespace+"/"+e.Name] = e
	}
	for name, want := range map[string]func(e limiterwire.ExplainedPolicy) bool{
		nsA + "/per-user": func(e limiterwire.ExplainedPolicy) bool {
			return e.WouldDeny && !e.Penalized && e.Remaining == 0 && e.Limit == 1 && e.RetryAfterSeconds > 0 && e.FailureMode == "Open"
		},
		nsA + "/per-plan": func(e limiterwire.ExplainedPolicy) bool { return !e.WouldDeny && e.Limit == 1000 && e.Remaining >= 998 },
		nsA + "/per-ip": func(e limiterwire.ExplainedPolicy) bool {
			return e.WouldDeny && e.Penalized && e.RetryAfterSeconds > 60 && e.RetryAfterSeconds <= 900
		},
	} {
		if e, ok := byName[name]; !ok || !want(e) {
			t.Errorf("tenant A: %s: %+v (found %v)", name, e, ok)
		}
	}
	if len(byName) != 3 || len(redacted) != 1 {
		t.Fatalf("tenant A sees %d policies in full and %d redacted, want 3 and 1: %+v", len(byName), len(redacted), a.Policies)
	}

	// The platform team sees B's hidden and shadow policies in full.
	all, _ := x.explain(t, x.platform)
	full := map[string]limiterwire.ExplainedPolicy{}
	for _, e := range all.Policies {
		if e.Redacted {
			t.Errorf("platform: a redacted policy: %+v", e)
		}
		full[e.Name] = e
	}
	if e := full["secret-per-path"]; !e.Hidden || e.Limit != 1 || !e.WouldDeny {
		t.Errorf("platform: secret-per-path %+v, want hidden, limit 1, would deny", e)
	}
	if e := full["trial-per-region"]; !e.Shadow || !e.WouldDeny {
		t.Errorf("platform: trial-per-region %+v, want shadow, would deny", e)
	}
	// Explaining spent nothing: per-plan still has what the two checks left.
	if a2 := full["per-plan"]; a2.Remaining != byName[nsA+"/per-plan"].Remaining {
		t.Errorf("per-plan remaining %d after explaining, %d before: explain spent", a2.Remaining, byName[nsA+"/per-plan"].Remaining)
	}

	// The text a person reads names the verdict and the wait.
	code, out, errOut := plugin(t, append([]string{"explain", "--kubeconfig", x.kubeconfigOf(x.tenantA), "--limiter", x.p.adminURL, "--fleet", x.fleet, "--domain", "shop"}, x.entries...)...)
	if code != 0 || !strings.Contains(out, "DENIED by "+nsA+"/per-ip, "+nsA+"/per-user, a policy you may not see: it would pass in") ||
		!strings.Contains(out, "penalized") {
		t.Errorf("explain's text (exit %d, %s):\n%s", code, errOut, out)
	}

}

// TestAttackExplainAnotherNamespace: tenant A explains a request that
// tenant B's hidden and shadow policies match. A learns what a client of
// the request is told (a policy it may not see denies, and the wait), and
// nothing else: not B's namespace, the policies' names, thresholds,
// counters or failure modes, nor that a shadow policy exists. One who may
// read policies but not call explain is refused.
func TestAttackExplainAnotherNamespace(t *testing.T) {
	x := setUpExplain(t)
	a, raw := x.explain(t, x.tenantA)
	for _, leak := range []string{x.nsB, "secret-per-path", "trial-per-region"} {
		if strings.Contains(raw, leak) {
			t.Errorf("tenant A's explanation names %q:\n%s", leak, raw)
		}
	}
	var deny, other int
	for _, e := range a.Policies {
		if !e.Redacted {
			continue
		}
		if e.Limit != 0 || e.Remaining != 0 || e.Burst != 0 || e.Algorithm != "" || e.FailureMode != "" || e.Hidden || e.Shadow || e.Name != "" || e.Namespace != "" {
			t.Errorf("tenant A: a redacted policy tells %+v", e)
		}
		if e.WouldDeny && e.RetryAfterSeconds > 0 {
			deny++ // the hidden one: its denial and wait, as a client is told
		} else {
			other++
		}
	}
	if deny != 1 || other != 0 {
		t.Errorf("tenant A: %d redacted denials and %d other redacted entries, want 1 and 0 (the shadow one left out): %+v", deny, other, a.Policies)
	}
	code, _, errOut := plugin(t, append([]string{"explain", "--kubeconfig", x.kubeconfigOf(x.outsider), "--limiter", x.p.adminURL, "--fleet", x.fleet, "--domain", "shop"}, x.entries...)...)
	if code != 1 || !strings.Contains(errOut, "403") {
		t.Errorf("outsider: exit %d: %s, want 1 and 403", code, errOut)
	}
}

// kubectl sluice status lists the fleets and policies of a namespace from
// the API server (CRDs installed on envtest), each policy's conditions as
// the operator wrote them, and counts them: one enforced, one refused for
// SnapshotFull, one not yet reconciled.
func TestKubectlSluiceStatus(t *testing.T) {
	c, adminKubeconfig := apiServer(t)
	ctx := t.Context()
	if _, err := envtest.InstallCRDs(api.env.Config, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join("..", "..", "config", "crd", "bases")}}); err != nil {
		t.Fatal(err)
	}
	ns := createNamespace(t, c, "status")
	objs := []string{`apiVersion: ratelimit.sluice.dev/v1alpha1
kind: LimiterFleet
metadata: {name: edge}
spec: {replicas: 1}`}
	for _, name := range []string{"checkout", "search", "new"} {
		objs = append(objs, `apiVersion: ratelimit.sluice.dev/v1beta1
kind: RateLimitPolicy
metadata: {name: `+name+`}
spec: {domain: shop, descriptors: [{key: `+name+`}], limit: {type: Rate, rate: {limit: 10, period: 1m}}}`)
	}
	for _, y := range objs {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(y), &u.Object); err != nil {
			t.Fatal(err)
		}
		u.SetNamespace(ns)
		eventually(t, "creating "+u.GetName()+" (the CRDs being established)", func() (bool, string) {
			err := c.Create(ctx, u)
			return err == nil, fmt.Sprint(err)
		})
	}
	setConditions := func(kind, name string, conds ...map[string]any) {
		t.Helper()
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("ratelimit.sluice.dev/v1beta1")
		if kind == "LimiterFleet" {
			u.SetAPIVersion("ratelimit.sluice.dev/v1alpha1")
		}
		u.SetKind(kind)
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
			t.Fatal(err)
		}
		var list []any
		for _, cond := range conds {
			cond["lastTransitionTime"] = "2026-01-01T00:00:00Z"
			cond["message"] = "set by the test"
			list = append(list, cond)
		}
		if err := unstructured.SetNestedSlice(u.Object, list, "status", "conditions"); err != nil {
			t.Fatal(err)
		}
		if err := c.Status().Update(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	setConditions("LimiterFleet", "edge", map[string]any{"type": "Ready", "status": "True", "reason": "Ready"},
		map[string]any{"type": "SnapshotSynced", "status": "True", "reason": "Synced"})
	setConditions("RateLimitPolicy", "checkout", map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted"},
		map[string]any{"type": "Enforced", "status": "True", "reason": "Enforced"})
	setConditions("RateLimitPolicy", "search", map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted"},
		map[string]any{"type": "Enforced", "status": "False", "reason": "SnapshotFull"})

	code, out, errOut := plugin(t, "status", "--kubeconfig", adminKubeconfig, "-n", ns)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"FLEETS (1)", "edge", "POLICIES (3)", "False (SnapshotFull)",
		"Policies: 1 SnapshotFull, 1 enforced, 1 not yet reconciled"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}
