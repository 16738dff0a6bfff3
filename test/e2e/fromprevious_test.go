package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
	"github.com/sluice-dev/sluice/limiter/config"
)

// upgradeDomain is the domain of the load the upgrade runs under.
const upgradeDomain = "e2e-upgrade"

// imageValues are the chart values step 1 installs with and step 3
// upgrades with: the operator's and the limiter's images (the previous
// release's, then this tree's), never pulled, and the cluster's Redis.
func (j *journey) imageValues(t *testing.T, operator, limiter string) []string {
	t.Helper()
	opRepo, opTag := splitRef(t, operator)
	limRepo, limTag := splitRef(t, limiter)
	redisRepo, redisTag := splitRef(t, j.c.image(t, "redis"))
	return []string{
		"--set", "operator.image.repository=" + opRepo, "--set", "operator.image.tag=" + opTag,
		"--set", "operator.image.pullPolicy=Never",
		"--set", "limiter.image.repository=" + limRepo, "--set", "limiter.image.tag=" + limTag,
		"--set", "redis.image.repository=" + redisRepo, "--set", "redis.image.tag=" + redisTag,
	}
}

// previousChart extracts the chart of commit from this clone's history
// and returns its directory.
func (j *journey) previousChart(t *testing.T, commit string) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("sh", "-c", `git -C "$1" archive --format=tar "$2" charts/sluice | tar -x -C "$3"`, "sh", j.c.root, commit, dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("extracting the chart of %s: %v\n%s", commit, err, out)
	}
	return filepath.Join(dir, "charts", "sluice")
}

// upgradeFromPrevious upgrades the previous release, which step 1
// installed and step 2's fleet runs on, to this tree's chart and images
// with helm upgrade (the same values otherwise), under steady load on the
// fleet's limiters: a policy that allows all of it, and one that denies
// (1 an hour per key). It waits for the operator and every limiter pod to
// run the new image, the snapshot ConfigMap to carry format 2 and the
// Redis pods to run what the new operator renders, then judges the load
// as the faults judge a limiter rolling restart (clean): no RPC error (a
// pod that takes calls it can't answer, a connection closed under them),
// and no decision failed beyond the noise, or only Redis round trips that
// missed their 20ms deadline within the busy machine's tolerance: the
// upgrade starts pods and applies CRDs on a shared 2-core machine, which
// the noise measured before did not see. Seen: 9 of 6,406; 9 of 13,572
// at a load average of 23, 7 of them before any new limiter pod ran; 44
// of 7,011 (over the tolerance), 42 of them while helm applied the CRDs
// (the API server rebuilding their handlers, its watchers ended), before
// any Sluice pod changed; 6 of 14,087; never an RPC error. And the
// denying policy still denies.
func (j *journey) upgradeFromPrevious(t *testing.T) {
	if j.previous == "" {
		msg := "the upgrade from the previous release was NOT exercised: its commit (hack/previous-release) is not in this clone's history, so step 1 installed this tree"
		t.Log(msg)
		j.mark("%s", msg)
		t.Skip(msg)
	}
	c, f := j.c, j.fleet
	j.upgrade = "started"
	j.allowDomainTo(t, upgradeDomain, appNS)
	j.upgradePolicies(t)
	svc := fmt.Sprintf("%s.%s.svc:8081", resources.LimiterName(betaOf(f)), f.Namespace)
	before := j.checkDenies(t, svc, "upgrade-deny=before", []string{"OK", "OVER_LIMIT"}, true)

	common := []string{"-addr", svc, "-domain", upgradeDomain, "-conns", "4", "-interval", "250ms"}
	allow := c.startLoad(t, appNS, clientPod, append(slices.Clone(common), "-descriptor", "upgrade-allow=%d", "-keys", "1000", "-rate", "150")...)
	deny := c.startLoad(t, appNS, clientPod, append(slices.Clone(common), "-descriptor", "upgrade-deny=load%d", "-keys", "20", "-rate", "50")...)
	n := allow.measureNoise(t, 5*time.Second)
	nd := deny.measureNoise(t, time.Second)
	op, lim := c.image(t, "sluice-operator"), c.image(t, "sluice-limiter")
	t.Logf("the previous release's limiters before helm upgrade (failed decisions, store and Redis errors):\n%s", j.limiterFailures(t))
	start := time.Now()
	out, stderr := c.helm(t, append([]string{"upgrade", release, "charts/sluice", "--namespace", system}, j.imageValues(t, op, lim)...)...)
	t.Logf("helm upgrade from %s to this tree (%s):\n%s%s", j.previous, since(start), out, stderr)
	// Told, to tell where failures came from: the limiters still are the
	// previous release's while the CRDs and the operator change.
	t.Logf("the limiters when helm upgrade returned (failing seconds so far: %s):\n%s", allow.failingSeconds(start), j.limiterFailures(t))
	timing := j.awaitUpgrade(t, start, op, lim)
	j.upgrade = "done"
	allow.waitQuiet(t, n, start, 5*time.Second, 3*time.Minute)
	rep, repDeny := allow.report(n, start), deny.report(nd, start)
	allow.stop()
	deny.stop()

	t.Logf("upgrade from %s: %s; the allowing load: %s (failing seconds: %s); the denying load: %s (failing seconds: %s)",
		j.previous, timing, rep, allow.failingSeconds(start), repDeny, deny.failingSeconds(start))
	j.mark("upgrade from %s under load: %s; %d decisions allowed-or-failed sent, %d failed (%d RPC errors); denying load %d sent, %d failed",
		j.previous, timing, rep.Answered, rep.Failed, rep.RPCErrors, repDeny.Answered, repDeny.Failed)
	t.Logf("the limiters' failed decisions and store errors after the upgrade:\n%s", j.limiterFailures(t))
	for _, l := range []struct {
		name string
		rep  faultReport
		load *load
	}{{"allowing", rep, allow}, {"denying", repDeny, deny}} {
		if !l.rep.clean() {
			j.errorf(t, "decisions failed during the upgrade from %s (the %s load): %s; failing seconds: %s",
				j.previous, l.name, l.rep, l.load.failingSeconds(start))
		}
	}
	// Denied before the upgrade, denied after: the counters survived it;
	// and a new key's second call is denied by the new limiters.
	if before != "" {
		j.checkDenies(t, svc, before, []string{"OVER_LIMIT", "OVER_LIMIT"}, false)
	}
	j.checkDenies(t, svc, "upgrade-deny=after", []string{"OK", "OVER_LIMIT"}, true)
}

