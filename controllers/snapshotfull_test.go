package controllers_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
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
)

// floodPolicy is a policy as large as the CRD allows (8 descriptors, each a
// 253-character key and a 1,024-character value) of random characters, so
// that gzip can't shrink it much: about 10 KB in the snapshot.
func floodPolicy(ns, name, fleet string) *v1alpha1.RateLimitPolicy {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
	random := func(n int) string {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		for i := range b {
			b[i] = alphabet[int(b[i])%len(alphabet)]
		}
		return string(b)
	}
	var ds []v1alpha1.Descriptor
	for range v1alpha1.MaxDescriptors {
		ds = append(ds, v1alpha1.Descriptor{Key: random(v1alpha1.MaxDescriptorKeyLength), Value: ptr.To(random(v1alpha1.MaxDescriptorValueLength))})
	}
	return &v1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"fleet": fleet}},
		Spec: v1alpha1.RateLimitPolicySpec{Domain: "flood", Descriptors: ds,
			Rate: v1alpha1.Rate{Limit: 10, Period: metav1.Duration{Duration: time.Minute}}},
	}
}

// A tenant floods a fleet with policies that, together, would pass the
// ConfigMap's 1 MiB limit. On main every later write of the snapshot
// failed and the fleet froze for every tenant. Now the newest policies
// that don't fit are refused (Accepted=False, SnapshotFull, naming the
// fleet and the size), and the older ones are still enforced and still
// take edits; deleting the flood makes room again.
func TestSnapshotFullRefusesNewestPolicies(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 180 large objects")
	}
	needSuite(t)
	ctx := context.Background()
	const ns, name = "snapshot-full", "flooded"
	fleet, pods := newFleet(t, ns, name, 1)
	unbudgeted(t, fleet) // one namespace's policies fill the fleet
	t.Cleanup(func() {
		deleteAllPolicies(t, ns)
	})

	// Another tenant's policy, there before the flood.
	early := &v1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "early", Labels: map[string]string{"fleet": name}},
		Spec: v1alpha1.RateLimitPolicySpec{Domain: "tenant-a", Descriptors: []v1alpha1.Descriptor{{Key: "user"}},
			Rate: v1alpha1.Rate{Limit: 2, Period: metav1.Duration{Duration: time.Hour}}},
	}
	if err := k8s.Create(ctx, early); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, ns, "early", v1beta1.EnforcedCondition, metav1.ConditionTrue, "")

	// The flood: about 1.8 MB of incompressible policies, created in a
	// stream as a script would.
	const flood = 180
	var wg sync.WaitGroup
	errs := make(chan error, flood)
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < flood; i += 4 {
				if err := k8s.Create(ctx, floodPolicy(ns, fmt.Sprintf("flood-%03d", i), name)); err != nil {
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

	// The newest policies are refused, by name of the fleet and with the
	// size; the rest fit in the ConfigMap that the pods load.
	var refused, kept []string
	eventually(t, 120*time.Second, "the snapshot full, the newest flood policies refused", func() error {
		refused, kept = nil, nil
		var list v1alpha1.RateLimitPolicyList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, p := range list.Items {
			c := condition(p.Status.Conditions, v1beta1.AcceptedCondition)
			switch {
			case c == nil || c.ObservedGeneration != p.Generation:
				return fmt.Errorf("%s: no Accepted condition for generation %d yet", p.Name, p.Generation)
			case c.Status == metav1.ConditionFalse && c.Reason == v1beta1.SnapshotFullReason:
				if !strings.Contains(c.Message, ns+"/"+name) || !strings.Contains(c.Message, "bytes") {
					return fmt.Errorf("%s: SnapshotFull message names no fleet or size: %s", p.Name, c.Message)
				}
				refused = append(refused, p.Name)
			case c.Status == metav1.ConditionTrue:
				kept = append(kept, p.Name)
			default:
				return fmt.Errorf("%s: Accepted=%s %s: %s", p.Name, c.Status, c.Reason, c.Message)
			}
		}
		if len(refused) == 0 {
			return fmt.Errorf("no policy refused; %d accepted", len(kept))
		}
		f := &v1alpha1.LimiterFleet{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(fleet), f); err != nil {
			return err
		}
		if f.Status.Snapshot == nil || int(f.Status.Snapshot.Policies) != len(kept) {
			return fmt.Errorf("fleet snapshot %+v, %d policies accepted", f.Status.Snapshot, len(kept))
		}
		if int(f.Status.Snapshot.Refused) != len(refused) {
			return fmt.Errorf("fleet reports %d refused, policies say %d", f.Status.Snapshot.Refused, len(refused))
		}
		return fleetSynced(ctx, fleet, 1)
	})
	if !slices.Contains(kept, "early") {
		t.Fatal("the policy older than the flood was refused")
	}
	// Refused are the newest: every kept flood policy was created no later
	// than every refused one.
	created := map[string]time.Time{}
	var list v1alpha1.RateLimitPolicyList
	if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		created[p.Name] = p.CreationTimestamp.Time
	}
	for _, k := range kept {
		for _, r := range refused {
			if created[k].After(created[r]) {
				t.Fatalf("kept %s (created %v) is newer than refused %s (created %v)", k, created[k], r, created[r])
			}
		}
	}
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.SnapshotConfigMapName(betaOf(fleet))}, cm); err != nil {
		t.Fatal(err)
	}
	size := 0
	for _, v := range cm.Data {
		size += len(v)
	}
	for _, v := range cm.BinaryData {
		size += len(v)
	}
	t.Logf("%d policies kept (ConfigMap data %d bytes), %d refused", len(kept), size, len(refused))

	// Everything else keeps being updated: an edit of the early policy
	// reaches the pod, which enforces it.
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(early), early); err != nil {
		t.Fatal(err)
	}
	early.Spec.Rate.Limit = 1
	if err := k8s.Update(ctx, early); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, ns, "early", v1beta1.EnforcedCondition, metav1.ConditionTrue, "")
	if code := pods[0].check(t, "tenant-a", "user", "u1"); code != http.StatusOK {
		t.Fatalf("first request answered %d", code)
	}
	if code := pods[0].check(t, "tenant-a", "user", "u1"); code != http.StatusTooManyRequests {
		t.Fatalf("second request under the edited limit of 1 answered %d", code)
	}

	// Deleting the flood makes room: a refused policy is accepted again.
	last := refused[len(refused)-1]
	for _, k := range kept {
		if strings.HasPrefix(k, "flood-") {
			if err := k8s.Delete(ctx, &v1alpha1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: k}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitPolicy(t, ns, last, v1beta1.AcceptedCondition, metav1.ConditionTrue, "")
	waitPolicy(t, ns, last, v1beta1.EnforcedCondition, metav1.ConditionTrue, "")
}
