package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

const (
	release   = "sluice"        // the README's release name
	system    = "sluice-system" // and namespace
	appNS     = "e2e"           // the client, the app and nginx
	clientPod = "client"
	// The README's example request, as `make run` prints it.
	readmeRequest = `{"domain":"payments-api","descriptors":[{"entries":[{"key":"user_id","value":"alice"},{"key":"path","value":"/v1/charges"}]}]}`
	// The domain of the load the faults run under.
	loadDomain = "e2e-load"
)

// journey is the state the steps hand on: what step 2 made, what the
// timings were.
type journey struct {
	c       *cluster
	fleet   *v1alpha1.LimiterFleet // the Redis Cluster fleet of step 2
	gateway client.ObjectKey       // nginx's fleet, of step 5
	notes   string                 // what helm install printed
	// previous is the release step 1 installed when it was the previous
	// one (hack/previous-release), which step 3 upgrades from; empty when
	// step 1 installed this tree's.
	previous string
	// upgrade is how far step 3 went: "" (not run), "started", "done"
	// (every pod runs this tree's images).
	upgrade string
	timings []string
}

func (j *journey) mark(format string, args ...any) {
	j.timings = append(j.timings, fmt.Sprintf(format, args...))
}

// errorf fails t and repeats why in the journey's summary, the part of a
// long run's output a reader (or CI's excerpt) is sure to see.
func (j *journey) errorf(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	t.Error(msg)
	j.mark("FAILED %s: %s", t.Name(), msg)
}

// TestJourney is the user's journey on a real cluster, one subtest per
// step. Steps 1 to 3 make what the others need (the previous release, its
// fleet, the upgrade to this one); the later steps run even when one
// before them failed.
func TestJourney(t *testing.T) {
	j := &journey{c: connect(t)}
	steps := []struct {
		name     string
		run      func(*testing.T)
		required bool
	}{
		{"1-HelmInstall", j.helmInstall, true},
		{"2-RedisClusterFleet", j.redisClusterFleet, true},
		// Its failed decisions fail it, not the journey; but the later
		// steps test this tree's release, so they need its rollout.
		{"3-UpgradeFromPrevious", j.upgradeFromPrevious, false},
		{"4-Samples", j.samples, false},
		{"5-Nginx", j.nginx, false},
		{"6-NetworkPolicies", j.networkPolicies, false},
		{"7-Explain", j.explainStep, false},
		{"8-Traces", j.traces, false},
		{"9-Faults", j.faults, false},
		{"10-UpgradeUninstall", j.upgradeUninstall, false},
	}
	var summary []string
	for _, s := range steps {
		start := time.Now()
		ok := t.Run(s.name, s.run)
		result := "ok"
		if !ok {
			result = "FAILED"
		}
		summary = append(summary, fmt.Sprintf("  step %-22s %-6s %8s", s.name, result, since(start)))
		if !ok && s.required {
			t.Errorf("step %s failed; the later steps need it", s.name)
			break
		}
		if j.upgrade == "started" {
			t.Errorf("step %s did not see this tree's release run; the later steps test it", s.name)
			break
		}
	}
	t.Logf("journey:\n%s\n  measured:\n    %s", strings.Join(summary, "\n"), strings.Join(j.timings, "\n    "))
}

// --- Step 1 ------------------------------------------------------------------

