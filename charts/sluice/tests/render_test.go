package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// ciValues are the non-default value sets that helm lint and helm template
// run with (make helm-lint, make helm-template), as chart-testing does.
func ciValues(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no ci/*-values.yaml in %s: %v", chartDir, err)
	}
	return files
}

func TestLint(t *testing.T) {
	sets := [][]string{nil}
	for _, f := range ciValues(t) {
		sets = append(sets, []string{"-f", f})
	}
	for _, set := range sets {
		out, _, err := run("", helmBin, append([]string{"lint", "--strict", chartDir}, set...)...)
		if err != nil {
			t.Errorf("helm lint --strict %v: %v", set, err)
		} else if !strings.Contains(out, "0 chart(s) failed") {
			t.Errorf("helm lint --strict %v:\n%s", set, out)
		}
	}
}

// TestSchemaRejectsBadValues installs with wrong values: each install fails
// before anything reaches the cluster, with a message that names the value.
func TestSchemaRejectsBadValues(t *testing.T) {
	for i, tc := range []struct{ values, want string }{
		{"operator:\n  replicas: \"two\"\n", "at '/operator/replicas': got string, want integer"},
		{"prometheusRule:\n  enable: true\n", "at '/prometheusRule': additional properties 'enable' not allowed"},
		{"limiter:\n  metrics:\n    podMonitor:\n      interval: 30\n", "at '/limiter/metrics/podMonitor/interval': got number, want string"},
		{"operator:\n  replica: 2\n", "at '/operator': additional properties 'replica' not allowed"},
		{"operator:\n  logLevel: verbose\n", "at '/operator/logLevel'"},
		{"fleet:\n  redis:\n    mode: Memory\n", "at '/fleet/redis/mode'"},
		{"fleet:\n  replicas: 101\n", "at '/fleet/replicas'"},
		{"fleet:\n  trustedProxies: 10.0.0.0/8\n", "at '/fleet/trustedProxies': got string, want array"},
		{"fleet:\n  redis:\n    nodeTimeout: 5\n", "at '/fleet/redis/nodeTimeout': got number, want string"},
		{"operator:\n  image:\n    digest: latest\n", "at '/operator/image/digest'"},
		{"operator:\n  watchNamespaces: [Team_A]\n", "at '/operator/watchNamespaces/0'"},
		{"operator:\n  leaderElection:\n    leaseDuration: fast\n", "at '/operator/leaderElection/leaseDuration'"},
		{"operator:\n  leaderElection:\n    retryPeriod: -1s\n", "at '/operator/leaderElection/retryPeriod'"},
		// Rules across values, from the templates.
		{"operator:\n  replicas: 2\n  leaderElection:\n    enabled: false\n", "operator.replicas above 1 needs operator.leaderElection.enabled"},
		{"operator:\n  watchNamespaces: [team-a]\nfleet:\n  enabled: true\n", `fleet's namespace "sluice-bad" must be one of operator.watchNamespaces`},
		{"fleet:\n  enabled: true\n  redis:\n    mode: External\n", "fleet.redis.addresses is required when fleet.redis.mode is External"},
	} {
		file := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(file, []byte(tc.values), 0o644); err != nil {
			t.Fatal(err)
		}
		release := fmt.Sprintf("bad-%d", i)
		_, stderr, err := helm("install", release, chartDir, "--namespace", "sluice-bad", "--create-namespace", "-f", file)
		if err == nil {
			t.Errorf("helm install with\n%s succeeded; want it to fail with %q", tc.values, tc.want)
			continue
		}
		if !strings.Contains(stderr, tc.want) {
			t.Errorf("helm install with\n%s failed with\n%s\nwant the message %q", tc.values, stderr, tc.want)
		}
	}
	if out := mustHelm(t, "list", "--all", "--namespace", "sluice-bad", "--short"); strings.TrimSpace(out) != "" {
		t.Errorf("failed installs left releases: %s", out)
	}
}

func appVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil || c.AppVersion == "" {
		t.Fatalf("Chart.yaml appVersion: %v", err)
	}
	return c.AppVersion
}

// TestRenderedDefaults checks what the default values render: a restricted
// security context, probes, resources, leader election, images of the
// chart's appVersion, and the standard labels on everything.
func TestRenderedDefaults(t *testing.T) {
	objs := render(t, "sluice", "sluice-system")
	deps := find(objs, "Deployment")
	if len(deps) != 1 {
		t.Fatalf("%d Deployments, want 1", len(deps))
	}
	d := convert[appsv1.Deployment](t, deps[0])
	pod := d.Spec.Template.Spec
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		sc.RunAsUser == nil || *sc.RunAsUser != 65532 || sc.SeccompProfile == nil || sc.SeccompProfile.Type != "RuntimeDefault" {
		t.Errorf("pod security context %+v: want non-root 65532 with seccomp RuntimeDefault", sc)
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("container security context %+v: want read-only root, no privilege escalation, ALL capabilities dropped", sc)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("probes %+v %+v: want /healthz and /readyz", c.LivenessProbe, c.ReadinessProbe)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want CPU and memory requests and a memory limit", c.Resources)
	}
	v := appVersion(t)
	if want := "ghcr.io/sluice-dev/sluice-operator:" + v; c.Image != want {
		t.Errorf("image %s, want %s", c.Image, want)
	}
	for _, want := range []string{"--leader-elect", "--leader-election-namespace=sluice-system", "--limiter-image=ghcr.io/sluice-dev/sluice-limiter:" + v, "--redis-image=redis:7.2"} {
		if !hasArg(c.Args, want) {
			t.Errorf("args %q lack %s", c.Args, want)
		}
	}

	for _, o := range objs {
		l := o.GetLabels()
		for _, k := range []string{"helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "app.kubernetes.io/part-of"} {
			if l[k] == "" {
				t.Errorf("%s %s has no %s label", o.GetKind(), o.GetName(), k)
			}
		}
	}
	if len(find(objs, "LimiterFleet")) != 0 || len(find(objs, "ServiceMonitor")) != 0 || len(find(objs, "PodDisruptionBudget")) != 0 ||
		len(find(objs, "PodMonitor")) != 0 || len(find(objs, "PrometheusRule")) != 0 {
		t.Error("optional objects rendered by default")
	}
}

// TestOperatorSpread checks where the operator's pods go: two by default,
// spread over nodes where they can; one, or the user's own affinity or
// constraints, render no spread of the chart's.
func TestOperatorSpread(t *testing.T) {
	operatorPod := func(set ...string) (int32, corev1.PodSpec) {
		t.Helper()
		deps := find(render(t, "sluice", "sluice-system", set...), "Deployment")
		if len(deps) != 1 {
			t.Fatalf("%v: %d Deployments, want 1", set, len(deps))
		}
		d := convert[appsv1.Deployment](t, deps[0])
		return *d.Spec.Replicas, d.Spec.Template.Spec
	}
	replicas, pod := operatorPod()
	want := []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
			"app.kubernetes.io/name": "sluice", "app.kubernetes.io/instance": "sluice", "app.kubernetes.io/component": "operator",
		}},
	}}
	if replicas != 2 || !reflect.DeepEqual(pod.TopologySpreadConstraints, want) {
		t.Errorf("defaults: %d replicas, spread %+v; want 2 spread over hostnames", replicas, pod.TopologySpreadConstraints)
	}
	if _, pod := operatorPod("--set", "operator.replicas=1"); pod.TopologySpreadConstraints != nil {
		t.Errorf("one replica: spread %+v, want none", pod.TopologySpreadConstraints)
	}
	if _, pod := operatorPod("--set", "operator.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=1",
		"--set", "operator.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.topologyKey=kubernetes.io/hostname"); pod.TopologySpreadConstraints != nil || pod.Affinity == nil {
		t.Errorf("the user's affinity: spread %+v, affinity %+v; want the affinity alone", pod.TopologySpreadConstraints, pod.Affinity)
	}
	if _, pod := operatorPod("--set", "operator.topologySpreadConstraints[0].maxSkew=2", "--set", "operator.topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
		"--set", "operator.topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule"); len(pod.TopologySpreadConstraints) != 1 || pod.TopologySpreadConstraints[0].TopologyKey != "topology.kubernetes.io/zone" {
		t.Errorf("the user's constraints: spread %+v, want theirs alone", pod.TopologySpreadConstraints)
	}
}

// TestOperatorLeaderTiming checks that the leader election's timing
// values reach the operator's flags, and that none is passed without
// leader election.
func TestOperatorLeaderTiming(t *testing.T) {
	args := func(set ...string) []string {
		t.Helper()
		deps := find(render(t, "sluice", "sluice-system", set...), "Deployment")
		if len(deps) != 1 {
			t.Fatalf("%v: %d Deployments, want 1", set, len(deps))
		}
		var out []string
		for _, a := range convert[appsv1.Deployment](t, deps[0]).Spec.Template.Spec.Containers[0].Args {
			if strings.HasPrefix(a, "--leader-elect-") {
				out = append(out, a)
			}
		}
		return out
	}
	if got, want := args(), []string{"--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=2s"}; !reflect.DeepEqual(got, want) {
		t.Errorf("defaults: %v, want %v", got, want)
	}
	got := args("--set", "operator.leaderElection.leaseDuration=6s", "--set", "operator.leaderElection.renewDeadline=4s", "--set", "operator.leaderElection.retryPeriod=1s")
	if want := []string{"--leader-elect-lease-duration=6s", "--leader-elect-renew-deadline=4s", "--leader-elect-retry-period=1s"}; !reflect.DeepEqual(got, want) {
		t.Errorf("6s, 4s, 1s: %v, want %v", got, want)
	}
	if got := args("--set", "operator.replicas=1", "--set", "operator.leaderElection.enabled=false"); len(got) != 0 {
		t.Errorf("no leader election: %v, want none", got)
	}
}

// TestCRDTemplates checks that the chart's CRDs are config/crd/bases'
// with only the chart's labels and, with crds.keep, Helm's keep annotation;
// and that crds.enabled=false renders none.
func TestCRDTemplates(t *testing.T) {
	sources, err := filepath.Glob(filepath.Join(repoRoot, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(sources) == 0 {
		t.Fatalf("no CRDs in config/crd/bases: %v", err)
	}
	want := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, f := range sources {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(b, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		want[crd.Name] = &crd
	}
	for _, keep := range []bool{true, false} {
		crds := find(render(t, "sluice", "sluice-system", "--set", fmt.Sprintf("crds.keep=%t", keep)), "CustomResourceDefinition")
		if len(crds) != len(want) {
			t.Fatalf("crds.keep=%t: %d CRDs rendered, want %d", keep, len(crds), len(want))
		}
		for _, o := range crds {
			got := convert[apiextensionsv1.CustomResourceDefinition](t, o)
			if _, ok := got.Annotations["helm.sh/resource-policy"]; ok != keep || (keep && got.Annotations["helm.sh/resource-policy"] != "keep") {
				t.Errorf("crds.keep=%t: %s annotations %v", keep, got.Name, got.Annotations)
			}
			src, ok := want[got.Name]
			if !ok {
				t.Errorf("rendered CRD %s is not in config/crd/bases", got.Name)
				continue
			}
			delete(got.Annotations, "helm.sh/resource-policy")
			got.Labels = nil
			// hack/chartgen adds the conversion through the operator's webhook
			// to the CRDs with two served versions; controller-gen writes none.
			if c := got.Spec.Conversion; (len(got.Spec.Versions) > 1) != (c != nil && c.Strategy == apiextensionsv1.WebhookConverter &&
				c.Webhook != nil && c.Webhook.ClientConfig != nil && c.Webhook.ClientConfig.Service != nil &&
				c.Webhook.ClientConfig.Service.Name == "sluice-operator-webhook" && ptr.Deref(c.Webhook.ClientConfig.Service.Path, "") == "/convert") {
				t.Errorf("rendered CRD %s, with %d versions, converts with %+v", got.Name, len(got.Spec.Versions), c)
			}
			got.Spec.Conversion = nil
			if !reflect.DeepEqual(got, src) {
				t.Errorf("rendered CRD %s differs from config/crd/bases: run make manifests", got.Name)
			}
		}
	}
	if crds := find(render(t, "sluice", "sluice-system", "--set", "crds.enabled=false"), "CustomResourceDefinition"); len(crds) != 0 {
		t.Errorf("crds.enabled=false rendered %d CRDs", len(crds))
	}
}

// grant is one verb on one resource of one API group.
// grant is one verb on a resource (of a group, limited to names when set),
// or on a non-resource URL (group nonResourceURL).
type grant struct{ group, resource, names, verb string }

const nonResourceURL = "nonResourceURL"

func grants(rules []rbacv1.PolicyRule) map[grant]bool {
	g := map[grant]bool{}
	for _, r := range rules {
		for _, u := range r.NonResourceURLs {
			for _, v := range r.Verbs {
				g[grant{nonResourceURL, u, "", v}] = true
			}
		}
		names := strings.Join(r.ResourceNames, ",")
		for _, group := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					g[grant{group, res, names, v}] = true
				}
			}
		}
	}
	return g
}

// clusterOnly reports whether g can only be granted by a ClusterRole.
func (g grant) clusterOnly() bool {
	return g.group == nonResourceURL || g.resource == "namespaces" || g.resource == "clusterroles" || g.resource == "clusterrolebindings" ||
		g.resource == "customresourcedefinitions"
}

func sortedGrants(g map[grant]bool) []string {
	var s []string
	for k := range g {
		name := ""
		if k.names != "" {
			name = "[" + k.names + "]"
		}
		s = append(s, fmt.Sprintf("%s/%s%s:%s", k.group, k.resource, name, k.verb))
	}
	sort.Strings(s)
	return s
}

// generatedRules are the operator's rules as controller-gen wrote them from
// the controllers' markers.
func generatedRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(b, &role); err != nil {
		t.Fatal(err)
	}
	return role.Rules
}

// TestRBACTemplates checks that the operator gets exactly the generated
// rules, without wildcards or Secrets: in cluster mode, one ClusterRole plus
// Leases in its own namespace; in namespaced mode, a Role in each watched
// namespace and only the cluster-scoped rules in the ClusterRole.
func TestRBACTemplates(t *testing.T) {
	want := grants(generatedRules(t))

	t.Run("cluster mode", func(t *testing.T) {
		objs := render(t, "sluice", "sluice-system")
		got := map[grant]bool{}
		for _, o := range find(objs, "ClusterRole") {
			if o.GetName() != "sluice-operator" {
				continue
			}
			for g := range grants(convert[rbacv1.ClusterRole](t, o).Rules) {
				if g.resource == "leases" {
					t.Errorf("the ClusterRole grants %v: Leases belong in the leader election namespace only", g)
				}
				got[g] = true
			}
		}
		roles := withoutWebhookCertRole(t, find(objs, "Role"))
		if len(roles) != 1 || roles[0].GetName() != "sluice-operator-leader-election" || roles[0].GetNamespace() != "sluice-system" {
			t.Fatalf("Roles %v, want sluice-system/sluice-operator-leader-election", names(roles))
		}
		for g := range grants(convert[rbacv1.Role](t, roles[0]).Rules) {
			got[g] = true
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("the chart grants\n  %s\nconfig/rbac/role.yaml has\n  %s", strings.Join(sortedGrants(got), " "), strings.Join(sortedGrants(want), " "))
		}
		checkNoWildcardsOrSecrets(t, objs)
	})

	t.Run("namespaced mode", func(t *testing.T) {
		objs := render(t, "sluice", "sluice-system", "-f", filepath.Join(chartDir, "ci", "namespaced-values.yaml"))
		var cr []string
		for _, o := range find(objs, "ClusterRole") {
			if o.GetName() == "sluice-operator" {
				cr = sortedGrants(grants(convert[rbacv1.ClusterRole](t, o).Rules))
			}
		}
		clusterOnly := map[grant]bool{}
		for g := range want {
			if g.clusterOnly() {
				clusterOnly[g] = true
			}
		}
		if want := sortedGrants(clusterOnly); !reflect.DeepEqual(cr, want) {
			t.Errorf("namespaced mode ClusterRole grants %v, want only %v", cr, want)
		}
		perNS := map[string]map[grant]bool{}
		for _, o := range withoutWebhookCertRole(t, find(objs, "Role")) {
			if o.GetName() == "sluice-operator" {
				perNS[o.GetNamespace()] = grants(convert[rbacv1.Role](t, o).Rules)
			}
		}
		if len(perNS) != 2 || perNS["team-a"] == nil || perNS["team-b"] == nil {
			t.Fatalf("operator Roles in %v, want team-a and team-b", perNS)
		}
		for g := range want {
			if !g.clusterOnly() && g.resource != "leases" && !perNS["team-a"][g] {
				t.Errorf("the team-a Role lacks %v", g)
			}
		}
		if !hasArg(operatorArgs(t, objs), "--watch-namespaces=team-a,team-b") {
			t.Errorf("args %q lack --watch-namespaces=team-a,team-b", operatorArgs(t, objs))
		}
		checkNoWildcardsOrSecrets(t, objs)
	})
}

// secretVerbs are what the operator may do to Secrets: read and write the
// ones it names (a Redis Cluster fleet's <fleet>-redis-auth, and
// spec.redis.auth's) by name. It never lists or watches them, so it
// caches none and can't enumerate them.
var secretVerbs = map[string]bool{"get": true, "create": true, "update": true, "delete": true}

func checkNoWildcardsOrSecrets(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range append(find(objs, "ClusterRole"), withoutWebhookCertRole(t, find(objs, "Role"))...) {
		for g := range grants(convert[rbacv1.ClusterRole](t, o).Rules) {
			if g.group == "*" || g.resource == "*" || g.verb == "*" || (g.resource == "secrets" && !secretVerbs[g.verb]) {
				t.Errorf("%s %s grants %v", o.GetKind(), o.GetName(), g)
			}
			// bind only system:auth-delegator, to the fleets' limiters.
			if g.verb == "escalate" || (g.verb == "bind" && g.names != "system:auth-delegator") || g.verb == "impersonate" {
				t.Errorf("%s %s grants %v", o.GetKind(), o.GetName(), g)
			}
		}
	}
}

func names(objs []*unstructured.Unstructured) []string {
	var n []string
	for _, o := range objs {
		n = append(n, o.GetNamespace()+"/"+o.GetName())
	}
	return n
}

// TestLongNames renders with the longest release name Helm allows and a
// long nameOverride: names stay valid, Service names and label values
// within 63 characters.
func TestLongNames(t *testing.T) {
	release := strings.Repeat("r", 53)
	objs := render(t, release, "sluice-system", "--set", "nameOverride="+strings.Repeat("n", 60), "--set", "fleet.enabled=true",
		"--set", "operator.metrics.serviceMonitor.enabled=true", "--set", "operator.podDisruptionBudget.enabled=true")
	dns1123 := regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
	for _, o := range objs {
		n := o.GetName()
		if !dns1123.MatchString(n) || len(n) > 253 {
			t.Errorf("%s name %q is not a DNS subdomain", o.GetKind(), n)
		}
		if o.GetKind() == "Service" && len(n) > 63 {
			t.Errorf("Service name %q is longer than 63 characters", n)
		}
		for k, v := range o.GetLabels() {
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				t.Errorf("%s %s label %s=%q: %v", o.GetKind(), n, k, v, errs)
			}
		}
	}
}

// TestMonitoringTemplates: the PrometheusRule carries exactly the rules of
// config/prometheus/alerts.yaml, and the PodMonitor selects the pods the
// operator builds for a fleet, on their metrics port, in the namespaces the
// operator watches.
func TestMonitoringTemplates(t *testing.T) {
	objs := render(t, "sluice", "sluice-system", "--set", "limiter.metrics.podMonitor.enabled=true,prometheusRule.enabled=true")

	rules := find(objs, "PrometheusRule")
	if len(rules) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(rules))
	}
	data, err := os.ReadFile(filepath.Join(repoRoot, "config", "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	if got := rules[0].Object["spec"]; !reflect.DeepEqual(got, want) {
		t.Errorf("PrometheusRule spec differs from config/prometheus/alerts.yaml (run make manifests):\n%v\nwant\n%v", got, want)
	}
	monitors := find(objs, "PodMonitor")
	if len(monitors) != 1 {
		t.Fatalf("%d PodMonitors, want 1", len(monitors))
	}
	pm := monitors[0].Object["spec"].(map[string]any)
	fleet := &v1alpha1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "team-a"}}
	pod := resources.BuildLimiterDeployment(betaOf(fleet), resources.LimiterDeploymentOptions{DefaultImage: "limiter:test", StoreURL: "memory"}).Spec.Template
	sel := pm["selector"].(map[string]any)["matchLabels"].(map[string]any)
	for k, v := range sel {
		if pod.Labels[k] != v {
			t.Errorf("PodMonitor selects %s=%v; the limiter pods have %s=%q", k, v, k, pod.Labels[k])
		}
	}
	port := pm["podMetricsEndpoints"].([]any)[0].(map[string]any)["port"]
	var found bool
	for _, p := range pod.Spec.Containers[0].Ports {
		found = found || p.Name == port
	}
	if !found {
		t.Errorf("PodMonitor scrapes port %v; the limiter container has %+v", port, pod.Spec.Containers[0].Ports)
	}
	// The admin port answers only callers the API server authorizes for
	// /metrics: the PodMonitor sends the token of the metrics reader.
	auth := pm["podMetricsEndpoints"].([]any)[0].(map[string]any)["authorization"]
	wantAuth := map[string]any{"type": "Bearer", "credentials": map[string]any{"name": "sluice-limiter-metrics-reader-token", "key": "token"}}
	if port != "admin" || !reflect.DeepEqual(auth, wantAuth) {
		t.Errorf("PodMonitor scrapes port %v with authorization %v, want admin with %v", port, auth, wantAuth)
	}
	var secretFound bool
	for _, o := range find(objs, "Secret") {
		secretFound = secretFound || (o.GetName() == "sluice-limiter-metrics-reader-token" &&
			o.GetAnnotations()["kubernetes.io/service-account.name"] == "sluice-limiter-metrics-reader")
	}
	var roleOK bool
	for _, o := range find(objs, "ClusterRole") {
		if o.GetName() == "sluice-limiter-metrics-reader" {
			roleOK = reflect.DeepEqual(o.Object["rules"], []any{map[string]any{"nonResourceURLs": []any{"/metrics"}, "verbs": []any{"get"}}})
		}
	}
	if !secretFound || !roleOK {
		t.Errorf("metrics reader: token Secret rendered %v, ClusterRole granting get /metrics only %v", secretFound, roleOK)
	}
	if ns := pm["namespaceSelector"]; !reflect.DeepEqual(ns, map[string]any{"matchNames": []any{"sluice-system"}}) {
		t.Errorf("cluster-wide namespaceSelector %v, want the release namespace", ns)
	}

	objs = render(t, "sluice", "sluice-system", "--set", "limiter.metrics.podMonitor.enabled=true,operator.watchNamespaces={team-a,team-b}")
	ns := find(objs, "PodMonitor")[0].Object["spec"].(map[string]any)["namespaceSelector"]
	if want := map[string]any{"matchNames": []any{"team-a", "team-b"}}; !reflect.DeepEqual(ns, want) {
		t.Errorf("namespaced-mode namespaceSelector %v, want %v", ns, want)
	}
}

// Attack (issue 24, 3): the PodMonitor sends the metrics reader's token,
// which never expires, to every pod it selects, and selected pods by labels
// in every namespace: a tenant who labels a pod of their own namespace
// app.kubernetes.io/name=sluice-limiter, managed-by=sluice-operator, with a
// port named admin, receives the token with each scrape. It selects the
// namespaces of the fleets alone (the release's, operator.watchNamespaces,
// or limiter.metrics.podMonitor.namespaces), never any, and scrapes over
// HTTPS.
func TestAttackPodMonitorSendsTokenToTenantPods(t *testing.T) {
	for _, tc := range []struct {
		set  string
		want []any
	}{
		{"limiter.metrics.podMonitor.enabled=true", []any{"sluice-system"}},
		{"limiter.metrics.podMonitor.enabled=true,operator.watchNamespaces={team-a}", []any{"team-a"}},
		{"limiter.metrics.podMonitor.enabled=true,limiter.metrics.podMonitor.namespaces={sluice-system,edge}", []any{"sluice-system", "edge"}},
	} {
		objs := render(t, "sluice", "sluice-system", "--set", tc.set)
		pm := find(objs, "PodMonitor")[0].Object["spec"].(map[string]any)
		ns := pm["namespaceSelector"].(map[string]any)
		if ns["any"] != nil || !reflect.DeepEqual(ns["matchNames"], tc.want) {
			t.Errorf("--set %s: the PodMonitor, which sends its token to every pod it selects, selects pods in namespaces %v, want only %v",
				tc.set, ns, tc.want)
		}
		ep := pm["podMetricsEndpoints"].([]any)[0].(map[string]any)
		if ep["scheme"] != "https" {
			t.Errorf("--set %s: the PodMonitor scrapes with scheme %v, want https: its token would cross in clear", tc.set, ep["scheme"])
		}
	}
}

// The chart sets a fleet's spec.clients, which its limiters' NetworkPolicy
// admits alone on the data ports; the operator renders that policy from the
// fleet the chart applied.
func TestFleetClients(t *testing.T) {
	vals := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(vals, []byte(`fleet:
  enabled: true
  clients:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: gateways}}
      podSelector: {matchLabels: {app: envoy}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	objs := render(t, "sluice", "sluice-system", "-f", vals)
	fleets := find(objs, "LimiterFleet")
	if len(fleets) != 1 {
		t.Fatalf("%d LimiterFleets, want 1", len(fleets))
	}
	data, err := json.Marshal(fleets[0].Object)
	if err != nil {
		t.Fatal(err)
	}
	rendered := &v1beta1.LimiterFleet{}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(rendered); err != nil {
		t.Fatalf("the chart's fleet is not a v1beta1 LimiterFleet: %v", err)
	}
	fleet := &v1alpha1.LimiterFleet{} // as the operator reads it
	if err := fleet.ConvertFrom(rendered); err != nil {
		t.Fatal(err)
	}
	want := []v1alpha1.FleetClient{{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "gateways"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "envoy"}},
	}}
	if !reflect.DeepEqual(fleet.Spec.Clients, want) {
		t.Fatalf("spec.clients %+v, want %+v", fleet.Spec.Clients, want)
	}
	np := resources.BuildLimiterNetworkPolicy(betaOf(fleet), resources.NetworkPolicyOptions{OperatorNamespace: "sluice-system"})
	if from := np.Spec.Ingress[0].From; len(from) != 1 || !reflect.DeepEqual(from[0].PodSelector, want[0].PodSelector) ||
		!reflect.DeepEqual(from[0].NamespaceSelector, want[0].NamespaceSelector) {
		t.Errorf("the limiters' data ports admit %+v, want the chart's clients", from)
	}

	objs = render(t, "sluice", "sluice-system", "--set", "fleet.enabled=true")
	if c, ok := find(objs, "LimiterFleet")[0].Object["spec"].(map[string]any)["dataPlane"]; ok {
		t.Errorf("without fleet.clients: spec.dataPlane %v, want none (the fleet's namespace)", c)
	}
}

// withoutWebhookCertRole checks the one Role that lets the operator list and
// watch Secrets, and returns the other Roles: cert-controller caches the
// Secrets of the operator's namespace to keep the conversion webhook's
// certificate, so the Role is in that namespace only, and writes only that
// Secret, by name.
func withoutWebhookCertRole(t *testing.T, roles []*unstructured.Unstructured) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, o := range roles {
		if strings.HasSuffix(o.GetName(), "-operator-admin-token") {
			checkAdminTokenRole(t, o)
			continue
		}
		if !strings.HasSuffix(o.GetName(), "-operator-webhook-cert") {
			out = append(out, o)
			continue
		}
		if o.GetNamespace() != "sluice-system" {
			t.Errorf("the webhook certificate Role is in %q, want the release namespace", o.GetNamespace())
		}
		want := []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{o.GetName()}, Verbs: []string{"update", "patch"}},
		}
		if got := convert[rbacv1.Role](t, o).Rules; !reflect.DeepEqual(got, want) {
			t.Errorf("the webhook certificate Role grants %+v, want %+v", got, want)
		}
	}
	return out
}

// TestGrafanaDashboard: off by default; on, one ConfigMap with the label
// Grafana's dashboard sidecar looks for, holding files/grafana-dashboard.json
// byte for byte (hack/dashboardcheck runs its queries), in the namespace
// asked for.
func TestGrafanaDashboard(t *testing.T) {
	if cms := find(render(t, "sluice", "sluice-system"), "ConfigMap"); len(cms) != 0 {
		for _, cm := range cms {
			if cm.GetLabels()["grafana_dashboard"] != "" {
				t.Errorf("the dashboard ConfigMap %s is rendered by default", cm.GetName())
			}
		}
	}
	objs := render(t, "sluice", "sluice-system", "--set", "grafanaDashboard.enabled=true,grafanaDashboard.namespace=monitoring,grafanaDashboard.labels.team=platform")
	var dash []*unstructured.Unstructured
	for _, cm := range find(objs, "ConfigMap") {
		if cm.GetLabels()["grafana_dashboard"] == "1" {
			dash = append(dash, cm)
		}
	}
	if len(dash) != 1 {
		t.Fatalf("%d ConfigMaps labelled grafana_dashboard=1, want 1", len(dash))
	}
	cm := dash[0]
	if cm.GetNamespace() != "monitoring" || cm.GetLabels()["team"] != "platform" || cm.GetLabels()["app.kubernetes.io/name"] != "sluice" {
		t.Errorf("the dashboard ConfigMap: namespace %s, labels %v", cm.GetNamespace(), cm.GetLabels())
	}
	want, err := os.ReadFile(filepath.Join(chartDir, "files", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, _, _ := unstructured.NestedString(cm.Object, "data", "sluice.json")
	if got != string(want) {
		t.Errorf("the ConfigMap's sluice.json differs from files/grafana-dashboard.json")
	}
	var d map[string]any
	if err := json.Unmarshal([]byte(got), &d); err != nil || d["uid"] != "sluice-overview" {
		t.Errorf("sluice.json: %v, uid %v", err, d["uid"])
	}
}

// checkAdminTokenRole: the operator mints the admin plane's tokens of its
// own ServiceAccount, and of no other, in the release namespace.
func checkAdminTokenRole(t *testing.T, o *unstructured.Unstructured) {
	t.Helper()
	sa := strings.TrimSuffix(o.GetName(), "-admin-token")
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{sa}, Verbs: []string{"create"}}}
	if got := convert[rbacv1.Role](t, o).Rules; o.GetNamespace() != "sluice-system" || !reflect.DeepEqual(got, want) {
		t.Errorf("the admin token Role %s/%s grants %+v, want %+v in sluice-system", o.GetNamespace(), o.GetName(), got, want)
	}
}
