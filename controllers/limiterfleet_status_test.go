package controllers

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/observe"
)

// TestReadyFollowsTheOtherJobs: the fleet controller's Ready reports the
// first of RedisReady and AdminTLSReady (written by their controllers)
// that is not True, before SnapshotSynced; observedGeneration waits for a
// RedisReady of the fleet's generation.
func TestReadyFollowsTheOtherJobs(t *testing.T) {
	cond := func(typ string, status metav1.ConditionStatus, reason string, gen int64) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: reason + " message", ObservedGeneration: gen}
	}
	redisOK := cond(v1beta1.RedisReadyCondition, metav1.ConditionTrue, v1beta1.RedisNotManagedReason, 2)
	adminBad := cond(v1beta1.AdminTLSReadyCondition, metav1.ConditionFalse, v1beta1.ReconcileErrorReason, 2)
	for _, tc := range []struct {
		name       string
		conditions []metav1.Condition
		status     metav1.ConditionStatus
		reason     string
		observed   int64
	}{
		{"no RedisReady yet", nil, metav1.ConditionFalse, v1beta1.WaitingForRedisReason, 0},
		{"RedisReady of an older generation", []metav1.Condition{cond(v1beta1.RedisReadyCondition, metav1.ConditionTrue, v1beta1.RedisNotManagedReason, 1)},
			metav1.ConditionTrue, v1beta1.PodsSyncedReason, 0},
		{"all True", []metav1.Condition{redisOK, cond(v1beta1.AdminTLSReadyCondition, metav1.ConditionTrue, v1beta1.CertificateCurrentReason, 2)},
			metav1.ConditionTrue, v1beta1.PodsSyncedReason, 2},
		{"admin TLS failing", []metav1.Condition{redisOK, adminBad}, metav1.ConditionFalse, v1beta1.ReconcileErrorReason, 2},
		{"Redis first", []metav1.Condition{cond(v1beta1.RedisReadyCondition, metav1.ConditionFalse, v1beta1.HealingReason, 2), adminBad},
			metav1.ConditionFalse, v1beta1.HealingReason, 2},
	} {
		fleet := &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "f", Generation: 2}}
		fleet.Status.Conditions = tc.conditions
		// One ready pod, on the snapshot: SnapshotSynced is True.
		s := &fleetScope{fleet: fleet, compiled: true, version: "v1", endpoints: []string{"a:1"},
			acks: []observe.PodAck{{Addr: "a:1", Answered: true, Version: "v1"}}, complete: true}
		computeFleetStatus(fleet, s, nil)
		ready := meta.FindStatusCondition(fleet.Status.Conditions, v1beta1.ReadyCondition)
		if ready == nil || ready.Status != tc.status || ready.Reason != tc.reason {
			t.Errorf("%s: Ready %+v, want %s %s", tc.name, ready, tc.status, tc.reason)
		}
		if fleet.Status.ObservedGeneration != tc.observed {
			t.Errorf("%s: observedGeneration %d, want %d", tc.name, fleet.Status.ObservedGeneration, tc.observed)
		}
	}
}

// TestEachFleetStatusFieldHasOneOwner: the writers' parts of a fleet's
// status (ownedFleetStatus) share no field and no condition, and together
// are the whole status.
func TestEachFleetStatusFieldHasOneOwner(t *testing.T) {
	full := v1beta1.LimiterFleetStatus{ObservedGeneration: 3, Snapshot: &v1beta1.SnapshotStatus{}, Limiters: &v1beta1.LimitersStatus{},
		Redis: &v1beta1.RedisStatus{}, Regions: []v1beta1.RegionStatus{{Name: "eu"}}}
	for _, typ := range []string{v1beta1.ReadyCondition, v1beta1.SnapshotSyncedCondition, v1beta1.RedisReadyCondition,
		v1beta1.RedisDataLossCondition, v1beta1.AdminTLSReadyCondition, v1beta1.RegionsReachableCondition} {
		full.Conditions = append(full.Conditions, metav1.Condition{Type: typ})
	}
	var sum v1beta1.LimiterFleetStatus
	seen := map[string]string{}
	for _, owner := range []string{FleetStatusFieldOwner, RedisStatusFieldOwner, AdminTLSStatusFieldOwner, EnforcementFieldOwner} {
		part := ownedFleetStatus(&full, owner)
		for _, c := range part.Conditions {
			if prev, ok := seen[c.Type]; ok {
				t.Errorf("condition %s is both %s's and %s's", c.Type, prev, owner)
			}
			seen[c.Type] = owner
		}
		sum.Conditions = append(sum.Conditions, part.Conditions...)
		sum.ObservedGeneration += part.ObservedGeneration
		if part.Snapshot != nil {
			sum.Snapshot = part.Snapshot
		}
		if part.Limiters != nil {
			sum.Limiters = part.Limiters
		}
		if part.Redis != nil {
			sum.Redis = part.Redis
		}
		sum.Regions = append(sum.Regions, part.Regions...)
	}
	if len(sum.Conditions) != len(full.Conditions) || sum.ObservedGeneration != 3 || sum.Snapshot == nil ||
		sum.Limiters == nil || sum.Redis == nil || len(sum.Regions) != 1 {
		t.Errorf("the owners' parts add up to %+v, want %+v", sum, full)
	}
}