// helmInstall installs the chart with the README's command, changing only
// the image settings, into a namespace that enforces the restricted Pod
// Security profile. The chart and images are the previous release's
// (hack/previous-release, built from this clone's history), which step 3
// upgrades to this tree's; without them, this tree's.
func (j *journey) helmInstall(t *testing.T) {
	c := j.c
	c.restrictedNamespace(t, system)
	chart, op, lim := "charts/sluice", c.image(t, "sluice-operator"), c.image(t, "sluice-limiter")
	if prevOp, ok := c.previousImage("sluice-operator"); ok {
		prevLim, ok := c.previousImage("sluice-limiter")
		if !ok {
			t.Fatalf("the cluster has the previous release's operator image %s but not its limiter's: %v", prevOp, c.images)
		}
		_, j.previous = splitRef(t, prevOp)
		chart, op, lim = j.previousChart(t, j.previous), prevOp, prevLim
		t.Logf("installing the previous release %s (its chart and images), which step 3 upgrades from", j.previous)
	} else {
		t.Logf("no previous release's images (hack/cluster/build.sh: its commit is not in this clone's history): " +
			"installing this tree's chart; the upgrade from the previous release is NOT exercised")
	}
	start := time.Now()
	out, stderr := c.helm(t, append([]string{"install", release, chart, "--namespace", system, "--create-namespace"},
		j.imageValues(t, op, lim)...)...)
	if strings.Contains(stderr, "PodSecurity") || strings.Contains(stderr, "would violate") {
		t.Errorf("helm install printed Pod Security warnings:\n%s", stderr)
	}
	t.Logf("helm install:\n%s%s", out, stderr)
	j.notes = out

	dep := j.operatorDeployment(t)
	waitFor(t, "operator Deployment Available", 3*time.Minute, func() (bool, string) {
		d, err := c.cs.AppsV1().Deployments(system).Get(context.Background(), dep.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range d.Status.Conditions {
			if cond.Type == appsv1.DeploymentAvailable && cond.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		return false, j.podsState(t, system, d.Spec.Selector.MatchLabels)
	})
	j.mark("operator Available %s after helm install", since(start))
	t.Logf("operator Available %s after helm install, under enforce=restricted", since(start))
}

func (j *journey) operatorDeployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	list, err := j.c.cs.AppsV1().Deployments(system).List(context.Background(),
		metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=operator"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d operator Deployments in %s, want 1", len(list.Items), system)
	}
	return &list.Items[0]
}

// podsState describes the pods a selector selects, for a wait that fails.
func (j *journey) podsState(t *testing.T, ns string, labels map[string]string) string {
	pods := &corev1.PodList{}
	if err := j.c.c.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
		return err.Error()
	}
	var s []string
	for i := range pods.Items {
		s = append(s, pods.Items[i].Name+": "+podState(&pods.Items[i]))
	}
	events, _ := j.c.cs.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "type=Warning"})
	if events != nil {
		for _, e := range events.Items {
			s = append(s, fmt.Sprintf("event %s %s: %s", e.InvolvedObject.Name, e.Reason, e.Message))
		}
	}
	return strings.Join(s, "; ")
}

func splitRef(t *testing.T, ref string) (string, string) {
	i := strings.LastIndex(ref, ":")
	if i < 0 {
		t.Fatalf("image %q has no tag", ref)
	}
	return ref[:i], ref[i+1:]
}

// --- Step 2 ------------------------------------------------------------------

