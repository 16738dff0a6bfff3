package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

const (
	// keptKeys are counters exhausted before the faults, spread over every
	// shard: after each fault they must still deny (their keys were kept).
	keptKeys = 30
	// The operator's leader election Lease (cmd/operator).
	leaseName = "operator.ratelimit.sluice.dev"
)

// faults runs each fault under steady load from a client pod through the
// Redis Cluster fleet's Service and prints the decisions that failed (RLS
// errors, and decisions failureMode Closed made because Redis could not)
// and when they stopped.
func (j *journey) faults(t *testing.T) {
	c, f := j.c, j.fleet
	sel := map[string]string{}
	if f.Spec.PolicySelector != nil {
		sel = f.Spec.PolicySelector.MatchLabels
	}
	j.allowDomain(t, loadDomain, appNS)
	closed, local := v1alpha1.FailClosed, v1alpha1.FailLocal
	tokenBucket := v1alpha1.TokenBucket
	for _, p := range []*v1alpha1.RateLimitPolicy{
		{ // the load: never over its limit, so every denial is a failure
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-load", Namespace: appNS, Labels: sel},
			Spec: v1alpha1.RateLimitPolicySpec{
				Domain: loadDomain, Descriptors: []v1alpha1.Descriptor{{Key: "client"}},
				Algorithm: &tokenBucket, Rate: v1alpha1.Rate{Limit: 100000, Period: metav1.Duration{Duration: time.Second}},
				FailureMode: &closed,
			},
		},
		{ // the same load under failureMode Local (faultScenario.localToo)
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-load-local", Namespace: appNS, Labels: sel},
			Spec: v1alpha1.RateLimitPolicySpec{
				Domain: loadDomain, Descriptors: []v1alpha1.Descriptor{{Key: "local"}},
				Algorithm: &tokenBucket, Rate: v1alpha1.Rate{Limit: 100000, Period: metav1.Duration{Duration: time.Second}},
				FailureMode: &local,
			},
		},
		{ // counters that must outlive the faults
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-keep", Namespace: appNS, Labels: sel},
			Spec: v1alpha1.RateLimitPolicySpec{
				Domain: loadDomain, Descriptors: []v1alpha1.Descriptor{{Key: "keep"}},
				Algorithm: &tokenBucket, Rate: v1alpha1.Rate{Limit: 3, Period: metav1.Duration{Duration: time.Hour}},
				Burst: ptr.To[int64](3), FailureMode: &closed,
			},
		},
	} {
		if err := c.c.Create(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the fault policies Enforced", 2*time.Minute, func() (bool, string) {
		for _, n := range []string{"e2e-load", "e2e-load-local", "e2e-keep"} {
			if s, msg := condition(c.policy(t, appNS, n).Status.Conditions, v1beta1.EnforcedCondition); s != metav1.ConditionTrue {
				return false, n + ": " + msg
			}
		}
		return true, ""
	})
	svc := fmt.Sprintf("%s.%s.svc:8081", resources.LimiterName(betaOf(f)), f.Namespace)

	// Exhaust the kept counters: 3 allowed, the 4th denied, for each key.
	// A decision a failure mode made (a busy machine's missed deadline
	// just after the fleet formed) spoils a key's sequence: then the keys
	// are exhausted afresh under another name, at most 3 times.
	keep := ""
	for attempt := 1; keep == "" && attempt <= 3; attempt++ {
		pattern := fmt.Sprintf("keep=a%d-k%%d", attempt)
		var answers []rlsAnswer
		c.execJSON(t, &answers, appNS, clientPod, "/e2eclient", "rls", "-addr", svc, "-domain", loadDomain,
			"-descriptor", pattern, "-keys", fmt.Sprint(keptKeys), "-n", "4")
		spoiled := ""
		for k := range keptKeys {
			var got []string
			byStore := true
			for _, a := range answers[4*k : 4*k+4] {
				got = append(got, a.Code+a.Error+a.Reason)
				byStore = byStore && a.Error == "" && a.Reason == ""
			}
			if want := []string{"OK", "OK", "OK", "OVER_LIMIT"}; !slices.Equal(got, want) {
				if byStore {
					t.Fatalf("key %d: %v, want %v", k, got, want)
				}
				spoiled = fmt.Sprintf("key %d: %v", k, got)
			}
		}
		if spoiled != "" {
			t.Logf("exhausting the kept counters, attempt %d: %s; again", attempt, spoiled)
			continue
		}
		keep = pattern
	}
	if keep == "" {
		t.Fatal("could not exhaust the kept counters without a failure mode deciding")
	}
	// AOF is written every second: let it reach the disk.
	time.Sleep(2 * time.Second)

	loadArgs := []string{"-addr", svc, "-domain", loadDomain, "-descriptor", "client=%d", "-keys", "1000",
		"-rate", "200", "-conns", "4", "-interval", "250ms"}
	redisPods := func() []corev1.Pod {
		pods := &corev1.PodList{}
		if err := c.c.List(context.Background(), pods, client.InNamespace(f.Namespace), client.MatchingLabels(resources.RedisSelectorLabels(betaOf(f)))); err != nil {
			t.Fatal(err)
		}
		return pods.Items
	}

	for _, sc := range j.faultScenarios(redisPods) {
		if sc.twoNodes && nodes(t) < 2 {
			continue
		}
		t.Run(sc.name, func(t *testing.T) { j.runFault(t, sc, svc, keep, loadArgs) })
	}
}

