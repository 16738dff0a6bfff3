package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers"
)

// newFleet creates a fleet in ns that selects the policies labelled
// fleet=<name>, and starts its limiter processes.
func newFleet(t testing.TB, ns, name string, pods int) (*v1alpha1.LimiterFleet, []*limiterProc) {
	t.Helper()
	namespace(t, ns)
	f := &v1alpha1.LimiterFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.LimiterFleetSpec{
			Replicas:       ptr.To(int32(pods)),
			PolicySelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": name}},
		},
	}
	if err := k8s.Create(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteFleet(t, f) })
	return f, fleetPods(t, f, pods)
}

func benchPolicy(ns, name, fleet string, i int) *v1alpha1.RateLimitPolicy {
	return &v1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"fleet": fleet}},
		Spec: v1alpha1.RateLimitPolicySpec{
			Domain:      "bench-" + strconv.Itoa(i%20),
			Descriptors: []v1alpha1.Descriptor{{Key: "tenant"}, {Key: "route", Value: ptr.To("/v1/items/" + strconv.Itoa(i))}},
			Rate:        v1alpha1.Rate{Limit: int64(100 + i), Period: metav1.Duration{Duration: time.Minute}},
		},
	}
}

// podHas reports whether a limiter has loaded the given generation of a
// policy, from its admin endpoint.
func podHas(p *limiterProc, uid string, gen int64) bool {
	v, err := p.admin()
	if err != nil {
		return false
	}
	for _, pol := range v.Policies {
		if pol.UID == uid {
			return pol.Generation == gen
		}
	}
	return false
}

// A fleet of 2,000 policies compiles, is written (compressed when large)
// and is loaded by its limiters. The sizes and times are printed.
func TestFleetOf2000Policies(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 2,000 objects")
	}
	needSuite(t)
	ctx := context.Background()
	fleet, pods := newFleet(t, "big", "big", 2)
	unbudgeted(t, fleet) // one namespace's policies fill the fleet
	t.Cleanup(func() {
		// Leave the API server as small as the other tests expect, with
		// the operator stopped meanwhile: it would rebuild the fleet's
		// snapshot of up to 2,000 policies after each deletion (one at a
		// time they took 10 minutes on a loaded machine).
		stopOperator()
		deleteAllPolicies(t, "big")
		if err := startOperator(); err != nil {
			t.Error(err)
		}
	})
	start := time.Now()
	// Eight creates at a time: one at a time took minutes on a loaded
	// machine, each a round trip to a busy API server.
	var g errgroup.Group
	g.SetLimit(8)
	for i := range 2000 {
		g.Go(func() error { return k8s.Create(ctx, benchPolicy("big", fmt.Sprintf("p-%04d", i), "big", i)) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	created := time.Since(start)
	var f v1alpha1.LimiterFleet
	// Alone here they are loaded about a minute after the last create;
	// beside another make test, 1,915 were after two minutes, the
	// operator rebuilding the snapshot as they came: the bound is only
	// where a failure shows.
	eventually(t, 8*time.Minute, "2,000 policies loaded by every pod", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(fleet), &f); err != nil {
			return err
		}
		if f.Status.Snapshot == nil || f.Status.Snapshot.Policies != 2000 {
			return fmt.Errorf("snapshot %+v", f.Status.Snapshot)
		}
		return fleetSynced(ctx, fleet, 2)
	})
	loaded := time.Since(start)
	if pods[0].loaded(t) != f.Status.Snapshot.Version {
		t.Fatal("pod and fleet disagree on the version")
	}
	// One of the last policies is enforced by each pod.
	for _, p := range pods {
		if code := p.check(t, "bench-19", "tenant", "a", "route", "/v1/items/1999"); code != http.StatusOK {
			t.Fatalf("%s answered %d", p.httpAddr, code)
		}
	}
	t.Logf("2,000 policies: snapshot %d bytes of JSON (compressed in the ConfigMap: %v), created in %v, written and loaded by 2 pods %v after the first create",
		f.Status.Snapshot.Bytes, f.Status.Snapshot.Compressed, created.Round(time.Millisecond), loaded.Round(time.Millisecond))
}

