package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers"
	"github.com/sluice-dev/sluice/controllers/resources"
	"github.com/sluice-dev/sluice/internal/redistest"
)

// TestSystem drives the whole system: kubectl apply of the samples, real
// limiter processes hot-loading the snapshot, and every behaviour the
// operator issue lists, in order, on one fleet.
func TestSystem(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	for _, ns := range []string{"payments", "identity"} {
		namespace(t, ns)
	}
	kubectl(t, "apply", "-f", "../config/samples/")
	fleet := &v1alpha1.LimiterFleet{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "default"}, fleet); err != nil {
		t.Fatalf("the sample fleet: %v", err)
	}
	t.Cleanup(func() { deleteFleet(t, fleet) }) // it selects every policy: don't leave it to other tests
	pods := fleetPods(t, fleet, 2)

	waitPolicy(t, "payments", "charges-per-user", v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
	charges := func(t *testing.T, p *limiterProc, user string) int {
		return p.check(t, "payments-api", "user_id", user, "path", "/v1/charges")
	}
	expectLimit := func(t *testing.T, user string, n int) {
		t.Helper()
		for _, p := range pods { // mode None: each pod counts for itself
			for i := range n {
				if code := charges(t, p, user); code != http.StatusOK {
					t.Fatalf("%s: request %d for %s answered %d, want 200", p.httpAddr, i+1, user, code)
				}
			}
			if code := charges(t, p, user); code != http.StatusTooManyRequests {
				t.Fatalf("%s: request %d for %s answered %d, want 429", p.httpAddr, n+1, user, code)
			}
		}
	}

	t.Run("kubectl apply of the samples is enforced by every limiter", func(t *testing.T) {
		expectLimit(t, "kim", 5)
		f := &v1alpha1.LimiterFleet{}
		eventually(t, 30*time.Second, "fleet synced", func() error {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(fleet), f); err != nil {
				return err
			}
			c := condition(f.Status.Conditions, v1beta1.SnapshotSyncedCondition)
			if c == nil || c.Status != metav1.ConditionTrue || f.Status.Limiters == nil || f.Status.Limiters.Synced != 2 {
				return fmt.Errorf("status %+v", f.Status)
			}
			return nil
		})
		if v := pods[0].loaded(t); v != f.Status.Snapshot.Version {
			t.Fatalf("pod loaded %s, fleet status says %s", v, f.Status.Snapshot.Version)
		}
		out := kubectl(t, "get", "rlp", "-A")
		for _, want := range []string{"charges-per-user", "payments-api", "TokenBucket", "True"} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl get rlp -A lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("an edit to limit.rate.limit is enforced without a restart", func(t *testing.T) {
		samples, _ := controllers.ApplyToEnforcedSamples(t)
		kubectl(t, "-n", "payments", "patch", "rlp", "charges-per-user", "--type=merge", "-p", `{"spec":{"limit":{"rate":{"limit":2,"burst":2}}}}`)
		p := waitPolicy(t, "payments", "charges-per-user", v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
		eventually(t, 10*time.Second, "apply-to-enforced latency observed", func() error {
			if c := condition(p.Status.Conditions, v1beta1.EnforcedCondition); c.ObservedGeneration != p.Generation {
				p = waitPolicy(t, "payments", "charges-per-user", v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
			}
			if n, _ := controllers.ApplyToEnforcedSamples(t); n <= samples {
				return fmt.Errorf("sluice_operator_apply_to_enforced_seconds has %d samples, had %d before the edit", n, samples)
			}
			return nil
		})
		expectLimit(t, "lee", 2)
	})

	t.Run("a conflicting policy is rejected and the others keep working", func(t *testing.T) {
		// Creation timestamps have one-second resolution and a tie goes by
		// name, which would make the duplicate the older one: create it in a
		// later second.
		orig := &v1alpha1.RateLimitPolicy{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: "payments", Name: "charges-per-user"}, orig); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(orig.CreationTimestamp.Add(1100 * time.Millisecond)))
		dup := &v1alpha1.RateLimitPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "charges-duplicate"},
			Spec: v1alpha1.RateLimitPolicySpec{
				Domain: "payments-api",
				Descriptors: []v1alpha1.Descriptor{
					{Key: "path", Value: ptr.To("/v1/charges")}, {Key: "user_id"}, // same set, other order
				},
				Rate: v1alpha1.Rate{Limit: 1000, Period: metav1.Duration{Duration: time.Minute}},
			},
		}
		if err := k8s.Create(ctx, dup); err != nil {
			t.Fatal(err)
		}
		p := waitPolicy(t, "payments", "charges-duplicate", v1beta1.AcceptedCondition, metav1.ConditionFalse, v1beta1.ConflictReason)
		if msg := condition(p.Status.Conditions, v1beta1.AcceptedCondition).Message; !strings.Contains(msg, "payments/charges-per-user") {
			t.Fatalf("the conflict does not name the other policy: %q", msg)
		}
		waitPolicy(t, "payments", "charges-duplicate", v1beta1.EnforcedCondition, metav1.ConditionFalse, v1beta1.NotAcceptedReason)
		waitPolicy(t, "payments", "charges-per-user", v1beta1.AcceptedCondition, metav1.ConditionTrue, "")
		expectLimit(t, "max", 2) // still 2, not the duplicate's 1000
		if err := k8s.Delete(ctx, dup); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("stopping a limiter turns Enforced false for generations it lacks", func(t *testing.T) {
		pods[1].stop()
		kubectl(t, "-n", "payments", "patch", "rlp", "requests-per-api-key", "--type=merge", "-p", `{"spec":{"limit":{"rate":{"limit":9}}}}`)
		eventually(t, 30*time.Second, "Enforced false with 1/2 pods synced", func() error {
			c, p := policyCondition(t, "payments", "requests-per-api-key", v1beta1.EnforcedCondition)
			if c == nil || c.ObservedGeneration != p.Generation || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "1/2 pods") {
				return fmt.Errorf("Enforced %+v", c)
			}
			return nil
		})
		// charges-per-user's generation did not change: the stopped pod has it.
		waitPolicy(t, "payments", "charges-per-user", v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
		pods[1].start(t)
		waitPolicy(t, "payments", "requests-per-api-key", v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
	})

	t.Run("enforcement Disabled allows everything and still counts", func(t *testing.T) {
		kubectl(t, "patch", "limiterfleet", "default", "--type=merge", "-p", `{"spec":{"enforcement":"Disabled"}}`)
		t.Cleanup(func() {
			kubectl(t, "patch", "limiterfleet", "default", "--type=merge", "-p", `{"spec":{"enforcement":"Enabled"}}`)
		})
		waitPolicy(t, "payments", "charges-per-user", v1beta1.EnforcedCondition, metav1.ConditionFalse, v1beta1.EnforcementDisabledReason)
		for _, p := range pods {
			before := p.metric(t, "sluice_decisions_total", "policy", "payments/charges-per-user", "result", "shadow_limited")
			for i := range 4 {
				if code := charges(t, p, "noa"); code != http.StatusOK {
					t.Fatalf("%s: request %d answered %d with enforcement disabled", p.httpAddr, i+1, code)
				}
			}
			if after := p.metric(t, "sluice_decisions_total", "policy", "payments/charges-per-user", "result", "shadow_limited"); after-before != 2 {
				t.Fatalf("%s: shadow_limited grew by %v, want the 2 would-be denials", p.httpAddr, after-before)
			}
		}
	})

	t.Run("enforcement Enabled again enforces", func(t *testing.T) {
		waitPolicy(t, "payments", "charges-per-user", v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
		expectLimit(t, "oli", 2)
	})

	t.Run("a ConfigMap edited by hand is put back", func(t *testing.T) {
		cm := &corev1.ConfigMap{}
		key := client.ObjectKey{Namespace: fleet.Namespace, Name: resources.SnapshotConfigMapName(betaOf(fleet))}
		if err := k8s.Get(ctx, key, cm); err != nil {
			t.Fatal(err)
		}
		want := cm.Data["version"]
		cm.Data["version"] = "handmade"
		cm.Data["extra"] = "x"
		if err := k8s.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "the ConfigMap restored", func() error {
			if err := k8s.Get(ctx, key, cm); err != nil {
				return err
			}
			if cm.Data["version"] != want || cm.Data["extra"] != "" {
				return fmt.Errorf("data %v", cm.Data)
			}
			return nil
		})
	})

	t.Run("restarting the operator writes nothing", func(t *testing.T) {
		// Settle first: every policy enforced at its generation on both pods.
		eventually(t, 30*time.Second, "every policy settled", func() error {
			var pols v1alpha1.RateLimitPolicyList
			if err := k8s.List(ctx, &pols); err != nil {
				return err
			}
			for _, p := range pols.Items {
				if !slices.Contains([]string{"payments", "identity", "default"}, p.Namespace) {
					continue // another test's, which the sample fleet does not serve (its spec.domains)
				}
				c := condition(p.Status.Conditions, v1beta1.EnforcedCondition)
				if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != p.Generation ||
					len(p.Status.Fleets) != 1 || *p.Status.Fleets[0].PodsSynced != 2 || *p.Status.Fleets[0].PodsReady != 2 {
					return fmt.Errorf("%s/%s: %+v", p.Namespace, p.Name, p.Status)
				}
			}
			return fleetSynced(ctx, fleet, 2)
		})
		// And the collector's status.enforcement: nothing written for
		// longer than its write interval.
		before := resourceVersions(t)
		eventually(t, 30*time.Second, "statuses settled", func() error {
			time.Sleep(time.Second) // the suite's collector writes each policy at most every 500ms
			if after := resourceVersions(t); after != before {
				before = after
				return fmt.Errorf("still writing")
			}
			return nil
		})
		stopOperator()
		if err := startOperator(); err != nil {
			t.Fatal(err)
		}
		// A negative check needs a window: the new operator re-reads every
		// object and every pod within it.
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if after := resourceVersions(t); after != before {
				t.Fatalf("the restarted operator wrote:\nbefore %s\nafter  %s", before, after)
			}
			time.Sleep(100 * time.Millisecond) // sampling resourceVersions over the window
		}
	})

	t.Run("deleting a policy stops its enforcement", func(t *testing.T) {
		kubectl(t, "-n", "payments", "delete", "rlp", "charges-per-user")
		eventually(t, 30*time.Second, "charges-per-user gone from every limiter", func() error {
			user := fmt.Sprintf("pia-%d", time.Now().UnixNano()) // fresh: its limit was 2
			for _, p := range pods {
				for i := range 3 {
					if code := charges(t, p, user); code != http.StatusOK {
						return fmt.Errorf("%s: request %d answered %d", p.httpAddr, i+1, code)
					}
				}
			}
			return nil
		})
	})
}

// deleteFleet removes a fleet and its EndpointSlice, so that later tests
// don't count its (stopped) pods.
func deleteFleet(t testing.TB, f *v1alpha1.LimiterFleet) {
	ctx := context.Background()
	_ = k8s.DeleteAllOf(ctx, &discoveryv1.EndpointSlice{}, client.InNamespace(f.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: resources.LimiterName(betaOf(f))})
	if err := k8s.Delete(ctx, f); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting fleet %s/%s: %v", f.Namespace, f.Name, err)
	}
	collectGarbage(t, f.Namespace)
}