// faultScenario is one fault of the journey's step 9. Every one runs the
// same way (runFault): under steady load from the client pod, its noise
// measured first and the conditions watched; inject causes the fault at
// start; then the runner waits for the repair inject returned, for
// RedisReady if the fault hit Redis, and for the load to be quiet, and
// judges the load and the conditions by what the scenario expects.
type faultScenario struct {
	name string
	// what the journey's summary calls it
	title string
	// inject causes the fault, having read what its repair is told apart
	// by (the old pod, the leader), and returns repaired: it waits until
	// the fault is repaired and says how, and how long after start.
	inject func(t *testing.T, start time.Time) (repaired func(t *testing.T) string)
	// redis: the fault hits Redis. RedisReady must come back True, no
	// second may fail beyond the noise while it says True, the exhausted
	// counters must still deny, and no data loss may be reported.
	redis bool
	// clean: the clients must not see the fault: no RPC error, and no
	// failed decision beyond the noise or the busy machine's tolerance.
	clean bool
	// steady: no condition of the fleet or of a policy may change.
	steady bool
	// maxFailedShare, when set, bounds the decisions failed (or RPC
	// errors) as a share of those of the minute around the fault, 5s
	// before it to 55s after (issue 29: losing one Redis pod fails under
	// 1%).
	maxFailedShare float64
	// reportShare: the share of the minute around the fault that failed
	// is measured and told as maxFailedShare's is, against issue 29's 1%
	// goal, without failing the test.
	reportShare bool
	// restartsLimiters: the fault restarts limiter pods (their node's
	// kubelet makes them again), whose first store calls on a busy machine
	// may miss their deadline while RedisReady truthfully says True; the
	// check that no second fails while it does is left out.
	restartsLimiters bool
	// prepare, when set, runs before the load starts, and says what it
	// did.
	prepare func(t *testing.T) string
	// check, when set, runs last: the scenario's own assertions.
	check func(t *testing.T)
	// twoNodes: the fault needs a second node (skipped with NODES=1).
	twoNodes bool
	// balanced: the load reaches the pods through the headless Service's
	// name, each call balanced round robin over the pods that answer gRPC
	// health checks, instead of a pod per connection through the cluster
	// IP, whose connections to a stopped node's pods fail until the pods
	// are back (kube-proxy keeps them: the node is never NotReady). Not for
	// rollouts: gRPC's DNS resolver looks again at most every 30s, so a
	// client that knew only the old pods fails until then.
	balanced bool
	// localToo: a second load, the same but for policy e2e-load-local
	// (failureMode Local: each limiter decides from its share of the
	// limit while Redis can't answer), runs beside the first, and the
	// share of its minute around the fault that failed is told too.
	localToo bool
}

