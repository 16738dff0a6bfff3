package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// collectGarbage plays the garbage collector that envtest does not run: it
// deletes the objects whose controller no longer exists, as
// kube-controller-manager would after a fleet's deletion (and then its
// Deployment's ReplicaSet's pods). Without it, a fleet created again under
// an earlier one's name (go test -count=N) finds the earlier one's
// ConfigMap, Secrets, StatefulSets and pods in its way, which on a real
// cluster are gone within seconds.
func collectGarbage(t testing.TB, ns string) {
	t.Helper()
	if err := sweepOrphans(context.Background(), ns); err != nil {
		t.Errorf("garbage collection in %s: %v", ns, err)
	}
}

// stopGarbageCollector stops the collector startSuite runs.
var stopGarbageCollector = func() {}

// startGarbageCollector runs runGarbageCollector until stopGarbageCollector.
func startGarbageCollector() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); runGarbageCollector(ctx) }()
	stopGarbageCollector = func() { cancel(); <-done }
}

// runGarbageCollector sweeps every namespace until ctx ends, as the real
// collector does: an in-flight reconcile of a fleet that was just deleted
// may still write children that point at it.
func runGarbageCollector(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		_ = sweepOrphans(ctx, "") // the next sweep retries
	}
}

// sweepOrphans deletes, in ns ("" for all), the objects of the kinds the
// operator and the tests create whose controller is gone, until none is
// left. Dependents are listed before their owners (pods, then ReplicaSets,
// then what fleets own, then fleets), so an object whose owner was created
// between two lists is never taken for an orphan.
func sweepOrphans(ctx context.Context, ns string) error {
	for {
		var objs []client.Object
		for _, list := range []client.ObjectList{
			&corev1.PodList{}, &appsv1.ReplicaSetList{},
			&corev1.ConfigMapList{}, &corev1.SecretList{}, &corev1.ServiceList{}, &corev1.ServiceAccountList{},
			&rbacv1.RoleList{}, &rbacv1.RoleBindingList{}, &appsv1.DeploymentList{}, &appsv1.StatefulSetList{},
			&policyv1.PodDisruptionBudgetList{}, &networkingv1.NetworkPolicyList{}, &v1alpha1.LimiterFleetList{},
		} {
			if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
				return fmt.Errorf("listing %T: %w", list, err)
			}
			_ = meta.EachListItem(list, func(o runtime.Object) error {
				objs = append(objs, o.(client.Object))
				return nil
			})
		}
		live := map[types.UID]bool{}
		for _, obj := range objs {
			live[obj.GetUID()] = true
		}
		deleted := 0
		for _, obj := range objs {
			ref := metav1.GetControllerOf(obj)
			if ref == nil || live[ref.UID] {
				continue
			}
			if err := k8s.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting %T %s/%s: %w", obj, obj.GetNamespace(), obj.GetName(), err)
			}
			deleted++
		}
		if deleted == 0 {
			return nil
		}
	}
}
