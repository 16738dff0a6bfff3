package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers"
)

// A policy's status has two writers, the policy controller (conditions,
// fleets, observedGeneration) and the collector (enforcement). Each applies
// its own fields under its own field manager, so each can write from a copy
// that lacks the other's fields, or holds old values of them, and erase
// nothing of the other's; and a field a writer leaves out of its next write
// goes, which is how the collector drops hottest and unreadPods.
func TestStatusWritersOwnTheirFields(t *testing.T) {
	needSuite(t)
	// The operator's own writers would race the ones this test drives.
	stopOperator()
	t.Cleanup(func() {
		if err := startOperator(); err != nil {
			t.Error(err)
		}
	})
	ctx := context.Background()
	ns := namespace(t, "status-writers")
	pol := &v1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
		Spec: v1alpha1.RateLimitPolicySpec{Domain: "d", Descriptors: []v1alpha1.Descriptor{{Key: "user"}},
			Rate: v1alpha1.Rate{Limit: 10, Period: metav1.Duration{Duration: time.Minute}}},
	}
	if err := k8s.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), pol) })
	stale := pol.DeepCopy() // what a writer's cache may still hold: no status at all
	get := func() *v1alpha1.RateLimitPolicy {
		t.Helper()
		got := &v1alpha1.RateLimitPolicy{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pol), got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	accepted := metav1.Condition{Type: v1beta1.AcceptedCondition, Status: metav1.ConditionTrue, Reason: v1beta1.AcceptedReason,
		Message: "valid", ObservedGeneration: 1, LastTransitionTime: now}
	enforced := metav1.Condition{Type: v1beta1.EnforcedCondition, Status: metav1.ConditionFalse, Reason: v1beta1.NoFleetReason,
		Message: "no fleet", ObservedGeneration: 1, LastTransitionTime: now}

	// Each writes once, from the stale copy.
	if err := controllers.ApplyConditions(ctx, k8s, storedOne(stale), &v1alpha1.RateLimitPolicyStatus{ObservedGeneration: 1,
		Conditions: []metav1.Condition{accepted},
		Fleets:     []v1alpha1.FleetStatus{{Namespace: ns, Name: "f", SnapshotVersion: "v1", PodsSynced: ptr.To(int32(1)), PodsReady: ptr.To(int32(1))}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := controllers.ApplyEnforcement(ctx, k8s, storedOne(stale), &v1alpha1.EnforcementStatus{
		Allowed: ptr.To(int64(5)), Limited: ptr.To(int64(1)), ShadowLimited: ptr.To(int64(0)), FailedOpen: ptr.To(int64(0)),
		Window: &metav1.Duration{Duration: 5 * time.Minute}, UpdatedAt: &now,
		UnreadPods: []string{"192.0.2.1:8080: connection refused"},
		Hottest:    []v1alpha1.HotDescriptor{{Value: "user=a", Requests: 5, Limited: 1}}, HottestSince: &now,
	}); err != nil {
		t.Fatal(err)
	}
	st := get().Status
	if len(st.Conditions) != 1 || len(st.Fleets) != 1 || st.Enforcement == nil || ptr.Deref(st.Enforcement.Allowed, 0) != 5 ||
		len(st.Enforcement.UnreadPods) != 1 || len(st.Enforcement.Hottest) != 1 {
		t.Fatalf("after one write each: %+v", st)
	}

	// The controller writes again from the stale copy, with other
	// enforcement counts in it, as its next status may hold: its fleets
	// go, the collector's fields stay as the collector wrote them.
	if err := controllers.ApplyConditions(ctx, k8s, storedOne(stale), &v1alpha1.RateLimitPolicyStatus{ObservedGeneration: 1,
		Conditions:  []metav1.Condition{accepted, enforced},
		Enforcement: &v1alpha1.EnforcementStatus{Allowed: ptr.To(int64(999))},
	}); err != nil {
		t.Fatal(err)
	}
	st = get().Status
	if len(st.Conditions) != 2 || len(st.Fleets) != 0 {
		t.Errorf("the controller's second write: conditions %+v, fleets %+v; want 2 conditions and no fleet", st.Conditions, st.Fleets)
	}
	if st.Enforcement == nil || ptr.Deref(st.Enforcement.Allowed, 0) != 5 || len(st.Enforcement.UnreadPods) != 1 || len(st.Enforcement.Hottest) != 1 {
		t.Errorf("the controller's write changed status.enforcement: %+v", st.Enforcement)
	}

	// The collector writes again, without hottest and unreadPods: they go,
	// the controller's fields stay.
	if err := controllers.ApplyEnforcement(ctx, k8s, storedOne(stale), &v1alpha1.EnforcementStatus{
		Allowed: ptr.To(int64(7)), Limited: ptr.To(int64(1)), ShadowLimited: ptr.To(int64(0)), FailedOpen: ptr.To(int64(0)),
		Window: &metav1.Duration{Duration: 5 * time.Minute}, UpdatedAt: &now,
	}); err != nil {
		t.Fatal(err)
	}
	got := get()
	st = got.Status
	if e := st.Enforcement; e == nil || ptr.Deref(e.Allowed, 0) != 7 || e.UnreadPods != nil || e.Hottest != nil || e.HottestSince != nil {
		t.Errorf("the collector's second write: %+v, want allowed 7 without unreadPods and hottest", e)
	}
	if len(st.Conditions) != 2 || st.ObservedGeneration != 1 {
		t.Errorf("the collector's write changed the controller's fields: %+v", st)
	}

	// Each manager owns its fields of the status, and only those.
	owned := map[string][]string{}
	for _, mf := range got.ManagedFields {
		if mf.Subresource != "status" || mf.FieldsV1 == nil {
			continue
		}
		var fields map[string]map[string]json.RawMessage
		if err := json.Unmarshal(mf.FieldsV1.Raw, &fields); err != nil {
			t.Fatal(err)
		}
		owned[mf.Manager] = slices.Sorted(maps.Keys(fields["f:status"]))
	}
	want := map[string][]string{
		controllers.PolicyStatusFieldOwner: {"f:conditions", "f:observedGeneration"},
		controllers.EnforcementFieldOwner:  {"f:enforcement"},
	}
	if !maps.EqualFunc(owned, want, slices.Equal) {
		t.Errorf("status fields by manager: %v, want %v", owned, want)
	}
}

// A condition type the policy controller no longer writes, which its field
// manager owns (a previous release applied it, or someone under its name),
// goes at the controller's next write; Accepted, Enforced and Degraded
// stay, and so do the collector's status.enforcement and another
// manager's condition, which the controller does not own.
func TestPolicyControllerDropsConditionsItNoLongerWrites(t *testing.T) {
	needSuite(t)
	upgrade := stopTheOldOperator(t)
	ctx := context.Background()
	ns := namespace(t, "stale-conditions")
	fleet := &v1alpha1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "own"},
		Spec: v1alpha1.LimiterFleetSpec{Replicas: ptr.To(int32(0))}}
	if err := k8s.Create(ctx, fleet); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteFleet(t, fleet) })
	pol := &v1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
		Spec: v1alpha1.RateLimitPolicySpec{Domain: "stale-conditions", Descriptors: []v1alpha1.Descriptor{{Key: "user"}},
			Rate: v1alpha1.Rate{Limit: 10, Period: metav1.Duration{Duration: time.Minute}}},
	}
	if err := k8s.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), pol) })

	// What the previous release applied: its conditions, one of a type
	// this release does not write among them.
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	cond := func(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: "the previous release's",
			ObservedGeneration: pol.Generation, LastTransitionTime: now}
	}
	old := v1beta1.RateLimitPolicyStatus{ObservedGeneration: pol.Generation, Conditions: []metav1.Condition{
		cond(v1beta1.AcceptedCondition, metav1.ConditionTrue, v1beta1.AcceptedReason),
		cond(v1beta1.EnforcedCondition, metav1.ConditionFalse, v1beta1.SnapshotPendingReason),
		cond(v1beta1.DegradedCondition, metav1.ConditionFalse, v1beta1.StoreAvailableReason),
		cond("Programmed", metav1.ConditionTrue, "Programmed"),
	}}
	applyStatus := func(manager string, st v1beta1.RateLimitPolicyStatus) {
		t.Helper()
		body, err := json.Marshal(map[string]any{"apiVersion": v1beta1.GroupVersion.String(), "kind": "RateLimitPolicy",
			"metadata": map[string]any{"namespace": ns, "name": pol.Name}, "status": st})
		if err != nil {
			t.Fatal(err)
		}
		if err := k8s.Status().Patch(ctx, &v1beta1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pol.Name}},
			client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(manager), client.ForceOwnership); err != nil {
			t.Fatal(err)
		}
	}
	applyStatus(controllers.PolicyStatusFieldOwner, old)
	// Another manager's condition is not the policy controller's to remove.
	applyStatus("someone-else", v1beta1.RateLimitPolicyStatus{Conditions: []metav1.Condition{cond("HandWritten", metav1.ConditionTrue, "ByHand")}})
	if err := controllers.ApplyEnforcement(ctx, k8s, storedOne(pol), &v1alpha1.EnforcementStatus{
		Allowed: ptr.To(int64(5)), Limited: ptr.To(int64(1)), ShadowLimited: ptr.To(int64(0)), FailedOpen: ptr.To(int64(0)),
		Window: &metav1.Duration{Duration: 5 * time.Minute}, UpdatedAt: &now,
	}); err != nil {
		t.Fatal(err)
	}
	got := &v1beta1.RateLimitPolicy{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(pol), got); err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Conditions) != 5 || got.Status.Enforcement == nil || !controllers.OwnsUnwrittenCondition(got.ManagedFields) {
		t.Fatalf("the previous release's status is not there, or not its manager's: %+v %+v", got.Status, got.ManagedFields)
	}

	upgrade()
	droppedExtra(t, client.ObjectKeyFromObject(pol))

	// Once more, the controller's own status as it wrote it, once settled
	// on the fleet's snapshot, and the extra condition: nothing else
	// differs from what its next pass computes, which a namespace label
	// change brings.
	got = &v1beta1.RateLimitPolicy{}
	eventually(t, time.Minute, "the policy's status settles on its fleet's snapshot", func() error {
		f := &v1alpha1.LimiterFleet{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(fleet), f); err != nil {
			return err
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pol), got); err != nil {
			return err
		}
		enforced := meta.FindStatusCondition(got.Status.Conditions, v1beta1.EnforcedCondition)
		if f.Status.Snapshot == nil || len(got.Status.Fleets) != 1 || got.Status.Fleets[0].SnapshotVersion != f.Status.Snapshot.Version ||
			enforced == nil || strings.Contains(enforced.Message, "(none)") {
			return fmt.Errorf("fleet snapshot %+v, policy status %+v", f.Status.Snapshot, got.Status)
		}
		return nil
	})
	again := v1beta1.RateLimitPolicyStatus{ObservedGeneration: got.Status.ObservedGeneration, Fleets: got.Status.Fleets,
		Conditions: append(slices.DeleteFunc(got.Status.Conditions, func(c metav1.Condition) bool { return c.Type == "HandWritten" }),
			cond("Programmed", metav1.ConditionTrue, "Programmed"))}
	applyStatus(controllers.PolicyStatusFieldOwner, again)
	nsObj := &corev1.Namespace{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: ns}, nsObj); err != nil {
		t.Fatal(err)
	}
	nsObj.Labels = map[string]string{"stale-conditions": "relabelled"}
	if err := k8s.Update(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	droppedExtra(t, client.ObjectKeyFromObject(pol))
}