// faultScenarios are the faults of the journey's step 9, in order.
func (j *journey) faultScenarios(redisPods func() []corev1.Pod) []faultScenario {
	c, f := j.c, j.fleet
	ctx := context.Background()
	// The operator's leader election, read by OperatorPodDeleted's inject
	// and repair and judged by its check.
	var oldLease, lease coordinationv1.Lease
	var released bool
	var lastRenew *metav1.MicroTime
	var oldLog *followedLog // the deleted leader's log, to its end
	return []faultScenario{{
		// The deleted master's replica takes its slots over while the
		// pod's preStop sleep keeps it serving (rediscluster's hand-over).
		name: "RedisPodDeleted", title: "Redis pod deleted", redis: true, maxFailedShare: 0.01,
		inject: func(t *testing.T, start time.Time) func(*testing.T) string {
			name := resources.RedisShardName(betaOf(f), 1) + "-0"
			old, err := c.cs.CoreV1().Pods(f.Namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			c.kubectl(t, "delete", "pod", "-n", f.Namespace, name, "--wait=false")
			return func(t *testing.T) string {
				var newIP string
				waitFor(t, "the replaced Redis pod ready", 3*time.Minute, func() (bool, string) {
					p, err := c.cs.CoreV1().Pods(f.Namespace).Get(ctx, name, metav1.GetOptions{})
					if err != nil {
						return false, err.Error()
					}
					newIP = p.Status.PodIP
					return p.UID != old.UID && isReady(p), podState(p)
				})
				return fmt.Sprintf("pod %s (IP %s -> %s) ready %s after", name, old.Status.PodIP, newIP, since(start))
			}
		},
	}, {
		name: "LimiterRolloutRestart", title: "limiter rollout restart", clean: true,
		inject: func(t *testing.T, start time.Time) func(*testing.T) string {
			dep := "deployment/" + resources.LimiterName(betaOf(f))
			c.kubectl(t, "rollout", "restart", "-n", f.Namespace, dep)
			return func(t *testing.T) string {
				c.kubectl(t, "rollout", "status", "-n", f.Namespace, dep, "--timeout=5m")
				return fmt.Sprintf("%s rolled out %s after", dep, since(start))
			}
		},
		// The target is zero failed decisions. A connection refused or
		// reset (an RPC error) never passes; a busy machine's missed 20ms
		// Redis deadlines do, up to busyTolerance.
		check: func(t *testing.T) {
			t.Logf("the new limiter pods' failed decisions and Redis errors:\n%s", j.limiterFailures(t))
		},
	}, {
		name: "OperatorPodDeleted", title: "operator pod deleted", clean: true, steady: true,
		inject: func(t *testing.T, start time.Time) func(*testing.T) string {
			if err := c.c.Get(ctx, client.ObjectKey{Namespace: system, Name: leaseName}, &oldLease); err != nil {
				t.Fatal(err)
			}
			oldHolder := ptr.Deref(oldLease.Spec.HolderIdentity, "")
			lastRenew = oldLease.Spec.RenewTime
			// The holder is the pod's hostname_uuid.
			oldLog = c.followLog(t, system, strings.SplitN(oldHolder, "_", 2)[0])
			c.kubectl(t, "delete", "pod", "-n", system, "-l", "app.kubernetes.io/component=operator", "--wait=false")
			return func(t *testing.T) string {
				// The Lease as it changes: released (no holder) once the
				// old operator stopped, then taken by the new one.
				waitFor(t, "a new operator pod leading", 2*time.Minute, func() (bool, string) {
					if err := c.c.Get(ctx, client.ObjectKey{Namespace: system, Name: leaseName}, &lease); err != nil {
						return false, err.Error()
					}
					h := ptr.Deref(lease.Spec.HolderIdentity, "")
					switch {
					case h == "":
						released = true
					case h == oldHolder && lease.Spec.RenewTime != nil:
						lastRenew = lease.Spec.RenewTime
					}
					return h != "" && h != oldHolder, "holder " + h
				})
				leading := since(start)
				// The new operator at work: its collector wrote the load's
				// counts twice, so conditions it recomputed were watched.
				j.waitCollected(t, "e2e-load", time.Now(), 2)
				return fmt.Sprintf("a new operator leads %s after (the Lease seen released: %v), and collected twice %s after", leading, released, since(start))
			}
		},
		// A lease that is not released can only be taken once it expires:
		// leaseDurationSeconds after the old leader's last renewal.
		check: func(t *testing.T) {
			if !released && lastRenew != nil && oldLease.Spec.LeaseDurationSeconds != nil && lease.Spec.AcquireTime != nil {
				expiry := lastRenew.Add(time.Duration(*oldLease.Spec.LeaseDurationSeconds) * time.Second)
				if !lease.Spec.AcquireTime.Time.Before(expiry) {
					j.errorf(t, "the deleted operator did not release its leader lease: never seen without a holder, and the new leader acquired it at %s, when it expired (last renewed %s, %ds) "+
						"(issue 15: leader lease release on shutdown); the deleted operator's log ends:\n%s", lease.Spec.AcquireTime.Format("15:04:05.000"),
						lastRenew.Format("15:04:05.000"), *oldLease.Spec.LeaseDurationSeconds, oldLog.tail(30))
				}
			}
		},
	}, {
		name: "RedisContainersKilled", title: "every Redis container killed", redis: true,
		inject: func(t *testing.T, start time.Time) func(*testing.T) string {
			restarts := map[string]int32{}
			var ids, socks []string
			for _, p := range redisPods() {
				for _, cs := range p.Status.ContainerStatuses {
					restarts[p.Name] = cs.RestartCount
					ids = append(ids, strings.TrimPrefix(cs.ContainerID, "containerd://"))
					socks = append(socks, j.c.containerd(t, p.Spec.NodeName))
				}
			}
			var wg sync.WaitGroup
			errs := make([]error, len(ids))
			for i, id := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if out, err := exec.Command("ctr", "--address", socks[i], "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id).CombinedOutput(); err != nil {
						errs[i] = fmt.Errorf("ctr --address %s tasks kill %s: %v: %s", socks[i], id, err, out)
					}
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			return func(t *testing.T) string {
				waitFor(t, "every Redis container restarted and ready", 3*time.Minute, func() (bool, string) {
					var waiting []string
					for _, p := range redisPods() {
						if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].RestartCount <= restarts[p.Name] || !isReady(&p) {
							waiting = append(waiting, p.Name+": "+podState(&p))
						}
					}
					return len(waiting) == 0, strings.Join(waiting, "; ")
				})
				return fmt.Sprintf("%d containers restarted and ready %s after", len(ids), since(start))
			}
		},
	}, j.nodeStopped(redisPods), {
		// A node drained of the fleet's pods (kubectl drain with the
		// fleet's pods selected: the client pod and the cluster's own pods
		// stay), then uncordoned. Each Redis master there hands its slots
		// to its replica on the other node, the limiter pods move one at a
		// time (their PodDisruptionBudget); the Redis pods, bound to the
		// node by their local volumes, wait Pending for the uncordon.
		name: "NodeDrained", title: "node drained", redis: true, maxFailedShare: 0.01, twoNodes: true,
		inject: func(t *testing.T, start time.Time) func(*testing.T) string {
			node := j.otherNode(t)
			primaries := j.redisPrimariesOn(t, node, redisPods)
			c.kubectl(t, "drain", node, "--pod-selector", resources.LabelInstance+"="+f.Name,
				"--ignore-daemonsets", "--delete-emptydir-data", "--timeout=5m")
			drained := since(start)
			return func(t *testing.T) string {
				c.kubectl(t, "uncordon", node)
				want := int(f.Spec.EffectiveShards()) * (1 + int(f.Spec.EffectiveReplicasPerShard()))
				waitFor(t, "every Redis pod back and ready after the uncordon", 5*time.Minute, func() (bool, string) {
					var waiting []string
					pods := redisPods()
					for _, p := range pods {
						if !isReady(&p) || p.DeletionTimestamp != nil {
							waiting = append(waiting, p.Name+": "+podState(&p))
						}
					}
					return len(pods) == want && len(waiting) == 0, fmt.Sprintf("%d of %d pods; %s", len(pods), want, strings.Join(waiting, "; "))
				})
				c.kubectl(t, "rollout", "status", "-n", f.Namespace, "deployment/"+resources.LimiterName(betaOf(f)), "--timeout=5m")
				return fmt.Sprintf("node %s (Redis masters %v) drained of the fleet's pods %s after, uncordoned, and every pod back and ready %s after",
					node, primaries, drained, since(start))
			}
		},
	}}
}

