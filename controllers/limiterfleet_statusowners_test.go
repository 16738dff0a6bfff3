package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers"
)

// The fleet controller's status writer decides a condition is stale by
// what its own field manager owns, not by the status alone: a condition
// hand-written under another manager makes no write, pass after pass, and
// stays; one under the fleet controller's manager is removed, once.
func TestFleetStatusWriterRemovesOnlyItsOwnStaleConditions(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	ns := namespace(t, "fleet-stale")
	fleet := &v1alpha1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "f"},
		Spec: v1alpha1.LimiterFleetSpec{Replicas: ptr.To(int32(0))}}
	if err := k8s.Create(ctx, fleet); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteFleet(t, fleet) })
	key := client.ObjectKeyFromObject(fleet)
	read := func() *v1beta1.LimiterFleet {
		t.Helper()
		f := &v1beta1.LimiterFleet{}
		if err := k8s.Get(ctx, key, f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	eventually(t, time.Minute, "the operator writes the fleet's status", func() error {
		f := &v1beta1.LimiterFleet{}
		if err := k8s.Get(ctx, key, f); err != nil {
			return err
		}
		if condition(f.Status.Conditions, v1beta1.ReadyCondition) == nil || f.Status.ObservedGeneration != f.Generation {
			return fmt.Errorf("status %+v", f.Status)
		}
		return nil
	})
	applyStatus := func(manager string, st *v1beta1.LimiterFleetStatus) {
		t.Helper()
		body, err := json.Marshal(map[string]any{"apiVersion": v1beta1.GroupVersion.String(), "kind": "LimiterFleet",
			"metadata": map[string]any{"namespace": ns, "name": fleet.Name}, "status": st})
		if err != nil {
			t.Fatal(err)
		}
		if err := k8s.Status().Patch(ctx, &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fleet.Name}},
			client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(manager), client.ForceOwnership); err != nil {
			t.Fatal(err)
		}
	}
	hand := func(typ string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: "ByHand", LastTransitionTime: metav1.Now()}
	}
	// The writer's calls, counted where they reach the API server.
	var writes, other atomic.Int64
	wcfg := rest.CopyConfig(cfg)
	wcfg.Wrap(countWrites(&writes, &other))
	counted, err := client.New(wcfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	// A pass whose own part of the status is unchanged: next is latest.
	pass := func() {
		t.Helper()
		latest := read()
		if err := controllers.WriteFleetStatus(ctx, counted, latest, latest.DeepCopy(), controllers.FleetStatusFieldOwner); err != nil {
			t.Fatal(err)
		}
	}

	applyStatus("someone-else", &v1beta1.LimiterFleetStatus{Conditions: []metav1.Condition{hand("HandWritten")}})
	for range 3 {
		pass()
	}
	if n := writes.Load() + other.Load(); n != 0 {
		t.Errorf("another manager's condition made %d writes in 3 passes, want none", n)
	}
	if condition(read().Status.Conditions, "HandWritten") == nil {
		t.Error("another manager's condition was removed")
	}

	// Under the fleet controller's own manager, with what it writes, the
	// condition is its to remove: one write, then none.
	mine := controllers.OwnedFleetStatus(&read().Status, controllers.FleetStatusFieldOwner)
	mine.Conditions = append(mine.Conditions, hand("Programmed"))
	applyStatus(controllers.FleetStatusFieldOwner, mine)
	pass()
	// (The operator's own pass, were one to come first, removes it alike.)
	first := writes.Load()
	if first > 1 {
		t.Errorf("the fleet manager's stale condition made %d status writes, want 1", first)
	}
	pass()
	if n := writes.Load(); n != first {
		t.Errorf("%d status writes after the stale condition went, want none", n-first)
	}
	var have []string
	for _, c := range read().Status.Conditions {
		have = append(have, c.Type)
	}
	if slices.Contains(have, "Programmed") || !slices.Contains(have, "HandWritten") || !slices.Contains(have, v1beta1.ReadyCondition) {
		t.Errorf("conditions %v: want Programmed gone, HandWritten and Ready kept", have)
	}
}