// BenchmarkApplyToEnforced edits a policy's rate.limit 100 times and
// measures, for each edit, the time until every limiter pod has loaded the
// new generation, and until the policy's Enforced condition says so.
// Run: make bench-operator (or go test -run '^$' -bench ApplyToEnforced -benchtime 1x ./controllers).
func BenchmarkApplyToEnforced(b *testing.B) {
	b.StopTimer()
	needSuite(b)
	ctx := context.Background()
	_, pods := newFleet(b, "latency", "latency", 3)
	for i := range 50 { // a realistic fleet: other policies in the snapshot
		if err := k8s.Create(ctx, benchPolicy("latency", fmt.Sprintf("other-%02d", i), "latency", i)); err != nil {
			b.Fatal(err)
		}
	}
	pol := benchPolicy("latency", "edited", "latency", 999)
	if err := k8s.Create(ctx, pol); err != nil {
		b.Fatal(err)
	}
	// Every policy enforced first, so that the operator's histogram below
	// holds the edits alone.
	for i := range 50 {
		waitPolicy(b, "latency", fmt.Sprintf("other-%02d", i), v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
	}
	waitPolicy(b, "latency", "edited", v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
	var toPods, toStatus []time.Duration
	samples0, sum0 := controllers.ApplyToEnforcedSamples(b)
	edits := max(100, b.N)
	for i := range edits {
		// Edit as kubectl apply does: a patch of the field alone, which
		// no status write of the operator's can make conflict.
		patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"rate":{"limit":%d}}}`, 1000+i))
		start := time.Now()
		if err := k8s.Patch(ctx, pol, patch); err != nil {
			b.Fatal(err)
		}
		gen, uid := pol.Generation, string(pol.UID)
		var podsAt time.Duration
		deadline := start.Add(30 * time.Second)
		for {
			all := true
			for _, p := range pods {
				all = all && podHas(p, uid, gen)
			}
			if all && podsAt == 0 {
				podsAt = time.Since(start)
			}
			if podsAt != 0 {
				c, cur := policyCondition(b, pol.Namespace, pol.Name, v1beta1.EnforcedCondition)
				if c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == gen && cur.Generation == gen {
					toStatus = append(toStatus, time.Since(start))
					break
				}
			}
			if time.Now().After(deadline) {
				b.Fatalf("edit %d not enforced within 30s", i)
			}
			time.Sleep(2 * time.Millisecond) // sampling resolution
		}
		toPods = append(toPods, podsAt)
	}
	p := func(ds []time.Duration, q float64) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[min(len(s)-1, int(q*float64(len(s))))]
	}
	b.ReportMetric(float64(p(toPods, 0.5).Microseconds())/1000, "ms-p50-pods")
	b.ReportMetric(float64(p(toPods, 0.99).Microseconds())/1000, "ms-p99-pods")
	b.ReportMetric(float64(p(toStatus, 0.99).Microseconds())/1000, "ms-p99-status")
	fmt.Printf("apply-to-enforced over %d edits, 3 limiter pods, 51 policies in the snapshot:\n", edits)
	fmt.Printf("  every pod loaded the new generation: p50 %v  p99 %v  max %v\n", p(toPods, 0.5), p(toPods, 0.99), p(toPods, 1))
	fmt.Printf("  Enforced=True in the policy status:  p50 %v  p99 %v  max %v\n", p(toStatus, 0.5), p(toStatus, 0.99), p(toStatus, 1))
	samples, sum := controllers.ApplyToEnforcedSamples(b)
	fmt.Printf("  sluice_operator_apply_to_enforced_seconds: %d samples, mean %v (the test's own mean to status: %v)\n",
		samples-samples0, time.Duration((sum-sum0)/float64(max(1, samples-samples0))*float64(time.Second)).Round(time.Microsecond), mean(toStatus))
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return (sum / time.Duration(max(1, len(ds)))).Round(time.Microsecond)
}