// otherNode is a node the client pod, which makes the load, does not run
// on.
func (j *journey) otherNode(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	client, err := j.c.cs.CoreV1().Pods(appNS).Get(ctx, clientPod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := j.c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Name != client.Spec.NodeName {
			return n.Name
		}
	}
	t.Fatalf("no node besides the client pod's %s", client.Spec.NodeName)
	return ""
}

// redisPrimariesOn lists the fleet's Redis masters (status.redis, serving
// slots) whose pods run on node, sorted.
func (j *journey) redisPrimariesOn(t *testing.T, node string, redisPods func() []corev1.Pod) []string {
	t.Helper()
	out := []string{}
	for _, pod := range j.redisMastersOn(t, node, redisPods) {
		out = append(out, pod)
	}
	slices.Sort(out)
	return out
}

// runFault runs one fault scenario under load (see faultScenario).
func (j *journey) runFault(t *testing.T, sc faultScenario, svc, keep string, loadArgs []string) {
	if sc.redis {
		j.dumpOnFailure(t)
	}
	if sc.balanced {
		f := j.fleet
		headless := fmt.Sprintf("dns:///%s.%s.svc:8081", resources.LimiterHeadlessName(betaOf(f)), f.Namespace)
		loadArgs = append(slices.Clone(loadArgs), "-addr", headless) // the last -addr wins
	}
	prepared := ""
	if sc.prepare != nil {
		prepared = sc.prepare(t) + "; "
	}
	var local *load
	if sc.localToo {
		local = j.c.startLoad(t, appNS, clientPod, append(slices.Clone(loadArgs), "-descriptor", "local=%d")...)
	}
	l := j.c.startLoad(t, appNS, clientPod, loadArgs...)
	n := l.measureNoise(t, 5*time.Second)
	w := j.watch(t)
	start := time.Now()
	repaired := sc.inject(t, start)
	note := repaired(t)
	if sc.redis {
		j.waitRedisReadyAfter(t, w, start)
		note += ", " + w.readyNote(fleetCond(v1beta1.RedisReadyCondition), start)
	}
	l.waitQuiet(t, n, start, 5*time.Second, 3*time.Minute)
	if sc.maxFailedShare > 0 || sc.reportShare {
		// The measure is the minute around the fault: the noise's
		// 5s before it and, under the same load, 55s from it.
		if d := time.Until(start.Add(55 * time.Second)); d > 0 {
			time.Sleep(d) // the load runs on meanwhile
		}
	}
	rep := l.report(n, start)
	if sc.reportShare {
		// Where the failures fell, second by second: the chain
		// names where the time goes.
		note += "; failing seconds from the fault's start: " + l.failingSeconds(start)
	}
	l.stop()
	note = prepared + note
	t.Logf("%s: %s; %s", sc.title, note, rep)
	j.mark("fault %s: %s; %s", sc.title, rep, note)
	if local != nil {
		j.markLocalShare(t, sc, local, start)
	}
	if sc.redis {
		t.Logf("RedisReady: %s", w.timeline(fleetCond(v1beta1.RedisReadyCondition), start))
		if !sc.restartsLimiters {
			j.checkNoFailureWhileRedisReady(t, w, l, n, start)
		}
		j.checkKeysKept(t, svc, keep)
		j.checkNoDataLoss(t, w)
	}
	if sc.steady {
		flaps := w.changes()
		if rep.clean() {
			// A policy's Degraded tells its store failures, which clean()
			// judged (the busy machine's missed deadlines): not the fault's.
			flaps = slices.DeleteFunc(flaps, func(f string) bool { return strings.Contains(f, " "+v1beta1.DegradedCondition+": ") })
		}
		if len(flaps) > 0 {
			j.errorf(t, "conditions changed (%s):\n  %s", sc.title, strings.Join(flaps, "\n  "))
		}
	}
	if sc.maxFailedShare > 0 || sc.reportShare {
		failed, answered := rep.Failed+n.Failed, rep.Answered+n.Answered // Failed counts the RPC errors too
		share := float64(failed) / float64(max(answered, 1))
		goal := ""
		if sc.reportShare {
			goal = fmt.Sprintf(" (measured, not judged; issue 29's goal is under 1%%: %s)", map[bool]string{true: "met", false: "missed"}[share < 0.01])
		}
		j.mark("fault %s: %.2f%% of the minute around it failed (%d of %d, the 5s before included)%s", sc.title, 100*share, failed, answered, goal)
		if sc.maxFailedShare > 0 && share > sc.maxFailedShare {
			j.errorf(t, "%s: %d of the %d decisions of the minute around it failed (RPC errors included), over %.1f%% (%s)",
				sc.title, failed, answered, 100*sc.maxFailedShare, rep)
		}
	}
	if sc.clean && !rep.clean() {
		j.errorf(t, "decisions failed (%s): %s", sc.title, rep)
	}
	if sc.check != nil {
		sc.check(t)
	}
}

