package controllers_test

import (
	"bytes"
	"context"
	"fmt"
	"path"
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

// TestBuildLimiterDeploymentTopKKey: a fleet that reports hottest values
// mounts its key Secret read-only and names the key file in
// SLUICE_TOPK_KEY_FILE, the file the mount gives; one that doesn't has
// neither.
func TestBuildLimiterDeploymentTopKKey(t *testing.T) {
	fleet := resFleet("sluice-system", "default", func(f *v1alpha1.LimiterFleet) {
		f.Spec.Stats = &v1alpha1.FleetStats{TopDescriptors: ptr.To[int32](5)}
	})
	pod := resources.BuildLimiterDeployment(fleet, resources.LimiterDeploymentOptions{DefaultImage: resDefaultImage, StoreURL: "memory"}).Spec.Template.Spec
	c := pod.Containers[0]
	if len(pod.Volumes) != 2 || pod.Volumes[0].Secret == nil || pod.Volumes[0].Secret.SecretName != "default-limiter-topk-key" ||
		len(pod.Volumes[0].Secret.Items) != 1 || pod.Volumes[0].Secret.Items[0].Key != "key" {
		t.Fatalf("volumes %+v: want the key of Secret default-limiter-topk-key", pod.Volumes)
	}
	if len(c.VolumeMounts) != 2 || !c.VolumeMounts[0].ReadOnly || c.VolumeMounts[0].Name != pod.Volumes[0].Name {
		t.Fatalf("mounts %+v: want the key volume, read-only, and the admin TLS one", c.VolumeMounts)
	}
	file := path.Join(c.VolumeMounts[0].MountPath, pod.Volumes[0].Secret.Items[0].Path)
	// and GOMEMLIMIT, 90% of the default memory limit (TestGoMemLimitEnv).
	want := []corev1.EnvVar{{Name: "SLUICE_TOPK_KEY_FILE", Value: file}, {Name: "GOMEMLIMIT", Value: "241591860"}}
	if file != "/etc/sluice/topk/key" || len(c.Env) != 2 || c.Env[0] != want[0] || c.Env[1] != want[1] {
		t.Errorf("env %+v, key file %s: want SLUICE_TOPK_KEY_FILE=/etc/sluice/topk/key", c.Env, file)
	}
	if s := resources.BuildTopKKeySecret(fleet, []byte("k")); s.Name != pod.Volumes[0].Secret.SecretName || s.Namespace != fleet.Namespace {
		t.Errorf("the key Secret %s/%s is not the one mounted", s.Namespace, s.Name)
	}
	plain := resources.BuildLimiterDeployment(resFleet("sluice-system", "default"), resources.LimiterDeploymentOptions{DefaultImage: resDefaultImage, StoreURL: "memory"}).Spec.Template.Spec
	if len(plain.Volumes) != 1 || plain.Volumes[0].Name != "admin-tls" || len(plain.Containers[0].Env) != 1 || plain.Containers[0].Env[0].Name != "GOMEMLIMIT" {
		t.Errorf("without hottest values: volumes %+v, env %+v", plain.Volumes, plain.Containers[0].Env)
	}
}

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
	key := client.ObjectKey{Namespace: ns, Name: resources.TopKKeySecretName(f)}
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
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.LimiterName(f)}, dep); err != nil {
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
	planted := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: resources.TopKKeySecretName(other)},
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