// upgradePolicies creates the policies of the upgrade's load, on the
// previous release, and waits until it enforces them: upgrade-allow never
// limits the load, upgrade-deny allows 1 an hour per key.
func (j *journey) upgradePolicies(t *testing.T) {
	c, f := j.c, j.fleet
	sel := map[string]string{}
	if f.Spec.PolicySelector != nil {
		sel = f.Spec.PolicySelector.MatchLabels
	}
	closed, tokenBucket := v1alpha1.FailClosed, v1alpha1.TokenBucket
	policy := func(name, key string, limit int64, period time.Duration) *v1alpha1.RateLimitPolicy {
		return &v1alpha1.RateLimitPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: appNS, Labels: sel},
			Spec: v1alpha1.RateLimitPolicySpec{
				Domain: upgradeDomain, Descriptors: []v1alpha1.Descriptor{{Key: key}},
				Algorithm: &tokenBucket, Rate: v1alpha1.Rate{Limit: limit, Period: metav1.Duration{Duration: period}},
				Burst: ptr.To(limit), FailureMode: &closed,
			},
		}
	}
	for _, p := range []*v1alpha1.RateLimitPolicy{
		policy("e2e-upgrade-allow", "upgrade-allow", 100000, time.Second),
		policy("e2e-upgrade-deny", "upgrade-deny", 1, time.Hour),
	} {
		if err := c.c.Create(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the upgrade's policies Enforced by the previous release", 2*time.Minute, func() (bool, string) {
		for _, n := range []string{"e2e-upgrade-allow", "e2e-upgrade-deny"} {
			if s, msg := condition(c.policy(t, appNS, n).Status.Conditions, v1beta1.EnforcedCondition); s != metav1.ConditionTrue {
				return false, n + ": " + msg
			}
		}
		return true, ""
	})
}