func fleetSynced(ctx context.Context, fleet *v1alpha1.LimiterFleet, pods int32) error {
	f := &v1alpha1.LimiterFleet{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(fleet), f); err != nil {
		return err
	}
	c := condition(f.Status.Conditions, v1beta1.SnapshotSyncedCondition)
	if c == nil || c.Status != metav1.ConditionTrue || f.Status.Limiters == nil || f.Status.Limiters.Synced != pods {
		return fmt.Errorf("fleet status %+v", f.Status)
	}
	return nil
}

// resourceVersions lists every object the operator writes in the sample
// namespaces, with its resourceVersion.
func resourceVersions(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	var pols v1alpha1.RateLimitPolicyList
	var fleets v1alpha1.LimiterFleetList
	var cms corev1.ConfigMapList
	for _, err := range []error{k8s.List(ctx, &pols), k8s.List(ctx, &fleets), k8s.List(ctx, &cms, client.InNamespace("default"))} {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pols.Items {
		fmt.Fprintf(&b, "rlp %s/%s=%s ", p.Namespace, p.Name, p.ResourceVersion)
	}
	for _, f := range fleets.Items {
		fmt.Fprintf(&b, "fleet %s/%s=%s ", f.Namespace, f.Name, f.ResourceVersion)
	}
	for _, c := range cms.Items {
		fmt.Fprintf(&b, "cm %s=%s ", c.Name, c.ResourceVersion)
	}
	return b.String()
}

// A selector that matches nothing gives an empty snapshot, not an error,
// and its limiters answer every request OK.
func TestFleetSelectingNothing(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	fleet, pods := newFleet(t, "empty", "nothing-selected", 1)
	eventually(t, 30*time.Second, "empty snapshot loaded", func() error {
		f := &v1alpha1.LimiterFleet{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(fleet), f); err != nil {
			return err
		}
		ready := condition(f.Status.Conditions, v1beta1.ReadyCondition)
		if f.Status.Snapshot == nil || f.Status.Snapshot.Policies != 0 || ready == nil || ready.Status != metav1.ConditionTrue {
			return fmt.Errorf("status %+v", f.Status)
		}
		if pods[0].loaded(t) != f.Status.Snapshot.Version {
			return fmt.Errorf("pod has %q, fleet wrote %q", pods[0].loaded(t), f.Status.Snapshot.Version)
		}
		return nil
	})
	if code := pods[0].check(t, "payments-api", "user_id", "u", "path", "/v1/charges"); code != http.StatusOK {
		t.Fatalf("an empty snapshot answered %d", code)
	}
}

// The fleet's rendered children carry the snapshot reference and owner
// references, and Redis Cluster mode says plainly it is not built yet.
func TestFleetRendersLimiters(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	namespace(t, "render")
	f := &v1alpha1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: "render", Name: "edge"},
		Spec: v1alpha1.LimiterFleetSpec{Replicas: ptr.To(int32(3)), Redis: v1alpha1.RedisSpec{
			Mode: ptr.To(v1alpha1.RedisExternal), Addresses: []string{"redis-0.redis:6379", "redis-1.redis:6379"}, Cluster: ptr.To(true)}}}
	if err := k8s.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteFleet(t, f) })
	var dep appsv1.Deployment
	eventually(t, 30*time.Second, "the limiter Deployment", func() error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: "render", Name: resources.LimiterName(betaOf(f))}, &dep)
	})
	args := strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " ")
	for _, want := range []string{"--snapshot-configmap=render/" + resources.SnapshotConfigMapName(betaOf(f)), "--store=redis-cluster://redis-0.redis:6379,redis-1.redis:6379"} {
		if !strings.Contains(args, want) {
			t.Errorf("limiter args %q lack %q", args, want)
		}
	}
	if *dep.Spec.Replicas != 3 || len(dep.OwnerReferences) != 1 || dep.OwnerReferences[0].Name != "edge" {
		t.Errorf("deployment replicas %d owners %+v", *dep.Spec.Replicas, dep.OwnerReferences)
	}
	// Zero-loss rolling: the grace period covers the limiter's drain.
	if grace := dep.Spec.Template.Spec.TerminationGracePeriodSeconds; grace == nil || *grace < int64((resources.LimiterDrainDelay+10*time.Second).Seconds()) ||
		!strings.Contains(args, "--drain-delay="+resources.LimiterDrainDelay.String()) {
		t.Errorf("terminationGracePeriodSeconds %v, args %q: want a grace period past --drain-delay=%v and the 10s shutdown", grace, args, resources.LimiterDrainDelay)
	}
	for _, obj := range []client.Object{&corev1.Service{}, &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &corev1.ConfigMap{}, &policyv1.PodDisruptionBudget{}} {
		name := resources.LimiterName(betaOf(f))
		if _, ok := obj.(*corev1.ConfigMap); ok {
			name = resources.SnapshotConfigMapName(betaOf(f))
		}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: "render", Name: name}, obj); err != nil {
			t.Errorf("%T %s: %v", obj, name, err)
		} else if refs := obj.GetOwnerReferences(); len(refs) != 1 || refs[0].Name != "edge" || refs[0].Controller == nil || !*refs[0].Controller {
			t.Errorf("%T %s owners %+v", obj, name, refs)
		}
	}
	// The limiter pods' PodDisruptionBudget: one eviction at a time.
	pdb := &policyv1.PodDisruptionBudget{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: "render", Name: resources.LimiterName(betaOf(f))}, pdb); err == nil &&
		(pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.Selector == nil ||
			pdb.Spec.Selector.MatchLabels[resources.LabelInstance] != "edge") {
		t.Errorf("limiter PodDisruptionBudget %+v: want maxUnavailable 1 over the fleet's limiter pods", pdb.Spec)
	}
	// The headless Service, for gateways that balance each call over the
	// pods themselves (kube-proxy balances connections).
	headless := &corev1.Service{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: "render", Name: resources.LimiterHeadlessName(betaOf(f))}, headless); err != nil {
		t.Errorf("headless Service: %v", err)
	} else if headless.Spec.ClusterIP != corev1.ClusterIPNone || headless.Spec.Selector[resources.LabelInstance] != "edge" || len(headless.Spec.Ports) != 2 ||
		len(headless.OwnerReferences) != 1 || headless.OwnerReferences[0].Name != "edge" {
		t.Errorf("headless Service %s: clusterIP %q, selector %v, ports %v, owners %v: want clusterIP None over the fleet's limiter pods, owned by the fleet",
			headless.Name, headless.Spec.ClusterIP, headless.Spec.Selector, headless.Spec.Ports, headless.OwnerReferences)
	}

	// The fleet's limiters may review their admin plane's callers.
	eventually(t, 30*time.Second, "the fleet's limiters in the auth delegator binding", func() error {
		var crb rbacv1.ClusterRoleBinding
		if err := k8s.Get(ctx, client.ObjectKey{Name: resources.LimiterAuthDelegatorBinding}, &crb); err != nil {
			return err
		}
		if !slices.Contains(crb.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Namespace: "render", Name: resources.LimiterName(betaOf(f))}) ||
			crb.RoleRef.Name != "system:auth-delegator" {
			return fmt.Errorf("binding %+v lacks the fleet's ServiceAccount", crb)
		}
		return nil
	})

	// Cluster mode with no Redis pod running yet: RedisReady says so.
	f = updateFleet(t, client.ObjectKeyFromObject(f), func(f *v1alpha1.LimiterFleet) {
		f.Spec.Redis = v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisCluster)}
	})
	eventually(t, 30*time.Second, "RedisReady false for Cluster", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(f), f); err != nil {
			return err
		}
		c := condition(f.Status.Conditions, v1beta1.RedisReadyCondition)
		if c == nil || c.Status != metav1.ConditionFalse || c.ObservedGeneration != f.Generation {
			return fmt.Errorf("RedisReady %+v", c)
		}
		return nil
	})
}