// localShareReason is the reason of a denial by a limiter's local share
// (limiter/service.ReasonLocal): a decision enforced, not failed.
const localShareReason = "store unavailable (failureMode Local)"

// markLocalShare tells the share of the minute around the fault (5s
// before it to 55s after) that failed under failureMode Local: RPC errors,
// and answers with a reason other than the local share's.
func (j *journey) markLocalShare(t *testing.T, sc faultScenario, l *load, start time.Time) {
	var answered, failed, rpcErr int64
	for _, s := range l.seconds(start.Add(-5*time.Second), start.Add(55*time.Second)) {
		answered, failed, rpcErr = answered+s.answered, failed+s.failed, rpcErr+s.rpcErr
	}
	errs := map[string]int64{}
	for _, iv := range l.intervals() {
		if e := iv.end(); !e.Before(start.Add(-5*time.Second)) && e.Before(start.Add(55*time.Second)) {
			for k, v := range iv.Errors {
				errs[k] += v
			}
		}
	}
	l.stop()
	byShare := errs[localShareReason]
	delete(errs, localShareReason)
	share := float64(failed-byShare) / float64(max(answered, 1))
	t.Logf("%s under failureMode Local: %d of %d failed, %d of them RPC errors, %d denied by a limiter's local share; failures: %v", sc.title, failed-byShare, answered, rpcErr, byShare, errs)
	j.mark("fault %s, the same minute under failureMode Local: %.2f%% failed (%d of %d, %d RPC errors; %d denied by a local share; issue 29's goal is under 1%%: %s) %v",
		sc.title, 100*share, failed-byShare, answered, rpcErr, byShare, map[bool]string{true: "met", false: "missed"}[share < 0.01], errs)
}

