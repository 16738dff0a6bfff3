package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// TestUpgradeDropsWhatTheOldStatusWriterLeft: the release before wrote a
// fleet's whole status with a merge patch, under the binary's default
// manager name, as a v1alpha1 client. After the upgrade the four writers
// apply their own fields; the status entry the old manager left is split
// among them, so the fields none sends any more go: snapshot.refused 3 → 0
// and compressed true → false (omitted when zero), RedisDataLoss on a
// Memory fleet, a status.redis field a Memory fleet has not, and a
// condition no writer of this release claims.
func TestUpgradeDropsWhatTheOldStatusWriterLeft(t *testing.T) {
	needSuite(t)
	// The old operator runs until the upgrade: none of this release's
	// writers has touched the fleet.
	upgrade := stopTheOldOperator(t)
	ctx := context.Background()
	ns := namespace(t, "status-migrate")
	fleet := &v1alpha1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "upgraded"}}
	if err := k8s.Create(ctx, fleet); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteFleet(t, fleet) })

	// The previous release's patchStatus: r.Status().Patch(ctx, next,
	// client.MergeFrom(latest)), with no field owner of its own.
	next := fleet.DeepCopy()
	now := metav1.Now()
	old := func(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: "written by the release before",
			ObservedGeneration: fleet.Generation, LastTransitionTime: now}
	}
	next.Status = v1alpha1.LimiterFleetStatus{
		ObservedGeneration: fleet.Generation,
		Snapshot:           &v1beta1.SnapshotStatus{Version: "old", Policies: 7, ConfigMapName: "upgraded-snapshot", Bytes: 2 << 20, Compressed: true, Refused: 3},
		Limiters:           &v1beta1.LimitersStatus{Ready: 2, Synced: 2},
		Redis:              &v1beta1.RedisStatus{ClusterState: "none", SlotsAssigned: 16384},
		Conditions: []metav1.Condition{
			old(v1beta1.ReadyCondition, metav1.ConditionTrue, v1beta1.PodsSyncedReason),
			old(v1beta1.SnapshotSyncedCondition, metav1.ConditionTrue, v1beta1.PodsSyncedReason),
			old(v1beta1.RedisReadyCondition, metav1.ConditionTrue, v1beta1.RedisNotManagedReason),
			old(v1beta1.RedisDataLossCondition, metav1.ConditionTrue, v1beta1.DataLostReason),
			old("Degraded", metav1.ConditionFalse, "Fine"),
		},
	}
	if err := k8s.Status().Patch(ctx, next, client.MergeFrom(fleet)); err != nil {
		t.Fatal(err)
	}
	oldManager := ""
	for _, e := range next.ManagedFields {
		if e.Operation == metav1.ManagedFieldsOperationUpdate && e.Subresource == "status" {
			oldManager = e.Manager
		}
	}
	if oldManager == "" || strings.HasPrefix(oldManager, "sluice-operator") {
		t.Fatalf("the old release's status entry is not there: %+v", next.ManagedFields)
	}
	t.Logf("the old release's status manager: %s", oldManager)

	// The upgrade: this release's operator starts.
	upgrade()
	eventually(t, 3*time.Minute, "the old release's status fields go, the writers' own stay", func() error {
		f := &v1beta1.LimiterFleet{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(fleet), f); err != nil {
			return err
		}
		return upgradedStatusProblem(f, oldManager)
	})
}