// When Redis stops answering, the policy's Degraded condition says which
// pods answer by the failure mode, and clears once Redis is back. The
// fleet also tells its pods how many share the limits (failureMode Local).
func TestDegradedWhenRedisIsDown(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	srv := redistest.Start(t)
	namespace(t, "degraded")
	fleet := &v1alpha1.LimiterFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "degraded", Name: "redis"},
		Spec: v1alpha1.LimiterFleetSpec{
			Replicas:       ptr.To(int32(2)),
			PolicySelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "redis"}},
			Redis:          v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisExternal), Addresses: []string{srv.Addr}},
		},
	}
	if err := k8s.Create(ctx, fleet); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteFleet(t, fleet) })
	pods := fleetPodsWithStore(t, fleet, 2, "redis://"+srv.Addr)
	p := benchPolicy("degraded", "open", "redis", 1)
	p.Spec.FailureMode = ptr.To(v1alpha1.FailOpen)
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, "degraded", "open", v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
	waitPolicy(t, "degraded", "open", v1beta1.DegradedCondition, metav1.ConditionFalse, v1beta1.StoreAvailableReason)
	for _, lp := range pods {
		v, err := lp.admin()
		if err != nil {
			t.Fatal(err)
		}
		if v.ReadyPods != 2 {
			t.Fatalf("%s shares limits among %d pods, want 2", lp.httpAddr, v.ReadyPods)
		}
	}

	srv.Stop()
	for _, lp := range pods {
		if code := lp.check(t, "bench-1", "tenant", "t", "route", "/v1/items/1"); code != http.StatusOK {
			t.Fatalf("failureMode Open answered %d with Redis down", code)
		}
	}
	waitPolicy(t, "degraded", "open", v1beta1.DegradedCondition, metav1.ConditionTrue, v1beta1.StoreUnavailableReason)
	// The pods report their fallbacks one by one: wait for both.
	eventually(t, 10*time.Second, "Degraded names both pods", func() error {
		c, _ := policyCondition(t, "degraded", "open", v1beta1.DegradedCondition)
		if c == nil || !strings.Contains(c.Message, "2/2 pods answer by failureMode Open") {
			return fmt.Errorf("Degraded %+v", c)
		}
		return nil
	})
	srv.Restart(t)
	for _, lp := range pods {
		eventually(t, 20*time.Second, "decisions from Redis again", func() error {
			before := lp.metric(t, "sluice_decisions_total", "policy", "degraded/open", "result", "allowed")
			lp.check(t, "bench-1", "tenant", "t", "route", "/v1/items/1")
			if lp.metric(t, "sluice_decisions_total", "policy", "degraded/open", "result", "allowed") == before {
				return fmt.Errorf("%s still falls back", lp.httpAddr)
			}
			return nil
		})
	}
	// Once no pod has fallen back for a while (10s), the condition stays
	// True for the enforcement window (5m here), counting what failed open;
	// TestFailingOpenIsVisible sees it clear.
	// At least each pod's fallback: a check the loop above sent before a
	// pod's breaker closed again failed open too (a loaded machine's
	// count was 3).
	failedOpen := regexp.MustCompile(`(\d+) failed open`)
	eventually(t, 40*time.Second, "Degraded by the window's fallbacks", func() error {
		c, _ := policyCondition(t, "degraded", "open", v1beta1.DegradedCondition)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1beta1.FallbackDecisionsReason {
			return fmt.Errorf("Degraded %+v", c)
		}
		if m := failedOpen.FindStringSubmatch(c.Message); m == nil || m[1] == "0" || m[1] == "1" {
			return fmt.Errorf("Degraded counts fewer than the 2 pods' fallbacks: %+v", c)
		}
		return nil
	})
}

