package controllers_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// TestAttackRoguePodPosesAsALimiter: someone who can create Pods in the
// fleet's namespace runs a real limiter behind a Pod that matches the
// fleet's Service selector, so that it is a ready endpoint of the fleet,
// owned by a ReplicaSet of his own rather than the fleet's. The limiter
// loads a policy file of his: a policy with the UID of another
// namespace's policy, which no fleet serves, and counts requests for it.
// The operator neither counts the pod (ready pods, Enforced, the policies'
// pods) nor takes its counts (the victim gets no status.enforcement), and
// the fleet says which endpoint it ignores and why.
func TestAttackRoguePodPosesAsALimiter(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	fleet, pods := newFleet(t, "rogue", "fleet", 1)
	own := statsPolicy(fleet.Namespace, "own", "fleet", "rogue-api", 100, false)
	victim := statsPolicy(namespace(t, "rogue-victim"), "victim", "nobody", "victim-api", 10, false)
	for _, p := range []*v1alpha1.RateLimitPolicy{own, victim} {
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, p) })
	}
	waitPolicy(t, fleet.Namespace, own.Name, v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)

	// The rogue limiter, on the fleet's ports at another address of
	// the fleet's block, with the victim's policy under the victim's UID.
	file := filepath.Join(t.TempDir(), "rogue.yaml")
	doc := fmt.Sprintf(`apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: victim, namespace: rogue-victim, uid: %s, generation: 1}
spec:
  domain: victim-api
  descriptors: [{key: user}]
  rate: {limit: 1000000, period: 1h}
`, victim.UID)
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	ip, port, _ := net.SplitHostPort(pods[0].httpAddr)
	_, adminPort, _ := net.SplitHostPort(pods[0].adminAddr)
	lo := ip[:strings.LastIndex(ip, ".")+1] + "9"
	rogue := &limiterProc{ip: lo, podIP: podNetwork.podIP(lo), httpAddr: net.JoinHostPort(lo, port),
		grpcAddr: net.JoinHostPort(lo, strconv.Itoa(freePort(t, lo))), adminAddr: net.JoinHostPort(lo, adminPort)}
	rogue.args = []string{"--policies", file, "--store", "memory", "--http-addr", rogue.httpAddr, "--grpc-addr", rogue.grpcAddr,
		"--admin-addr", rogue.adminAddr, "--admin-tls-cert", pods[0].tlsCert, "--admin-tls-key", pods[0].tlsKey}
	rogue.start(t)
	t.Cleanup(rogue.stop)

	// His Pod, owned by his ReplicaSet, which no Deployment controls; the
	// EndpointSlice controller would list it, since it matches the
	// Service's selector.
	dep := &appsv1.Deployment{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: fleet.Namespace, Name: resources.LimiterName(betaOf(fleet))}, dep); err != nil {
		t.Fatal(err)
	}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: fleet.Namespace, Name: resources.LimiterName(betaOf(fleet)) + "-rogue", Labels: dep.Spec.Template.Labels},
		Spec:       appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(1)), Selector: dep.Spec.Selector, Template: dep.Spec.Template},
	}
	if err := k8s.Create(ctx, rs); err != nil {
		t.Fatal(err)
	}
	pod := limiterPod(t, fleet, "rogue-limiter", rogue.podIP,
		[]metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))})
	slice := &discoveryv1.EndpointSlice{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: fleet.Namespace, Name: resources.LimiterName(betaOf(fleet)) + "-abcde"}, slice); err != nil {
		t.Fatal(err)
	}
	slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
		Addresses:  []string{rogue.podIP},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
	})
	if err := k8s.Update(ctx, slice); err != nil {
		t.Fatal(err)
	}
	for range 7 {
		rogue.check(t, "victim-api", "user", "mallory")
	}

	// The fleet saw the endpoint, and ignores it, saying why.
	rogueAddr := net.JoinHostPort(rogue.podIP, adminPort)
	eventually(t, 30*time.Second, "the fleet ignores the rogue pod", func() error {
		f := &v1alpha1.LimiterFleet{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(fleet), f); err != nil {
			return err
		}
		c := condition(f.Status.Conditions, v1beta1.SnapshotSyncedCondition)
		switch {
		case c == nil || f.Status.Limiters == nil:
			return fmt.Errorf("status %+v", f.Status)
		case f.Status.Limiters.Ready != 1 || c.Status != metav1.ConditionTrue:
			return fmt.Errorf("%d ready pods, SnapshotSynced=%s: %s", f.Status.Limiters.Ready, c.Status, c.Message)
		case !strings.Contains(c.Message, rogueAddr) || !strings.Contains(c.Message, "not controlled by Deployment"):
			return fmt.Errorf("SnapshotSynced does not name the rogue endpoint %s: %s", rogueAddr, c.Message)
		}
		return nil
	})
	// Traffic on the real limiter after the rogue's: once the collector
	// has written it, it has read every endpoint since the rogue counted.
	for range 3 {
		pods[0].check(t, "rogue-api", "user", "kim")
	}
	waitEnforcement(t, fleet.Namespace, own.Name, counted(3, 0, 0))
	p := waitPolicy(t, fleet.Namespace, own.Name, v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
	if len(p.Status.Fleets) != 1 || ptr.Deref(p.Status.Fleets[0].PodsReady, 0) != 1 {
		t.Errorf("the policy's fleets %+v: want 1 ready pod", p.Status.Fleets)
	}
	v := &v1alpha1.RateLimitPolicy{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(victim), v); err != nil {
		t.Fatal(err)
	}
	if v.Status.Enforcement != nil {
		t.Errorf("the rogue pod wrote into %s/%s's status: %s", v.Namespace, v.Name, enforcementString(v.Status.Enforcement))
	}
}
