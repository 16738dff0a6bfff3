package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/config/kube"
)

// Tenant A floods a shared fleet with large policies, more than the whole
// 1 MiB snapshot; tenant B then adds one small policy. On the base commit
// the snapshot kept the oldest policies whatever their namespace, so B's
// newer policy was refused (SnapshotFull) for A's flood. Now A is held to
// its share (by default 256 KiB of the snapshot, 200 policies): A's newest
// policies are refused, naming A's namespace and budget, and B's policy is
// accepted.
func TestAttackTenantFloodPushesOutAnotherTenantsPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 180 large objects")
	}
	needSuite(t)
	ctx := context.Background()
	const sys, a, b, name = "budget-sys", "budget-a", "budget-b", "shared"
	namespace(t, sys)
	namespace(t, a)
	namespace(t, b)
	fleet := &v1alpha1.LimiterFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: name},
		Spec: v1alpha1.LimiterFleetSpec{
			Replicas:       ptr.To(int32(0)),
			PolicySelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": name}},
			Domains: []v1alpha1.FleetDomain{
				{Name: "flood", AllowedNamespaces: &v1alpha1.AllowedNamespaces{From: ptr.To(v1alpha1.NamespacesFromAll)}},
				{Name: "b-api", AllowedNamespaces: &v1alpha1.AllowedNamespaces{From: ptr.To(v1alpha1.NamespacesFromAll)}},
			},
		},
	}
	if err := k8s.Create(ctx, fleet); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deleteAllPolicies(t, a)
		deleteAllPolicies(t, b)
		deleteFleet(t, fleet)
	})

	// A's flood: about 1.8 MB of policies, 1.35 MB compressed.
	const flood = 180
	var wg sync.WaitGroup
	errs := make(chan error, flood)
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < flood; i += 4 {
				if err := k8s.Create(ctx, floodPolicy(a, fmt.Sprintf("flood-%03d", i), name)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var last time.Time
	eventually(t, 120*time.Second, "every flood policy has an Accepted condition", func() error {
		var list v1alpha1.RateLimitPolicyList
		if err := k8s.List(ctx, &list, client.InNamespace(a)); err != nil {
			return err
		}
		for _, p := range list.Items {
			if c := condition(p.Status.Conditions, v1beta1.AcceptedCondition); c == nil || c.ObservedGeneration != p.Generation {
				return fmt.Errorf("%s: no Accepted condition for generation %d yet", p.Name, p.Generation)
			}
			last = later(last, p.CreationTimestamp.Time)
		}
		return nil
	})
	// B's policy is newer than all of A's (creation times have seconds).
	for !time.Now().After(last.Add(time.Second)) {
		time.Sleep(100 * time.Millisecond)
	}
	bp := &v1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: b, Name: "newer", Labels: map[string]string{"fleet": name}},
		Spec: v1alpha1.RateLimitPolicySpec{Domain: "b-api", Descriptors: []v1alpha1.Descriptor{{Key: "user"}},
			Rate: v1alpha1.Rate{Limit: 5, Period: metav1.Duration{Duration: time.Minute}}},
	}
	if err := k8s.Create(ctx, bp); err != nil {
		t.Fatal(err)
	}
	// Once the fleet has fitted B's policy (every selected policy kept or
	// refused), its snapshot must hold it. (The policy's own Accepted may
	// be True for a moment before the fleet decides.)
	var held bool
	var fitted v1alpha1.SnapshotStatus
	eventually(t, 120*time.Second, "the fleet's snapshot fitted with B's policy", func() error {
		f := &v1alpha1.LimiterFleet{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(fleet), f); err != nil {
			return err
		}
		if s := f.Status.Snapshot; s == nil || s.Policies+s.Refused != flood+1 {
			return fmt.Errorf("fleet snapshot %+v, want %d policies kept or refused", s, flood+1)
		}
		cm := &corev1.ConfigMap{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: sys, Name: resources.SnapshotConfigMapName(betaOf(fleet))}, cm); err != nil {
			return err
		}
		snap, err := kube.Decode(cm)
		if err != nil {
			return err
		}
		if snap.Version != f.Status.Snapshot.Version {
			return fmt.Errorf("ConfigMap holds %s, the fleet reports %s", snap.Version, f.Status.Snapshot.Version)
		}
		held = slices.ContainsFunc(snap.Policies, func(p *config.Policy) bool { return p.Namespace == b })
		fitted = *f.Status.Snapshot
		return nil
	})
	if !held {
		c, _ := policyCondition(t, b, "newer", v1beta1.AcceptedCondition)
		t.Fatalf("tenant B's newer policy is not in the fleet's snapshot (%d policies kept, %d refused): tenant A's flood pushed it out; its Accepted: %+v",
			fitted.Policies, fitted.Refused, c)
	}
	waitPolicy(t, b, "newer", v1beta1.AcceptedCondition, metav1.ConditionTrue, "")

	// A's newest policies are refused, by A's budget; its oldest kept.
	eventually(t, 120*time.Second, "A's newest policies refused by A's budget", func() error {
		var list v1alpha1.RateLimitPolicyList
		if err := k8s.List(ctx, &list, client.InNamespace(a)); err != nil {
			return err
		}
		refused, kept := 0, 0
		for _, p := range list.Items {
			c := condition(p.Status.Conditions, v1beta1.AcceptedCondition)
			switch {
			case c == nil || c.ObservedGeneration != p.Generation:
				return fmt.Errorf("%s: no Accepted condition for generation %d yet", p.Name, p.Generation)
			case c.Status == metav1.ConditionTrue:
				kept++
			case c.Reason == v1beta1.SnapshotFullReason && strings.Contains(c.Message, "namespace "+a+" is over its budget") &&
				strings.Contains(c.Message, sys+"/"+name):
				refused++
			default:
				return fmt.Errorf("%s: Accepted=%s %s: %s", p.Name, c.Status, c.Reason, c.Message)
			}
		}
		if refused == 0 || kept == 0 {
			return fmt.Errorf("%d kept, %d refused by the budget", kept, refused)
		}
		f := &v1alpha1.LimiterFleet{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(fleet), f); err != nil {
			return err
		}
		if s := f.Status.Snapshot; s == nil || int(s.Policies) != kept+1 || int(s.Refused) != refused {
			return fmt.Errorf("fleet snapshot %+v; policies say %d+1 kept, %d refused", s, kept, refused)
		}
		t.Logf("tenant A: %d policies kept, %d refused by its budget; tenant B's policy accepted", kept, refused)
		return nil
	})
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// unbudgeted raises every namespace's snapshot budget on fleet to the
// most the CRD allows (10,000 policies, 16 MiB before compression), for the tests
// that measure a fleet with many policies in one namespace.
func unbudgeted(t testing.TB, fleet *v1alpha1.LimiterFleet) {
	t.Helper()
	ctx := context.Background()
	eventually(t, 30*time.Second, "the fleet's tenant budget raised", func() error {
		f := &v1alpha1.LimiterFleet{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(fleet), f); err != nil {
			return err
		}
		f.Spec.TenantBudget = &v1alpha1.TenantBudgets{TenantBudget: v1alpha1.TenantBudget{
			MaxPoliciesPerNamespace: ptr.To(int32(10000)), MaxSnapshotBytesPerNamespace: ptr.To(int32(16 << 20))}}
		return k8s.Update(ctx, f)
	})
}