// checkDenies calls the limiters len(want) times for each of 5 keys,
// prefix followed by the key's index (with fresh, by the attempt's too),
// and wants the answers want for each; it returns the keys' prefix. A
// decision a failure mode made (the busy machine's missed Redis deadline,
// as the faults' kept counters allow) says nothing of the counters: the
// calls are made again, on fresh keys when they count, 3 times at most.
func (j *journey) checkDenies(t *testing.T, svc, prefix string, want []string, fresh bool) string {
	t.Helper()
	spoiled := ""
	for attempt := 1; attempt <= 3; attempt++ {
		keys := prefix
		if fresh {
			keys = fmt.Sprintf("%s-a%d-k", prefix, attempt)
		}
		var answers []rlsAnswer
		j.c.execJSON(t, &answers, appNS, clientPod, "/e2eclient", "rls", "-addr", svc, "-domain", upgradeDomain,
			"-descriptor", keys+"%d", "-keys", "5", "-n", fmt.Sprint(len(want)))
		if len(answers) != 5*len(want) {
			t.Fatalf("%s: %d answers, want %d: %+v", keys, len(answers), 5*len(want), answers)
		}
		spoiled = ""
		for k := range 5 {
			var got []string
			byStore := true
			for _, a := range answers[k*len(want) : (k+1)*len(want)] {
				got = append(got, a.Code+a.Error+a.Reason)
				byStore = byStore && a.Error == "" && a.Reason == ""
			}
			if slices.Equal(got, want) {
				continue
			}
			if byStore {
				j.errorf(t, "%s key %d: %v, want %v", keys, k, got, want)
				return keys
			}
			spoiled = fmt.Sprintf("%s key %d: %v", keys, k, got)
		}
		if spoiled == "" {
			return keys
		}
		t.Logf("%s (a failure mode decided): again", spoiled)
	}
	j.errorf(t, "no answers for %s without a failure mode deciding: %s", prefix, spoiled)
	return ""
}

// awaitUpgrade waits, after helm upgrade at start, until the operator's
// pods and every limiter pod run this tree's images (and no other pod is
// left), the snapshot says format 2, and the Redis pods run what the new
// operator renders; it says how long each took.
func (j *journey) awaitUpgrade(t *testing.T, start time.Time, op, lim string) string {
	c, f := j.c, j.fleet
	dep := j.operatorDeployment(t)
	j.awaitPods(t, "the operator", system, dep.Spec.Selector.MatchLabels, op, ptr.Deref(dep.Spec.Replicas, 1))
	opAt := time.Since(start)
	limDep := &appsv1.Deployment{}
	if err := c.c.Get(context.Background(), client.ObjectKey{Namespace: f.Namespace, Name: resources.LimiterName(betaOf(f))}, limDep); err != nil {
		t.Fatal(err)
	}
	j.awaitPods(t, "every limiter", f.Namespace, resources.LimiterSelectorLabels(betaOf(f)), lim, ptr.Deref(limDep.Spec.Replicas, 1))
	limAt := time.Since(start)
	var format int
	waitFor(t, "the snapshot ConfigMap in format 2", 3*time.Minute, func() (bool, string) {
		var msg string
		format, msg = j.snapshotFormat(t)
		return format == config.DocumentFormat, msg
	})
	formatAt := time.Since(start)
	j.awaitRedisRendered(t)
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	return fmt.Sprintf("operator pods new %v, every limiter pod new %v, snapshot format %d %v, Redis pods as rendered %s after helm upgrade",
		r(opAt), r(limAt), format, r(formatAt), since(start))
}