// redisClusterFleet creates the Redis Cluster sample fleet (no replicas,
// as one node allows) with a volume per node, as its comments say to do
// with storage (here the cluster's hostPath PersistentVolumes), so that a
// deleted pod's keys survive. Its Redis image is the chart's redis.image.
func (j *journey) redisClusterFleet(t *testing.T) {
	c := j.c
	c.restrictedNamespace(t, appNS)
	c.clientPod(t, appNS, clientPod)

	// The sample is v1beta1; the operator (and this test, from here on)
	// reads the fleet as v1alpha1, through the conversion webhook.
	b := &v1beta1.LimiterFleet{}
	readYAML(t, filepath.Join(c.root, "config/samples/redis-cluster/limiterfleet.yaml"), b)
	c.restrictedNamespace(t, b.Namespace)
	if b.Spec.Store.Type != v1beta1.StoreCluster || b.Spec.Store.Cluster == nil {
		t.Fatalf("the Redis Cluster sample's store is %+v, want type Cluster", b.Spec.Store)
	}
	if r := ptr.Deref(b.Spec.Store.Cluster.ReplicasPerShard, -1); r != 0 {
		t.Fatalf("the Redis Cluster sample asks for %d replicas per shard: a one-node cluster can only have 0", r)
	}
	// On two nodes or more, a replica per shard, on another node than its
	// primary's: deleting a primary's pod is a failover.
	replicas := int32(0)
	if nodes(t) >= 2 {
		replicas = 1
		b.Spec.Store.Cluster.ReplicasPerShard = ptr.To(replicas)
	}
	b.Spec.Store.Cluster.Storage = &v1beta1.RedisStorage{Size: resource.MustParse("1Gi")}
	// The journey's client pods call the fleet from their namespace: its
	// clients, whose pods alone the fleet's NetworkPolicy admits.
	if b.Spec.DataPlane == nil {
		b.Spec.DataPlane = &v1beta1.DataPlane{}
	}
	b.Spec.DataPlane.Clients = []v1beta1.FleetClient{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": appNS}}}}
	start := time.Now()
	if err := c.c.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	f := c.fleet(t, b.Namespace, b.Name)
	if f.Spec.EffectiveRedisMode() != v1alpha1.RedisCluster || f.Spec.Redis.Storage == nil {
		t.Fatalf("the v1beta1 fleet reads as v1alpha1 with redis %+v, want mode Cluster with storage", f.Spec.Redis)
	}
	j.fleet = f
	var redisReady, ready time.Duration
	waitFor(t, "fleet "+f.Name+" Ready", 4*time.Minute, func() (bool, string) {
		got := c.fleet(t, f.Namespace, f.Name)
		rs, rmsg := condition(got.Status.Conditions, v1beta1.RedisReadyCondition)
		if rs == metav1.ConditionTrue && redisReady == 0 {
			redisReady = time.Since(start)
		}
		s, msg := condition(got.Status.Conditions, v1beta1.ReadyCondition)
		if s == metav1.ConditionTrue && rs == metav1.ConditionTrue {
			ready = time.Since(start)
			return true, ""
		}
		return false, fmt.Sprintf("Ready %s (%s), RedisReady %s (%s); redis pods: %s", s, msg, rs, rmsg,
			j.podsState(t, f.Namespace, resources.RedisSelectorLabels(betaOf(f))))
	})
	j.mark("Redis Cluster fleet: RedisReady %s, Ready %s after create", redisReady.Round(100*time.Millisecond), ready.Round(100*time.Millisecond))
	t.Logf("fleet %s/%s: RedisReady %v, Ready %v after kubectl create",
		f.Namespace, f.Name, redisReady.Round(100*time.Millisecond), ready.Round(100*time.Millisecond))

	got := c.fleet(t, f.Namespace, f.Name)
	if n := len(got.Status.Redis.Primaries); n != 3 {
		t.Errorf("%d primaries, want 3: %+v", n, got.Status.Redis)
	}
	if got.Status.Redis.SlotsAssigned != 16384 {
		t.Errorf("%d slots assigned, want 16384", got.Status.Redis.SlotsAssigned)
	}
	for shard := range 3 {
		sts := &appsv1.StatefulSet{}
		// RedisReady is the operator's view of Redis itself; a pod's
		// Ready is the kubelet's TCP probe, every 5s, so it may come a
		// few seconds after the cluster formed.
		waitFor(t, "StatefulSet "+resources.RedisShardName(betaOf(f), shard)+" ready", time.Minute, func() (bool, string) {
			if err := c.c.Get(context.Background(), client.ObjectKey{Namespace: f.Namespace, Name: resources.RedisShardName(betaOf(f), shard)}, sts); err != nil {
				return false, err.Error()
			}
			return sts.Status.ReadyReplicas == 1+replicas, fmt.Sprintf("%d ready, want %d", sts.Status.ReadyReplicas, 1+replicas)
		})
		if img := sts.Spec.Template.Spec.Containers[0].Image; img != c.image(t, "redis") {
			t.Errorf("StatefulSet %s runs %s, want the chart's redis.image %s", sts.Name, img, c.image(t, "redis"))
		}
	}

	// The limiters are given the Redis nodes' DNS names, and each name
	// resolves, from a pod, to the pod that serves it.
	dep := &appsv1.Deployment{}
	if err := c.c.Get(context.Background(), client.ObjectKey{Namespace: f.Namespace, Name: resources.LimiterName(betaOf(f))}, dep); err != nil {
		t.Fatal(err)
	}
	seeds := resources.RedisSeeds(betaOf(got))
	store := "--store=redis-cluster://" + strings.Join(seeds, ",")
	if args := dep.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, store) {
		t.Errorf("limiter arguments %q, want %s", args, store)
	}
	var hosts []string
	for _, s := range seeds {
		hosts = append(hosts, strings.Split(s, ":")[0])
	}
	resolved := map[string]any{}
	c.execJSON(t, &resolved, appNS, clientPod, append([]string{"/e2eclient", "resolve"}, hosts...)...)
	pods := &corev1.PodList{}
	if err := c.c.List(context.Background(), pods, client.InNamespace(f.Namespace), client.MatchingLabels(resources.RedisSelectorLabels(betaOf(f)))); err != nil {
		t.Fatal(err)
	}
	ips := map[string]string{}
	for _, p := range pods.Items {
		ips[p.Name] = p.Status.PodIP
	}
	for _, h := range hosts {
		pod := strings.Split(h, ".")[0]
		addrs, _ := resolved[h].([]any)
		if len(addrs) != 1 || addrs[0] != ips[pod] {
			t.Errorf("%s resolves to %v from a pod, want pod %s's IP %s", h, resolved[h], pod, ips[pod])
		}
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// --- Step 3 ------------------------------------------------------------------

// samples applies config/samples/ as the README says and checks that every
// policy in it is enforced, and that the README's request and Envoy's RLS
// call, through the Redis Cluster fleet's Service, get 200 five times and
// then 429.
func (j *journey) samples(t *testing.T) {
	c := j.c
	for _, ns := range []string{"payments", "identity"} {
		c.kubectl(t, "create", "namespace", ns)
	}
	start := time.Now()
	t.Logf("kubectl apply -f config/samples/:\n%s", c.kubectl(t, "apply", "-f", "config/samples/"))
	policies := samplePolicies(t, filepath.Join(c.root, "config/samples"))
	if len(policies) == 0 {
		t.Fatal("no RateLimitPolicy in config/samples")
	}
	waitFor(t, "every sample policy Enforced", 3*time.Minute, func() (bool, string) {
		var notYet []string
		for _, key := range policies {
			p := c.policy(t, key.Namespace, key.Name)
			if s, msg := condition(p.Status.Conditions, v1beta1.EnforcedCondition); s != metav1.ConditionTrue {
				notYet = append(notYet, fmt.Sprintf("%s: Enforced %s (%s)", key, s, msg))
			}
		}
		return len(notYet) == 0, strings.Join(notYet, "; ")
	})
	j.mark("%d sample policies Enforced %s after kubectl apply", len(policies), since(start))
	t.Logf("%d sample policies Enforced %s after kubectl apply -f config/samples/", len(policies), since(start))
	j.conversion(t)

	// The README's request goes to the Redis Cluster fleet: its pods share
	// their counters, so a new connection per request (which kube-proxy
	// may send to any pod) still gets the sixth denied.
	f := j.fleet
	charges := c.policy(t, "payments", "charges-per-user")
	if !slices.ContainsFunc(charges.Status.Fleets, func(s v1alpha1.FleetStatus) bool { return s.Namespace == f.Namespace && s.Name == f.Name }) {
		t.Fatalf("the Redis Cluster sample fleet %s/%s (policySelector %v) does not enforce payments/charges-per-user, "+
			"which only %v do: applying config/samples/ and config/samples/redis-cluster/ enforces nothing there "+
			"(issue 15: the samples don't fit together)", f.Namespace, f.Name, f.Spec.PolicySelector, charges.Status.Fleets)
	}
	svc := fmt.Sprintf("%s.%s.svc", resources.LimiterName(betaOf(f)), f.Namespace)
	var answers []struct {
		Status  int
		Headers http.Header
		Error   string
	}
	c.execJSON(t, &answers, appNS, clientPod, "/e2eclient", "http", "-n", "6", "-new-conn", "-method", "POST",
		"-url", "http://"+svc+":8080/v1/ratelimit/check", "-data", readmeRequest)
	var codes []int
	for _, a := range answers {
		codes = append(codes, a.Status)
	}
	if want := []int{200, 200, 200, 200, 200, 429}; !slices.Equal(codes, want) {
		t.Errorf("the README's request 6 times through %s: %v, want %v (%+v)", svc, codes, want, answers)
	}
	for i, a := range answers {
		for _, h := range []string{"Ratelimit", "Ratelimit-Policy", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"} {
			if a.Headers.Get(h) == "" {
				t.Errorf("answer %d has no %s header: %v", i+1, h, a.Headers)
			}
		}
		if a.Headers.Get("X-Sluice-Reason") != "" {
			t.Errorf("answer %d was made by a failure mode: %s", i+1, a.Headers.Get("X-Sluice-Reason"))
		}
	}
	if len(answers) == 6 && answers[5].Headers.Get("Retry-After") == "" {
		t.Errorf("the 429 has no Retry-After: %v", answers[5].Headers)
	}

	// Envoy's RLS call for the same descriptor, for another user.
	var rls []rlsAnswer
	c.execJSON(t, &rls, appNS, clientPod, "/e2eclient", "rls", "-n", "6", "-new-conn", "-addr", svc+":8081",
		"-domain", "payments-api", "-descriptor", "user_id=bob,path=/v1/charges")
	var rlsCodes []string
	for _, a := range rls {
		rlsCodes = append(rlsCodes, a.Code+a.Error)
	}
	if want := []string{"OK", "OK", "OK", "OK", "OK", "OVER_LIMIT"}; !slices.Equal(rlsCodes, want) {
		t.Errorf("Envoy RLS calls through %s: %v, want %v (%+v)", svc, rlsCodes, want, rls)
	}

	// The counts reach kubectl get rlp -A.
	waitFor(t, "charges-per-user's counts in its status", 2*time.Minute, func() (bool, string) {
		e := c.policy(t, "payments", "charges-per-user").Status.Enforcement
		if e == nil || e.Allowed == nil || e.Limited == nil {
			return false, fmt.Sprintf("enforcement %+v", e)
		}
		return *e.Allowed >= 10 && *e.Limited >= 2, fmt.Sprintf("allowed %d, limited %d, want 10 and 2", *e.Allowed, *e.Limited)
	})
	t.Logf("kubectl get rlp -A:\n%s", c.kubectl(t, "get", "rlp", "-A"))
}

// conversion reads the v1alpha1 sample, which the API server stored as
// v1beta1 through the operator's conversion webhook, in both versions: as
// v1beta1 it is the same rate in the union's shape, and as v1alpha1 every
// field of the file reads back as written. (It is Enforced: the step above
// waited for every sample.)
func (j *journey) conversion(t *testing.T) {
	c := j.c
	const file = "config/samples/ratelimit_v1alpha1_ratelimitpolicy.yaml"
	objs := readObjects(t, filepath.Join(c.root, file))
	if len(objs) != 1 || objs[0].GetAPIVersion() != "ratelimit.sluice.dev/v1alpha1" {
		t.Fatalf("%s: want one v1alpha1 RateLimitPolicy, got %d objects", file, len(objs))
	}
	want := objs[0]
	read := func(version string) map[string]any {
		var u map[string]any
		out := c.kubectl(t, "get", "ratelimitpolicies."+version+".ratelimit.sluice.dev", "-n", want.GetNamespace(), want.GetName(), "-o", "json")
		if err := json.Unmarshal([]byte(out), &u); err != nil {
			t.Fatalf("kubectl get %s as %s: %v\n%s", want.GetName(), version, err, out)
		}
		spec, _ := u["spec"].(map[string]any)
		return spec
	}
	beta := read("v1beta1")
	limit, _ := beta["limit"].(map[string]any)
	rate, _ := limit["rate"].(map[string]any)
	if limit["type"] != "Rate" || rate["algorithm"] != "TokenBucket" || fmt.Sprint(rate["limit"]) != "100" ||
		fmt.Sprint(rate["burst"]) != "150" || beta["domain"] != "example-api" {
		t.Errorf("%s read as v1beta1: spec %v, want limit {type: Rate, rate: {algorithm: TokenBucket, limit: 100, burst: 150}} for domain example-api", file, beta)
	}
	alpha := read("v1alpha1")
	for _, d := range specDiffs("spec", want.Object["spec"], alpha) {
		t.Errorf("%s read back as v1alpha1: %s", file, d)
	}
	j.mark("the v1alpha1 sample reads as v1beta1 and back as written (conversion webhook)")
}

// specDiffs lists where got does not say what want (a file's object) says.
// The API server may add defaults, so a field want leaves out is not
// compared, and a duration reads back in Go's spelling (1m as 1m0s: the
// conversion goes through metav1.Duration), so durations compare by value.
func specDiffs(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s is %v, the file says %v", path, got, want)}
		}
		var out []string
		for k, v := range w {
			out = append(out, specDiffs(path+"."+k, v, g[k])...)
		}
		return out
	case string:
		if g, ok := got.(string); ok && g != w {
			dw, errW := time.ParseDuration(w)
			dg, errG := time.ParseDuration(g)
			if errW == nil && errG == nil && dw == dg {
				return nil
			}
		}
	}
	if !reflect.DeepEqual(want, got) {
		return []string{fmt.Sprintf("%s is %v, the file says %v", path, got, want)}
	}
	return nil
}

