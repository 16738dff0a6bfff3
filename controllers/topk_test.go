package controllers_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// TestFleetTopKKey: the operator generates the key Secret of a fleet that
// reports hottest values, owned by the fleet, once, and keeps it across
// reconciles; it never reads nor changes a Secret that exists.
func TestFleetTopKKey(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	ns := namespace(t, "topk")
	f := &v1alpha1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hot"},
		Spec: v1alpha1.LimiterFleetSpec{Replicas: ptr.To(int32(0)), Stats: &v1alpha1.FleetStats{TopDescriptors: ptr.To[int32](5)}}}
	if err := k8s.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteFleet(t, f) })
	key := client.ObjectKey{Namespace: ns, Name: resources.TopKKeySecretName(betaOf(f))}
	secretKey := func() ([]byte, error) {
		s := &corev1.Secret{}
		if err := k8s.Get(ctx, key, s); err != nil {
			return nil, err
		}
		if !metav1.IsControlledBy(s, f) {
			return nil, fmt.Errorf("owners %v", s.OwnerReferences)
		}
		if n := len(s.Data[limiterwire.TopKKeyName]); n != 32 {
			return nil, fmt.Errorf("a key of %d bytes", n)
		}
		return s.Data[limiterwire.TopKKeyName], nil
	}
	var first []byte
	eventually(t, 30*time.Second, "the key Secret", func() (err error) {
		first, err = secretKey()
		return err
	})
	eventually(t, 30*time.Second, "the Deployment mounts it", func() error {
		dep := &appsv1.Deployment{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.LimiterName(betaOf(f))}, dep); err != nil {
			return err
		}
		for _, v := range dep.Spec.Template.Spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName == key.Name {
				return nil
			}
		}
		return fmt.Errorf("volumes %+v", dep.Spec.Template.Spec.Volumes)
	})

	// Another pass (a spec change) keeps the key.
	kubectl(t, "-n", ns, "patch", "limiterfleet", f.Name, "--type=merge", "-p", `{"spec":{"stats":{"topDescriptors":6}}}`)
	eventually(t, 30*time.Second, "the fleet reconciled at its new generation", func() error {
		got := &v1alpha1.LimiterFleet{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(f), got); err != nil {
			return err
		}
		if got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("observed %d, generation %d", got.Status.ObservedGeneration, got.Generation)
		}
		return nil
	})
	if again, err := secretKey(); err != nil || !bytes.Equal(again, first) {
		t.Fatalf("the key changed on a reconcile: %v", err)
	}

	// A Secret of that name that exists is never read nor changed.
	other := &v1alpha1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "preset"},
		Spec: v1alpha1.LimiterFleetSpec{Replicas: ptr.To(int32(0)), Stats: &v1alpha1.FleetStats{TopDescriptors: ptr.To[int32](5)}}}
	planted := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: resources.TopKKeySecretName(betaOf(other))},
		Data: map[string][]byte{limiterwire.TopKKeyName: bytes.Repeat([]byte("k"), 32)}}
	if err := k8s.Create(ctx, planted); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteFleet(t, other) })
	eventually(t, 30*time.Second, "the fleet reconciled", func() error {
		got := &v1alpha1.LimiterFleet{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(other), got); err != nil {
			return err
		}
		if got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("observed %d, generation %d: %+v", got.Status.ObservedGeneration, got.Generation, got.Status.Conditions)
		}
		return nil
	})
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(planted), planted); err != nil || len(planted.OwnerReferences) != 0 ||
		!bytes.Equal(planted.Data[limiterwire.TopKKeyName], bytes.Repeat([]byte("k"), 32)) {
		t.Errorf("the planted Secret changed: %v %+v", err, planted)
	}
}