// waitCollected waits until the operator's collector has written policy
// name's counts (status.enforcement.updatedAt) passes times after after:
// under steady load every pass that may write does.
func (j *journey) waitCollected(t *testing.T, name string, after time.Time, passes int) {
	t.Helper()
	seen := map[time.Time]bool{}
	waitFor(t, fmt.Sprintf("%d writes of policy %s's counts after %s", passes, name, after.Format("15:04:05")), 2*time.Minute, func() (bool, string) {
		e := j.c.policy(t, appNS, name).Status.Enforcement
		if e == nil || e.UpdatedAt == nil {
			return false, "no status.enforcement.updatedAt"
		}
		if e.UpdatedAt.After(after) {
			seen[e.UpdatedAt.Time] = true
		}
		return len(seen) >= passes, fmt.Sprintf("%d written, the last at %s", len(seen), e.UpdatedAt.Format("15:04:05"))
	})
}

// checkNoDataLoss fails the test if the fleet reported a Redis data loss
// during the fault, or reports one now: every node kept its volume.
func (j *journey) checkNoDataLoss(t *testing.T, w *watcher) {
	t.Helper()
	key := fleetCond(v1beta1.RedisDataLossCondition)
	if w.ever(key, "True") {
		t.Errorf("the fleet reported a Redis data loss though every node kept its volume: %s", w.timeline(key, time.Now()))
	}
	if dl := j.c.fleet(t, j.fleet.Namespace, j.fleet.Name).Status.Redis.DataLoss; dl != "" {
		t.Errorf("status.redis.dataLoss: %s", dl)
	}
}

// dumpOnFailure logs, if t fails, the Redis Cluster fleet's status and the
// last lines of the operator's and the Redis pods' logs: a replaced pod's
// log goes with it, so the post-mortem is taken now.
func (j *journey) dumpOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		f := j.fleet
		out, _, err := j.c.cmd("", j.c.kubectlBin, "get", "limiterfleet", "-n", f.Namespace, f.Name, "-o", "jsonpath={.status}")
		t.Logf("post-mortem: fleet status (%v):\n%s", err, out)
		out, _, err = j.c.cmd("", j.c.kubectlBin, "get", "events", "-n", f.Namespace, "--field-selector", "involvedObject.name="+f.Name, "--sort-by=.lastTimestamp")
		t.Logf("post-mortem: fleet events (%v):\n%s", err, out)
		out, _, err = j.c.cmd("", j.c.kubectlBin, "logs", "-n", system, "-l", "app.kubernetes.io/component=operator", "--tail=400")
		t.Logf("post-mortem: operator log (%v):\n%s", err, out)
		sel := []string{}
		for k, v := range resources.RedisSelectorLabels(betaOf(f)) {
			sel = append(sel, k+"="+v)
		}
		out, _, err = j.c.cmd("", j.c.kubectlBin, "logs", "-n", f.Namespace, "-l", strings.Join(sel, ","), "--prefix", "--tail=60")
		t.Logf("post-mortem: Redis logs (%v):\n%s", err, out)
	})
}

// allowDomain lets the fleet serve domain to the policies of ns, as its
// platform team would: the fleet's spec.domains, which tenants can't write.
func (j *journey) allowDomain(t *testing.T, domain, ns string) {
	t.Helper()
	j.allowDomainTo(t, domain, ns)
}

// limiterFailures lists, for each limiter pod of the Redis Cluster fleet,
// its failed decisions, store errors by cause and Redis errors from its
// /metrics, read from the client pod on the limiters' admin port with the
// client pod's ServiceAccount token (see allowMetrics).
func (j *journey) limiterFailures(t *testing.T) string {
	t.Helper()
	if err := j.c.allowMetrics(appNS); err != nil {
		return err.Error()
	}
	pods := &corev1.PodList{}
	if err := j.c.c.List(context.Background(), pods, client.InNamespace(j.fleet.Namespace), client.MatchingLabels(resources.LimiterSelectorLabels(betaOf(j.fleet)))); err != nil {
		return err.Error()
	}
	// The admin plane is HTTPS, from the fleet's own CA, for the Service's
	// name.
	adminTLS := &corev1.Secret{}
	if err := j.c.c.Get(context.Background(), client.ObjectKey{Namespace: j.fleet.Namespace, Name: resources.AdminTLSSecretName(betaOf(j.fleet))}, adminTLS); err != nil {
		return err.Error()
	}
	var out []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue // an old pod, draining or gone: its metrics may not answer
		}
		var answers []struct {
			Status int
			Body   string
		}
		// Told, never judged: a read that fails says so in the output.
		if err := j.c.tryExecJSON(&answers, appNS, clientPod, "/e2eclient", "http", "-bearer-file", serviceAccountToken,
			"-ca-pem", string(adminTLS.Data["ca.crt"]), "-server-name", resources.AdminTLSServerName(betaOf(j.fleet)),
			"-url", fmt.Sprintf("https://%s:%d/metrics", p.Status.PodIP, limiterwire.AdminPort)); err != nil {
			out = append(out, fmt.Sprintf("  %s: its metrics not read: %v", p.Name, err))
			continue
		}
		var lines []string
		for _, a := range answers {
			for _, l := range strings.Split(a.Body, "\n") {
				if strings.HasPrefix(l, "sluice_redis_errors_total") || (strings.HasPrefix(l, "sluice_decisions_total") && strings.Contains(l, `result="failed`)) ||
					(strings.HasPrefix(l, "sluice_store_errors_total") && !strings.HasSuffix(l, " 0")) {
					lines = append(lines, l)
				}
			}
		}
		out = append(out, fmt.Sprintf("  %s (started %s): %s", p.Name, p.CreationTimestamp.Format("15:04:05"), strings.Join(lines, "; ")))
	}
	return strings.Join(out, "\n")
}