// awaitPods waits until the pods of selector in ns are want, all ready,
// none terminating, each running image.
func (j *journey) awaitPods(t *testing.T, what, ns string, selector map[string]string, image string, want int32) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s pods (%d) ready on %s, no other left", what, want, image), 4*time.Minute, func() (bool, string) {
		pods := &corev1.PodList{}
		if err := j.c.c.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels(selector)); err != nil {
			return false, err.Error()
		}
		var seen []string
		done := len(pods.Items) == int(want)
		for i := range pods.Items {
			p := &pods.Items[i]
			img := p.Spec.Containers[0].Image
			seen = append(seen, fmt.Sprintf("%s %s %s", p.Name, img, podState(p)))
			done = done && img == image && isReady(p) && p.DeletionTimestamp == nil
		}
		return done, strings.Join(seen, "; ")
	})
}

// snapshotFormat reads the format of the document in the fleet's snapshot
// ConfigMap (1 when it says none, as the previous release writes it).
func (j *journey) snapshotFormat(t *testing.T) (int, string) {
	cm := &corev1.ConfigMap{}
	f := j.fleet
	if err := j.c.c.Get(context.Background(), client.ObjectKey{Namespace: f.Namespace, Name: resources.SnapshotConfigMapName(betaOf(f))}, cm); err != nil {
		return 0, err.Error()
	}
	doc := []byte(cm.Data[config.DocumentKey])
	if z, ok := cm.BinaryData[config.DocumentGzipKey]; ok {
		r, err := gzip.NewReader(bytes.NewReader(z))
		if err != nil {
			return 0, err.Error()
		}
		if doc, err = io.ReadAll(r); err != nil {
			return 0, err.Error()
		}
	}
	var d struct {
		Format *int `json:"format"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return 0, fmt.Sprintf("the document: %v", err)
	}
	format := ptr.Deref(d.Format, config.DocumentFormatV1alpha1)
	return format, fmt.Sprintf("format %d", format)
}

// awaitRedisRendered waits until every Redis StatefulSet of the fleet
// carries the hash of the redis.conf this tree renders and has rolled its
// pods to it, all ready: the later steps must not run during a Redis roll
// the upgrade started.
func (j *journey) awaitRedisRendered(t *testing.T) {
	t.Helper()
	c := j.c
	waitFor(t, "the Redis pods running the redis.conf this tree renders", 4*time.Minute, func() (bool, string) {
		f := c.fleet(t, j.fleet.Namespace, j.fleet.Name)
		sum := sha256.Sum256([]byte(resources.RedisConfig(betaOf(f))))
		hash := hex.EncodeToString(sum[:8])
		list := &appsv1.StatefulSetList{}
		if err := c.c.List(context.Background(), list, client.InNamespace(f.Namespace), client.MatchingLabels(resources.RedisSelectorLabels(betaOf(f)))); err != nil {
			return false, err.Error()
		}
		if len(list.Items) == 0 {
			return false, "no Redis StatefulSet"
		}
		for _, s := range list.Items {
			st := s.Status
			if h := s.Spec.Template.Annotations[resources.RedisConfigHashAnnotation]; h != hash {
				return false, fmt.Sprintf("%s renders redis.conf %s, this tree %s", s.Name, h, hash)
			}
			if st.ObservedGeneration != s.Generation || st.UpdateRevision != st.CurrentRevision ||
				st.UpdatedReplicas != ptr.Deref(s.Spec.Replicas, 1) || st.ReadyReplicas != ptr.Deref(s.Spec.Replicas, 1) {
				return false, fmt.Sprintf("%s rolling: %d updated, %d ready of %d", s.Name, st.UpdatedReplicas, st.ReadyReplicas, ptr.Deref(s.Spec.Replicas, 1))
			}
		}
		s, msg := condition(f.Status.Conditions, v1beta1.ReadyCondition)
		return s == metav1.ConditionTrue, "fleet Ready " + string(s) + ": " + msg
	})
}

// failingSeconds lists the seconds from start on with a failed decision,
// at the time they began, with their failures and errors.
func (l *load) failingSeconds(start time.Time) string {
	var out []string
	for _, s := range l.seconds(start, time.Now()) {
		if s.failed > 0 {
			out = append(out, fmt.Sprintf("%s (+%v) %d of %d", s.start.Format("15:04:05"), s.start.Sub(start).Round(time.Second), s.failed, s.answered))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}
