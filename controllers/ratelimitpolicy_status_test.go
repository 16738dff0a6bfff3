package controllers_test

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