// serviceAccountToken is where the kubelet mounts a pod's token.
const serviceAccountToken = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// allowMetrics lets the default ServiceAccount of ns, the client pod's,
// read the limiters' /metrics: the limiters ask the API server
// (SubjectAccessReview on the non-resource URL), as they do for Prometheus.
func (c *cluster) allowMetrics(ns string) error {
	ctx := context.Background()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-limiter-metrics"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-limiter-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "default"}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := c.c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("letting the client pod read /metrics: %w", err)
		}
	}
	return nil
}

func isReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// checkKeysKept asks for each exhausted counter once more: every one must
// still deny, as the limiters' store decides. An answer a failure mode made
// says nothing either way (and an exhausted counter stays exhausted): those
// keys are asked again, up to 3 times.
func (j *journey) checkKeysKept(t *testing.T, svc, keep string) {
	t.Helper()
	var lost []string
	undecided := map[int]string{}
	for attempt := 1; attempt <= 3 && (attempt == 1 || len(undecided) > 0); attempt++ {
		var answers []rlsAnswer
		j.c.execJSON(t, &answers, appNS, clientPod, "/e2eclient", "rls", "-addr", svc, "-domain", loadDomain,
			"-descriptor", keep, "-keys", fmt.Sprint(keptKeys), "-n", "1")
		for k, a := range answers {
			if _, asked := undecided[k]; attempt > 1 && !asked {
				continue
			}
			delete(undecided, k)
			switch {
			case a.Reason != "" || a.Error != "":
				undecided[k] = a.Code + a.Error + a.Reason
			case a.Code != "OVER_LIMIT":
				lost = append(lost, fmt.Sprintf("key %d: %s", k, a.Code))
			}
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d exhausted counters no longer deny (keys lost?): %v", len(lost), keptKeys, lost)
	}
	if len(undecided) > 0 {
		t.Errorf("%d of %d exhausted counters answered by a failure mode 3 times: %v", len(undecided), keptKeys, undecided)
	}
}

// waitRedisReadyAfter waits until the fleet's RedisReady is True on a
// read made after start plus a second (the operator's pass on the change).
func (j *journey) waitRedisReadyAfter(t *testing.T, w *watcher, start time.Time) {
	t.Helper()
	waitFor(t, "RedisReady True again", 3*time.Minute, func() (bool, string) {
		s, ok := w.current(fleetCond(v1beta1.RedisReadyCondition))
		return ok && s == "True" && time.Since(start) > time.Second, "RedisReady " + s
	})
}

// checkNoFailureWhileRedisReady fails the test for two seconds of load in
// a row that failed beyond the noise after the fleet had said
// RedisReady=True for more than 2s (what a status poll and the load's
// intervals can blur): the condition must not claim Redis is usable while
// the limiters can't use it. A limiter that can't reach a shard fails its
// keys every second until it can; one second alone is a busy machine's
// missed deadlines (10 of 183 once, beside another make test, with the
// fleet saying RedisReady=False for those a few seconds before). A
// RedisReady=True from before the fault is the operator's word before it
// saw the fault: it has detectGrace to see it.
func (j *journey) checkNoFailureWhileRedisReady(t *testing.T, w *watcher, l *load, n noise, start time.Time) {
	t.Helper()
	const detectGrace = 10 * time.Second
	key := fleetCond(v1beta1.RedisReadyCondition)
	var last string // the previous second, when it failed while RedisReady=True
	for _, s := range l.seconds(start, time.Now()) {
		end := s.start.Add(time.Second)
		// The decisions the limiters answered as failed: an RPC error
		// (a limiter pod that is down) says nothing of Redis.
		failing := s.failed-s.rpcErr > n.threshold()
		since := w.trueSince(key, s.start)
		said := fmt.Sprintf("since +%v", since.Sub(start).Round(10*time.Millisecond))
		if !since.IsZero() && since.Before(start) {
			since = start.Add(detectGrace)
			said = fmt.Sprintf("since before the fault, not seen %v after it", detectGrace)
		}
		if !failing || since.IsZero() || end.Sub(since) <= 2*time.Second {
			last = ""
			continue
		}
		this := fmt.Sprintf("%d of %d decisions failed in the second from +%v after the fault", s.failed, s.answered, s.start.Sub(start).Round(10*time.Millisecond))
		if last != "" {
			t.Errorf("%s and %s, while the fleet said RedisReady=True (%s) "+
				"(issue 15: limiters must reach a replaced node once the operator healed the cluster, and RedisReady must not be True while they can't)",
				last, this, said)
			return
		}
		last = this
	}
}

// --- Watching conditions -------------------------------------------------------

// watcher polls the Redis Cluster fleet's and the policies' conditions
// every 200ms and records each change with the time it saw it.
type watcher struct {
	mu    sync.Mutex
	first map[string]string
	last  map[string]string
	log   []change
}

type change struct {
	at       time.Time
	key      string
	from, to string
	reason   string
}

func fleetCond(typ string) string { return "fleet " + typ }

func (j *journey) watch(t *testing.T) *watcher {
	w := &watcher{first: map[string]string{}, last: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f := j.fleet
	poll := func() {
		now := time.Now()
		seen := map[string][2]string{}
		fl := &v1beta1.LimiterFleet{} // the storage version: no webhook needed
		if err := j.c.c.Get(ctx, client.ObjectKeyFromObject(f), fl); err == nil {
			for _, cond := range fl.Status.Conditions {
				seen[fleetCond(cond.Type)] = [2]string{string(cond.Status), cond.Reason + ": " + cond.Message}
			}
		}
		pols := &v1beta1.RateLimitPolicyList{}
		if err := j.c.c.List(ctx, pols); err == nil {
			for _, p := range pols.Items {
				for _, cond := range p.Status.Conditions {
					seen[fmt.Sprintf("policy %s/%s %s", p.Namespace, p.Name, cond.Type)] = [2]string{string(cond.Status), cond.Reason + ": " + cond.Message}
				}
			}
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for k, v := range seen {
			prev, ok := w.last[k]
			if !ok {
				w.first[k] = v[0]
			} else if prev != v[0] {
				w.log = append(w.log, change{at: now, key: k, from: prev, to: v[0], reason: v[1]})
			}
			w.last[k] = v[0]
		}
	}
	poll()
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				poll()
			}
		}
	}()
	return w
}