// upgradedStatusProblem says what in f's status is not yet as this
// release's writers write it, or nil.
func upgradedStatusProblem(f *v1beta1.LimiterFleet, oldManager string) error {
	st := &f.Status
	if s := st.Snapshot; s == nil || s.Refused != 0 || s.Compressed || s.Version == "old" || s.Policies != 0 {
		return fmt.Errorf("snapshot %+v, want this release's: version not old, no policy, refused 0, not compressed", s)
	}
	if st.Redis == nil || st.Redis.ClusterState != "none" || st.Redis.SlotsAssigned != 0 {
		return fmt.Errorf("redis %+v, want clusterState none alone", st.Redis)
	}
	for _, gone := range []string{v1beta1.RedisDataLossCondition, "Degraded"} {
		if c := meta.FindStatusCondition(st.Conditions, gone); c != nil {
			return fmt.Errorf("condition %s is still there: %+v", gone, *c)
		}
	}
	redis := meta.FindStatusCondition(st.Conditions, v1beta1.RedisReadyCondition)
	admin := meta.FindStatusCondition(st.Conditions, v1beta1.AdminTLSReadyCondition)
	synced := meta.FindStatusCondition(st.Conditions, v1beta1.SnapshotSyncedCondition)
	ready := meta.FindStatusCondition(st.Conditions, v1beta1.ReadyCondition)
	switch {
	case redis == nil || redis.Status != metav1.ConditionTrue || redis.Message == "written by the release before":
		return fmt.Errorf("RedisReady %+v, want this release's, True", redis)
	case admin == nil || admin.Status != metav1.ConditionTrue:
		return fmt.Errorf("AdminTLSReady %+v, want True", admin)
	case synced == nil || synced.Reason != v1beta1.NoReadyPodsReason:
		return fmt.Errorf("SnapshotSynced %+v, want False with NoReadyPods: the fleet has no pods", synced)
	case ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != synced.Reason || ready.Message != synced.Message:
		return fmt.Errorf("Ready %+v, want SnapshotSynced's reason and message", ready)
	case st.Limiters == nil || st.Limiters.Ready != 0 || st.ObservedGeneration != f.Generation:
		return fmt.Errorf("limiters %+v, observedGeneration %d of %d: want no pod, and this generation", st.Limiters, st.ObservedGeneration, f.Generation)
	}
	for _, e := range f.ManagedFields {
		if e.Manager == oldManager && e.Subresource == "status" {
			return fmt.Errorf("managedFields still hold %s's status entry: %s", oldManager, e.FieldsV1.Raw)
		}
	}
	return nil
}

// TestUpgradeDropsWhatAnOldPolicyStatusWriterLeft: a policy whose status an
// older release wrote by update (the release before applied it already, an
// earlier one did not) loses the fleets it no longer is served by once the
// policy controller hands that entry over: status.fleets is omitted when
// empty, so without the handover the old manager would keep it.
func TestUpgradeDropsWhatAnOldPolicyStatusWriterLeft(t *testing.T) {
	needSuite(t)
	upgrade := stopTheOldOperator(t)
	ctx := context.Background()
	ns := namespace(t, "status-migrate-policy")
	pol := &v1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
		Spec: v1alpha1.RateLimitPolicySpec{Domain: "migrate", Descriptors: []v1alpha1.Descriptor{{Key: "user"}},
			Rate: v1alpha1.Rate{Limit: 10, Period: metav1.Duration{Duration: time.Minute}}},
	}
	if err := k8s.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), pol) })
	pol.Status.ObservedGeneration = pol.Generation
	pol.Status.Fleets = []v1beta1.FleetStatus{{Namespace: ns, Name: "gone", SnapshotVersion: "old"}}
	if err := k8s.Status().Update(ctx, pol); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(pol.ManagedFields, func(e metav1.ManagedFieldsEntry) bool {
		return e.Operation == metav1.ManagedFieldsOperationUpdate && e.Subresource == "status"
	}) {
		t.Fatalf("the old release's status entry is not there: %+v", pol.ManagedFields)
	}
	upgrade()
	eventually(t, 3*time.Minute, "the old release's status.fleets goes", func() error {
		p := &v1beta1.RateLimitPolicy{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pol), p); err != nil {
			return err
		}
		for _, e := range p.ManagedFields {
			if e.Operation == metav1.ManagedFieldsOperationUpdate && e.Subresource == "status" {
				return fmt.Errorf("managedFields still hold %s's status entry: %s", e.Manager, e.FieldsV1.Raw)
			}
		}
		if len(p.Status.Fleets) != 0 || meta.FindStatusCondition(p.Status.Conditions, v1beta1.AcceptedCondition) == nil {
			return fmt.Errorf("status %+v, want Accepted and no fleet", p.Status)
		}
		return nil
	})
}

// stopTheOldOperator stops the suite's operator, as the old release runs
// until the upgrade, and returns the upgrade: the operator started again.
// The test's cleanup starts it when the test ended before its upgrade.
func stopTheOldOperator(t *testing.T) (upgrade func()) {
	stopOperator()
	started := false
	t.Cleanup(func() {
		if !started {
			if err := startOperator(); err != nil {
				t.Error(err)
			}
		}
	})
	return func() {
		t.Helper()
		if err := startOperator(); err != nil {
			t.Fatal(err)
		}
		started = true
	}
}
