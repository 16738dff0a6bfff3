package controllers

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/observe"
	"github.com/sluice-dev/sluice/controllers/resources"
	"github.com/sluice-dev/sluice/limiter/config"
)

// computeFleetStatus sets this controller's part of fleet.Status (see
// FleetStatusFieldOwner) from one pass's observations and the RedisReady
// that RedisFleetReconciler wrote. It is the only place that part is
// decided; conditions are recomputed from what was observed, never carried
// over, except that limiter counts wait until every ready pod has answered
// once (so an operator restart writes nothing that was already right).
// observedGeneration says that every job has seen the generation: it waits
// for RedisReady of this generation too.
func computeFleetStatus(fleet *v1beta1.LimiterFleet, s *fleetScope, reconcileErr error) {
	st := &fleet.Status
	if s.compiled {
		st.Snapshot = snapshotStatus(fleet, s)
	}
	observed := s.compiled && (s.complete || len(s.endpoints) == 0)
	if observed {
		var synced metav1.Condition
		st.Limiters, synced = snapshotSyncedCondition(fleet, s)
		meta.SetStatusCondition(&st.Conditions, synced)
	}
	redis := redisReadyOf(fleet)
	jobs := []metav1.Condition{redis}
	if admin := meta.FindStatusCondition(st.Conditions, v1beta1.AdminTLSReadyCondition); admin != nil {
		jobs = append(jobs, *admin)
	}
	ready := readyCondition(fleet.Generation, jobs, meta.FindStatusCondition(st.Conditions, v1beta1.SnapshotSyncedCondition), reconcileErr)
	if observed || reconcileErr != nil || meta.FindStatusCondition(st.Conditions, v1beta1.ReadyCondition) == nil {
		meta.SetStatusCondition(&st.Conditions, ready)
	}
	if reconcileErr == nil && redis.ObservedGeneration == fleet.Generation {
		st.ObservedGeneration = fleet.Generation
	}
}

// jobConditions are the conditions other controllers write that Ready
// follows, in the order it reports them: RedisReady (RedisFleetReconciler)
// and AdminTLSReady (AdminTLSReconciler).
var jobConditions = []string{v1beta1.RedisReadyCondition, v1beta1.AdminTLSReadyCondition}

// redisReadyOf is the fleet's RedisReady, as RedisFleetReconciler last
// wrote it, or Unknown before it has.
func redisReadyOf(fleet *v1beta1.LimiterFleet) metav1.Condition {
	if c := meta.FindStatusCondition(fleet.Status.Conditions, v1beta1.RedisReadyCondition); c != nil {
		return *c
	}
	return metav1.Condition{Type: v1beta1.RedisReadyCondition, Status: metav1.ConditionUnknown,
		Reason: v1beta1.WaitingForRedisReason, Message: "the Redis store has not been observed yet"}
}

// snapshotStatus describes the snapshot this pass compiled.
func snapshotStatus(fleet *v1beta1.LimiterFleet, s *fleetScope) *v1beta1.SnapshotStatus {
	return &v1beta1.SnapshotStatus{
		Version:       s.version,
		Policies:      int32(s.policies),
		ConfigMapName: resources.SnapshotConfigMapName(fleet),
		Bytes:         int64(len(s.document)),
		Compressed:    len(s.document) > config.MaxPlainDocument,
		Refused:       int32(s.refused),
	}
}

// snapshotSyncedCondition is SnapshotSynced, from the pods'
// acknowledgements, with the limiter counts it is computed from.
func snapshotSyncedCondition(fleet *v1beta1.LimiterFleet, s *fleetScope) (*v1beta1.LimitersStatus, metav1.Condition) {
	synced := metav1.Condition{Type: v1beta1.SnapshotSyncedCondition, ObservedGeneration: fleet.Generation}
	var acked int32
	for _, a := range s.acks {
		if a.Version == s.version {
			acked++
		}
	}
	ready := int32(len(s.endpoints))
	switch {
	case fleet.Spec.EffectiveReplicas() == 0:
		synced.Status, synced.Reason, synced.Message = metav1.ConditionFalse, v1beta1.ScaledToZeroReason, "the fleet has 0 replicas"
	case ready == 0:
		synced.Status, synced.Reason, synced.Message = metav1.ConditionFalse, v1beta1.NoReadyPodsReason, "no ready limiter pods"
	case acked < ready:
		synced.Status, synced.Reason = metav1.ConditionFalse, v1beta1.PodsNotSyncedReason
		synced.Message = fmt.Sprintf("%d/%d pods on snapshot %s%s", acked, ready, s.version, podErrors(s.acks))
	default:
		synced.Status, synced.Reason = metav1.ConditionTrue, v1beta1.PodsSyncedReason
		synced.Message = fmt.Sprintf("%d/%d pods on snapshot %s", acked, ready, s.version)
	}
	synced.Message += untrustedNote(s.untrusted)
	return &v1beta1.LimitersStatus{Ready: ready, Synced: acked}, synced
}

// readyCondition is Ready: the pass's error, else the first of the other
// jobs' conditions (jobConditions) that is not True, else SnapshotSynced
// (synced, nil before the pods were observed).
func readyCondition(gen int64, jobs []metav1.Condition, synced *metav1.Condition, reconcileErr error) metav1.Condition {
	ready := metav1.Condition{Type: v1beta1.ReadyCondition, ObservedGeneration: gen}
	var job *metav1.Condition
	for i := range jobs {
		if jobs[i].Status != metav1.ConditionTrue {
			job = &jobs[i]
			break
		}
	}
	switch {
	case isObjectInTheWay(reconcileErr):
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, v1beta1.ObjectInTheWayReason, reconcileErr.Error()
	case reconcileErr != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, v1beta1.ReconcileErrorReason, reconcileErr.Error()
	case job != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, job.Reason, job.Message
	case synced == nil || synced.Status != metav1.ConditionTrue:
		ready.Status = metav1.ConditionFalse
		ready.Reason, ready.Message = v1beta1.PodsNotSyncedReason, "waiting for limiter pods to load the snapshot"
		if synced != nil {
			ready.Reason, ready.Message = synced.Reason, synced.Message
		}
	default:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, v1beta1.PodsSyncedReason, synced.Message
	}
	return ready
}

// podErrors summarises pods' load errors for a condition message: the
// first maxListedPods.
func podErrors(acks []observe.PodAck) string {
	var errs []string
	for _, a := range acks {
		if a.Err != "" {
			errs = append(errs, a.Addr+": "+a.Err)
		}
	}
	if len(errs) == 0 {
		return ""
	}
	return "; " + listSome(errs)
}

// maxListedPods bounds the pods a condition message names.
const maxListedPods = 5

// listSome joins the first maxListedPods items, and counts the rest.
func listSome(items []string) string {
	out := strings.Join(items[:min(len(items), maxListedPods)], "; ")
	if len(items) > maxListedPods {
		out += fmt.Sprintf("; and %d more", len(items)-maxListedPods)
	}
	return out
}

// untrustedNote says which ready endpoints the operator ignores because
// they are not the fleet's own pods, or "" when none.
func untrustedNote(untrusted []string) string {
	if len(untrusted) == 0 {
		return ""
	}
	return fmt.Sprintf("; ignoring %d endpoints that are not the fleet's own pods: %s", len(untrusted), listSome(untrusted))
}