// ever says whether the condition had the status at any time of the watch.
func (w *watcher) ever(key, status string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first[key] == status {
		return true
	}
	for _, ch := range w.log {
		if ch.key == key && ch.to == status {
			return true
		}
	}
	return false
}

// current is a condition's last status.
func (w *watcher) current(key string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.last[key]
	return s, ok
}

// trueSince is when the condition last turned True at or before at, or
// zero if it was not True then. A condition True from the start of the
// watch counts from the zero time plus one (long before).
func (w *watcher) trueSince(key string, at time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	status, since := w.first[key], time.Unix(0, 0)
	for _, ch := range w.log {
		if ch.key != key || ch.at.After(at) {
			continue
		}
		status, since = ch.to, ch.at
	}
	if status != "True" {
		return time.Time{}
	}
	return since
}

// readyNote says when the condition turned True again after start, or
// that it stayed True.
func (w *watcher) readyNote(key string, start time.Time) string {
	since := w.trueSince(key, time.Now())
	if since.Before(start) {
		return "RedisReady stayed True"
	}
	return fmt.Sprintf("RedisReady True again %v after", since.Sub(start).Round(100*time.Millisecond))
}

// timeline prints a condition's changes, in seconds after start.
func (w *watcher) timeline(key string, start time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := []string{w.first[key] + " at the fault"}
	for _, ch := range w.log {
		if ch.key == key {
			s = append(s, fmt.Sprintf("%s at +%v (%s)", ch.to, ch.at.Sub(start).Round(100*time.Millisecond), ch.reason))
		}
	}
	return strings.Join(s, ", ")
}

// changes lists every change seen.
func (w *watcher) changes() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var s []string
	for _, ch := range w.log {
		s = append(s, fmt.Sprintf("%s %s: %s -> %s (%s)", ch.at.Format("15:04:05.000"), ch.key, ch.from, ch.to, ch.reason))
	}
	return s
}
