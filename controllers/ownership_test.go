package controllers_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// A ConfigMap that happens to have the snapshot's name, and that the fleet
// does not control, is left alone: the operator used to take it over,
// replacing its data and owners. The fleet says which object is in the
// way, and creates its own snapshot once the object is gone.
func TestSnapshotConfigMapInTheWayIsLeftAlone(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	ns := namespace(t, "in-the-way")
	fleet := &v1alpha1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "blocked"}}
	name := resources.SnapshotConfigMapName(betaOf(fleet))
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"team": "other"}},
		Data: map[string]string{"their.conf": "keep me"}}
	if err := k8s.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), theirs) })
	if err := k8s.Create(ctx, fleet); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteFleet(t, fleet) })

	eventually(t, 30*time.Second, "Ready=False, ObjectInTheWay naming the ConfigMap", func() error {
		f := &v1alpha1.LimiterFleet{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(fleet), f); err != nil {
			return err
		}
		c := condition(f.Status.Conditions, v1beta1.ReadyCondition)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1beta1.ObjectInTheWayReason ||
			!strings.Contains(c.Message, "ConfigMap "+ns+"/"+name) {
			return fmt.Errorf("Ready %+v", c)
		}
		return nil
	})
	// The other limiter objects don't depend on the snapshot's ConfigMap,
	// but the pass stops at the first object in the way: nothing is
	// rendered half.
	got := &corev1.ConfigMap{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(theirs), got); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got.Data, theirs.Data) || len(got.BinaryData) > 0 || len(got.OwnerReferences) > 0 || got.Labels[resources.LabelManagedBy] != "" {
		t.Fatalf("the operator touched a ConfigMap it does not control: data %v, binaryData %d keys, owners %v, labels %v",
			got.Data, len(got.BinaryData), got.OwnerReferences, got.Labels)
	}

	// Once it is gone, the fleet writes its own.
	if err := k8s.Delete(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	eventually(t, controllers.ObjectInTheWayRetry+30*time.Second, "the fleet's own snapshot ConfigMap", func() error {
		cm := &corev1.ConfigMap{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
			return err
		}
		if refs := cm.OwnerReferences; len(refs) != 1 || refs[0].Name != fleet.Name || cm.Data["version"] == "" {
			return fmt.Errorf("owners %v, data keys %v", refs, len(cm.Data))
		}
		return nil
	})
}

// The operator's cache holds, of the kinds it renders, only the objects
// labelled as its own: not every ConfigMap, Secret, Service or Deployment
// in the cluster, as it did.
func TestOperatorCacheHoldsOnlyItsObjects(t *testing.T) {
	needSuite(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := namespace(t, "cache-scope")
	mine := func(obj client.Object) client.Object {
		obj.SetLabels(maps.Clone(controllers.ManagedLabels()))
		return obj
	}
	objs := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "foreign"}},
		mine(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine"}}),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "foreign"}, StringData: map[string]string{"password": "x"}},
		mine(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine"}}),
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "foreign"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}},
		mine(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}),
	}
	for _, o := range objs {
		if err := k8s.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	informers, err := cache.New(cfg, cache.Options{Scheme: scheme, ByObject: controllers.CacheByObject()})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = informers.Start(ctx) }()
	lists := []client.ObjectList{&corev1.ConfigMapList{}, &corev1.SecretList{}, &corev1.ServiceList{}}
	for _, o := range []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}, &corev1.Service{}} {
		if _, err := informers.GetInformer(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if !informers.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	for _, l := range lists {
		eventually(t, 10*time.Second, fmt.Sprintf("%T holds only the operator's", l), func() error {
			if err := informers.List(ctx, l, client.InNamespace(ns)); err != nil {
				return err
			}
			var names []string
			switch l := l.(type) {
			case *corev1.ConfigMapList:
				for _, o := range l.Items {
					names = append(names, o.Name)
				}
			case *corev1.SecretList:
				for _, o := range l.Items {
					names = append(names, o.Name)
				}
			case *corev1.ServiceList:
				for _, o := range l.Items {
					names = append(names, o.Name)
				}
			}
			if strings.Join(names, ",") != "mine" {
				return fmt.Errorf("the cache holds %v, want only [mine]", names)
			}
			return nil
		})
	}
}