type rlsAnswer struct {
	Code     string
	Statuses []string
	Headers  map[string]string
	Reason   string
	Error    string
}

// samplePolicies lists the RateLimitPolicies in the YAML files of dir, as
// kubectl apply -f dir reads them (not its subdirectories).
func samplePolicies(t *testing.T, dir string) []client.ObjectKey {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var keys []client.ObjectKey
	for _, f := range files {
		for _, u := range readObjects(t, f) {
			if u.GetKind() == "RateLimitPolicy" {
				keys = append(keys, client.ObjectKey{Namespace: u.GetNamespace(), Name: u.GetName()})
			}
		}
	}
	sort.Slice(keys, func(a, b int) bool { return keys[a].String() < keys[b].String() })
	return keys
}

func readObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := d.Decode(&u.Object); err == io.EOF {
			return objs
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// --- Step 4 ------------------------------------------------------------------

// nginx runs Debian's nginx on the shipped sample configuration, with only
// its three addresses replaced by Service names, in front of an app pod,
// against the gateway sample fleet: 200 with the rate-limit headers until
// the limit, then 429 with Retry-After.
func (j *journey) nginx(t *testing.T) {
	c := j.c
	ctx := context.Background()
	// The gateway sample: its fleet and policies. Its fleet counts in each
	// pod's memory (store type Memory): with one pod, the limit is exact
	// whichever pod nginx's connections reach.
	objs := readObjects(t, filepath.Join(c.root, "config/samples/gateways/policies.yaml"))
	var manifests []string
	var fleetKey client.ObjectKey
	for _, u := range objs {
		if u.GetKind() == "LimiterFleet" {
			if err := unstructured.SetNestedField(u.Object, int64(1), "spec", "limiters", "replicas"); err != nil { // a v1beta1 fleet
				t.Fatal(err)
			}
			// nginx, in the journey's namespace, is the fleet's client.
			clients := []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": appNS}}}}
			if err := unstructured.SetNestedSlice(u.Object, clients, "spec", "dataPlane", "clients"); err != nil {
				t.Fatal(err)
			}
			fleetKey = client.ObjectKey{Namespace: u.GetNamespace(), Name: u.GetName()}
			j.gateway = fleetKey
		}
		b, err := yaml.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		manifests = append(manifests, string(b))
	}
	start := time.Now()
	c.apply(t, strings.Join(manifests, "---\n"))
	waitFor(t, "gateway fleet Ready", 3*time.Minute, func() (bool, string) {
		s, msg := condition(c.fleet(t, fleetKey.Namespace, fleetKey.Name).Status.Conditions, v1beta1.ReadyCondition)
		return s == metav1.ConditionTrue, msg
	})
	fleet := c.fleet(t, fleetKey.Namespace, fleetKey.Name)

	// The app, behind a Service.
	app := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: appNS, Labels: map[string]string{"app": "app"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: c.image(t, "e2e-client"), ImagePullPolicy: corev1.PullNever,
			Args: []string{"app", "-addr", ":8000"}, SecurityContext: restricted(),
			Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8000)}}, PeriodSeconds: 1},
		}}},
	}
	c.runPod(t, app)
	j.service(t, "app", 8000)

	// nginx on the sample, its addresses replaced by the Services'.
	conf, err := os.ReadFile(filepath.Join(c.root, "config/samples/gateways/nginx/nginx.conf"))
	if err != nil {
		t.Fatal(err)
	}
	limiterSvc := fmt.Sprintf("%s.%s.svc.cluster.local", resources.LimiterName(betaOf(fleet)), fleet.Namespace)
	replaced := string(conf)
	for old, repl := range map[string]string{
		"server 127.0.0.1:8000;": "server app." + appNS + ".svc.cluster.local:8000;",
		"server 127.0.0.1:8080;": "server " + limiterSvc + ":8080;",
		"listen 127.0.0.1:8088;": "listen 8088;",
	} {
		if n := strings.Count(replaced, old); n != 1 {
			t.Fatalf("the nginx sample has %q %d times, want once", old, n)
		}
		replaced = strings.Replace(replaced, old, repl, 1)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "nginx", Namespace: appNS}, Data: map[string]string{"nginx.conf": replaced}}
	if err := c.c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	nginx := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "nginx", Namespace: appNS, Labels: map[string]string{"app": "nginx"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "nginx", Image: c.image(t, "nginx"), ImagePullPolicy: corev1.PullNever,
				Command: []string{"/usr/sbin/nginx", "-p", "/tmp/nginx", "-c", "/etc/nginx-sample/nginx.conf",
					"-e", "stderr", "-g", "daemon off; pid /tmp/nginx/nginx.pid;"},
				SecurityContext: restricted(),
				Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: 8088}},
				ReadinessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8088)}}, PeriodSeconds: 1},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "conf", MountPath: "/etc/nginx-sample", ReadOnly: true},
					{Name: "prefix", MountPath: "/tmp/nginx"},
					{Name: "temp", MountPath: "/tmp/nginx/temp"},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "nginx"}}}},
				{Name: "prefix", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "temp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
	c.runPod(t, nginx)
	j.service(t, "nginx", 8088)
	j.mark("gateway fleet, app and nginx ready %s after apply", since(start))

	type answer struct {
		Status  int
		Headers http.Header
		Body    string
		Error   string
	}
	get := func(n int, headers ...string) []answer {
		args := []string{"/e2eclient", "http", "-n", fmt.Sprint(n), "-url", "http://nginx." + appNS + ".svc.cluster.local:8088/charges"}
		for _, h := range headers {
			args = append(args, "-header", h)
		}
		var as []answer
		c.execJSON(t, &as, appNS, clientPod, args...)
		return as
	}
	alice := get(6, "X-Api-Key: alice")
	var codes []int
	for _, a := range alice {
		codes = append(codes, a.Status)
	}
	if want := []int{200, 200, 200, 200, 200, 429}; !slices.Equal(codes, want) {
		t.Fatalf("through nginx with X-Api-Key alice: %v, want %v (%+v)", codes, want, alice)
	}
	for i, a := range alice {
		for _, h := range []string{"Ratelimit", "Ratelimit-Policy", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"} {
			if a.Headers.Get(h) == "" {
				t.Errorf("answer %d through nginx has no %s header: %v", i+1, h, a.Headers)
			}
		}
		if a.Headers.Get("X-Sluice-Fail-Open") != "" {
			t.Errorf("answer %d through nginx failed open: %v", i+1, a.Headers)
		}
		if i < 5 && (a.Headers.Get("X-App") != "e2e" || !strings.Contains(a.Body, `"X-Api-Key":["alice"]`)) {
			t.Errorf("answer %d did not come from the app with the request's headers: %v %s", i+1, a.Headers, a.Body)
		}
	}
	if last := alice[5]; last.Headers.Get("Retry-After") == "" || last.Headers.Get("X-App") != "" || !strings.Contains(last.Body, "rate limited") {
		t.Errorf("the 429 through nginx: want Retry-After, nginx's body and no app: %v %s", last.Headers, last.Body)
	}
	if remaining := alice[4].Headers.Get("X-Ratelimit-Remaining"); remaining != "0" {
		t.Errorf("the 5th answer's X-RateLimit-Remaining %q, want 0", remaining)
	}
	// Each key has its own counter; a request without one is not limited.
	if bob := get(1, "X-Api-Key: bob"); len(bob) != 1 || bob[0].Status != 200 {
		t.Errorf("bob's first request through nginx: %+v, want 200", bob)
	}
	if anon := get(1); len(anon) != 1 || anon[0].Status != 200 {
		t.Errorf("a request without X-Api-Key through nginx: %+v, want 200", anon)
	}
}

// service creates a ClusterIP Service name in appNS for the pods labelled
// app=name.
func (j *journey) service(t *testing.T, name string, port int32) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: appNS},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: port, TargetPort: intstr.FromInt32(port)}},
		},
	}
	if err := j.c.c.Create(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	j.dial(t, fmt.Sprintf("%s.%s.svc.cluster.local:%d", name, appNS, port))
}

// dial waits until a new Service's address takes connections from the
// client pod: until kube-proxy has its endpoints, it refuses them.
func (j *journey) dial(t *testing.T, hostPort string) {
	t.Helper()
	var dialed struct{ After string }
	j.c.execJSON(t, &dialed, appNS, clientPod, "/e2eclient", "dial", hostPort)
	t.Logf("%s takes connections (%s after the wait started)", hostPort, dialed.After)
}