// droppedExtra waits until the policy has Accepted, Enforced, Degraded
// and HandWritten, the policy controller owns no other condition, and the
// collector's status.enforcement is there.
func droppedExtra(t *testing.T, key client.ObjectKey) {
	t.Helper()
	ctx := context.Background()
	eventually(t, time.Minute, "the condition no longer written goes, the rest stay", func() error {
		p := &v1beta1.RateLimitPolicy{}
		if err := k8s.Get(ctx, key, p); err != nil {
			return err
		}
		var have []string
		for _, c := range p.Status.Conditions {
			have = append(have, c.Type)
		}
		slices.Sort(have)
		if want := []string{v1beta1.AcceptedCondition, v1beta1.DegradedCondition, v1beta1.EnforcedCondition, "HandWritten"}; !slices.Equal(have, want) {
			return fmt.Errorf("conditions %v, want %v", have, want)
		}
		if controllers.OwnsUnwrittenCondition(p.ManagedFields) {
			return fmt.Errorf("the policy controller still owns a condition it does not write: %+v", p.ManagedFields)
		}
		if e := p.Status.Enforcement; e == nil || ptr.Deref(e.Allowed, 0) != 5 {
			return fmt.Errorf("status.enforcement %+v, want the collector's (allowed 5)", e)
		}
		return nil
	})
}