// TestFailingOpenIsVisible: one decision that fails open (Redis stalls past
// the 20ms deadline once, as on a busy node) and one that fails closed show
// where users look, for the whole enforcement window: Degraded=True with
// reason FallbackDecisions after the pods stop reporting the store down, and
// the FailedOpen and Degraded columns of kubectl get rlp (FailedClosed in
// -o wide). Once the window has passed, Degraded is False again.
func TestFailingOpenIsVisible(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	const window = 20 * time.Second
	stopOperator()
	if err := startOperatorWith(func(o *controllers.Options, _ *rest.Config) { o.EnforcementWindow = window }); err != nil {
		t.Fatalf("restarting the operator with a %v window: %v", window, err)
	}
	t.Cleanup(func() {
		stopOperator()
		if err := startOperator(); err != nil {
			panic(err) // the suite cannot go on without it
		}
	})
	srv := redistest.Start(t)
	ns := namespace(t, "failing-open")
	fleet := &v1alpha1.LimiterFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "redis"},
		Spec: v1alpha1.LimiterFleetSpec{
			Replicas:       ptr.To(int32(1)),
			PolicySelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "redis"}},
			Redis:          v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisExternal), Addresses: []string{srv.Addr}},
		},
	}
	if err := k8s.Create(ctx, fleet); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteFleet(t, fleet) })
	// The limiter's default store deadline, 20ms.
	pod := fleetPodsWithStore(t, fleet, 1, "redis://"+srv.Addr)[0]
	open, closed := benchPolicy(ns, "open", "redis", 1), benchPolicy(ns, "closed", "redis", 2)
	open.Spec.FailureMode, closed.Spec.FailureMode = ptr.To(v1alpha1.FailOpen), ptr.To(v1alpha1.FailClosed)
	// Domains of their own: another test's policy with the same domain and
	// descriptors would be the older one, and these would conflict.
	open.Spec.Domain, closed.Spec.Domain = "failing-open", "failing-closed"
	for _, p := range []*v1alpha1.RateLimitPolicy{open, closed} {
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		waitPolicy(t, ns, p.Name, v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
		waitPolicy(t, ns, p.Name, v1beta1.DegradedCondition, metav1.ConditionFalse, v1beta1.StoreAvailableReason)
	}
	for i, p := range []*v1alpha1.RateLimitPolicy{open, closed} {
		if code := pod.check(t, p.Spec.Domain, "tenant", "t", "route", "/v1/items/"+strconv.Itoa(i+1)); code != http.StatusOK {
			t.Fatalf("%s with Redis up answered %d", p.Name, code)
		}
	}

	// Redis stalls for one decision of each policy.
	srv.Pause(t)
	codeOpen := pod.check(t, open.Spec.Domain, "tenant", "t", "route", "/v1/items/1")
	codeClosed := pod.check(t, closed.Spec.Domain, "tenant", "t", "route", "/v1/items/2")
	srv.Resume(t)
	if codeOpen != http.StatusOK || codeClosed != http.StatusTooManyRequests {
		t.Fatalf("with Redis stalled: failureMode Open answered %d, Closed %d; want 200 and 429", codeOpen, codeClosed)
	}
	failed := time.Now()
	for _, tc := range []struct {
		name, want string
		count      func(*v1alpha1.EnforcementStatus) int64
	}{
		{"open", "1 failed open", func(e *v1alpha1.EnforcementStatus) int64 { return ptr.Deref(e.FailedOpen, 0) }},
		{"closed", "1 failed closed", func(e *v1alpha1.EnforcementStatus) int64 { return ptr.Deref(e.FailedClosed, 0) }},
	} {
		waitEnforcement(t, ns, tc.name, func(e *v1alpha1.EnforcementStatus) error {
			if tc.count(e) != 1 {
				return fmt.Errorf("want 1 fallback decision")
			}
			return nil
		})
		// The pods report the store down for 10s after a fallback; then
		// the window's counts keep the policy Degraded.
		eventually(t, 40*time.Second, tc.name+" Degraded by the window's fallbacks", func() error {
			c, _ := policyCondition(t, ns, tc.name, v1beta1.DegradedCondition)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1beta1.FallbackDecisionsReason || !strings.Contains(c.Message, tc.want) {
				return fmt.Errorf("Degraded %+v", c)
			}
			return nil
		})
	}
	out := kubectl(t, "get", "rlp", "-n", ns)
	if !regexpMatch(`(?m)^NAME\s.*\sFAILEDOPEN\s+DEGRADED\s`, out) || !regexpMatch(`(?m)^open\s.*\s1\s+True\s`, out) || !regexpMatch(`(?m)^closed\s.*\s0\s+True\s`, out) {
		t.Errorf("kubectl get rlp lacks FailedOpen 1 and Degraded True:\n%s", out)
	}
	wide := kubectl(t, "get", "rlp", "-n", ns, "-o", "wide")
	if !regexpMatch(`(?m)^NAME\s.*\sFAILEDCLOSED\s+LOCALFALLBACK\s`, wide) || !regexpMatch(`(?m)^closed\s.*\s0\s+1\s+0\s+True\s`, wide) {
		t.Errorf("kubectl get rlp -o wide lacks FailedClosed 1:\n%s", wide)
	}
	t.Logf("$ kubectl get rlp -n %s\n%s$ kubectl get rlp -n %s -o wide\n%s", ns, out, ns, wide)

	// Past the window, no fallback is left: Degraded is False again.
	eventually(t, window+30*time.Second, "Degraded false once the window has passed", func() error {
		for _, name := range []string{"open", "closed"} {
			c, _ := policyCondition(t, ns, name, v1beta1.DegradedCondition)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1beta1.StoreAvailableReason {
				return fmt.Errorf("%s: Degraded %+v", name, c)
			}
		}
		return nil
	})
	if since := time.Since(failed); since < window {
		t.Errorf("Degraded cleared %v after the fallbacks, before the %v window passed", since.Round(time.Second), window)
	}
}
