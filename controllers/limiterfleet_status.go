package controllers

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/observe"
	"github.com/sluice-dev/sluice/controllers/redisfleet"
	"github.com/sluice-dev/sluice/controllers/resources"
	"github.com/sluice-dev/sluice/limiter/config"
)

// computeFleetStatus sets fleet.Status from one pass's observations. It is
// the only place fleet status is decided; conditions are recomputed from
// what was observed, never carried over, except that limiter counts wait
// until every ready pod has answered once (so an operator restart writes
// nothing that was already right). Each condition has its function below.
func computeFleetStatus(fleet *v1beta1.LimiterFleet, s *fleetScope, reconcileErr error) {
	st := &fleet.Status
	if s.compiled {
		st.Snapshot = snapshotStatus(fleet, s)
	}
	redis := redisReadyCondition(fleet, s)
	meta.SetStatusCondition(&st.Conditions, redis)
	redisfleet.SetDataLossCondition(fleet)

	observed := s.compiled && (s.complete || len(s.endpoints) == 0)
	if observed {
		var synced metav1.Condition
		st.Limiters, synced = snapshotSyncedCondition(fleet, s)
		meta.SetStatusCondition(&st.Conditions, synced)
	}
	ready := readyCondition(fleet.Generation, redis, meta.FindStatusCondition(st.Conditions, v1beta1.SnapshotSyncedCondition), reconcileErr)
	if observed || reconcileErr != nil || meta.FindStatusCondition(st.Conditions, v1beta1.ReadyCondition) == nil {
		meta.SetStatusCondition(&st.Conditions, ready)
	}
	if reconcileErr == nil {
		st.ObservedGeneration = fleet.Generation
	}
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

// redisReadyCondition is RedisReady, from the fleet's Redis mode, what the
// operator saw of its own Cluster, and what the limiter pods report. It
// sets fleet.Status.Redis too, and records a data loss of the Cluster.
func redisReadyCondition(fleet *v1beta1.LimiterFleet, s *fleetScope) metav1.Condition {
	st := &fleet.Status
	redis := metav1.Condition{Type: v1beta1.RedisReadyCondition, ObservedGeneration: fleet.Generation}
	switch fleet.Spec.EffectiveStoreType() {
	case v1beta1.StoreExternal:
		redis.Status, redis.Reason = metav1.ConditionTrue, v1beta1.RedisExternalReason
		redis.Message = "limiters count in the external Redis at " + strings.Join(externalAddresses(fleet), ",")
		st.Redis = &v1beta1.RedisStatus{ClusterState: "external"}
	case v1beta1.StoreCluster:
		prev := meta.FindStatusCondition(st.Conditions, v1beta1.RedisReadyCondition)
		if s.redis == nil && prev != nil && prev.Reason != v1beta1.RedisNotManagedReason && prev.Reason != v1beta1.RedisExternalReason {
			redis = *prev // the Redis phase did not run: keep what it last observed
			break
		}
		prevRedis := st.Redis
		st.Redis, redis.Status, redis.Reason, redis.Message = redisfleet.Status(st.Redis, s.redis)
		redisfleet.RecordDataLoss(fleet, prevRedis, st.Redis, s.redis)
	default:
		redis.Status, redis.Reason = metav1.ConditionTrue, v1beta1.RedisNotManagedReason
		redis.Message = "store type Memory: each limiter pod counts in its own memory"
		st.Redis = &v1beta1.RedisStatus{ClusterState: "none"}
	}
	if s.storeErr != nil {
		redis.Status, redis.Message = metav1.ConditionFalse, s.storeErr.Error()
	}
	limitersReachRedis(&redis, fleet.Spec.EffectiveStoreType(), s)
	return redis
}

// limitersReachRedis turns a True RedisReady False when limiter pods can't
// reach it. The operator sees an External Redis only through the limiters.
// Its own Cluster it observes itself, but the limiters reach it on their
// own too (a replaced node's new IP, a DNS cache): RedisReady is not True
// while one reports it can't, nor, after the cluster changed, until each
// has checked it since.
func limitersReachRedis(redis *metav1.Condition, mode v1beta1.StoreType, s *fleetScope) {
	switch {
	case mode != v1beta1.StoreExternal && (mode != v1beta1.StoreCluster || redis.Status != metav1.ConditionTrue):
	case storeUnreachable(s.acks) != "":
		redis.Status, redis.Reason, redis.Message = metav1.ConditionFalse, v1beta1.StoreUnreachableReason, storeUnreachable(s.acks)
	case mode == v1beta1.StoreCluster && s.redis != nil:
		if msg := unconfirmed(s.acks, s.redis.SettledAt); msg != "" {
			redis.Status, redis.Reason, redis.Message = metav1.ConditionFalse, v1beta1.WaitingForLimitersReason, msg
		}
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

// readyCondition is Ready: the pass's error, else RedisReady when it is
// not True, else SnapshotSynced (synced, nil before the pods were
// observed).
func readyCondition(gen int64, redis metav1.Condition, synced *metav1.Condition, reconcileErr error) metav1.Condition {
	ready := metav1.Condition{Type: v1beta1.ReadyCondition, ObservedGeneration: gen}
	switch {
	case isObjectInTheWay(reconcileErr):
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, v1beta1.ObjectInTheWayReason, reconcileErr.Error()
	case reconcileErr != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, v1beta1.ReconcileErrorReason, reconcileErr.Error()
	case redis.Status != metav1.ConditionTrue:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, redis.Reason, redis.Message
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

// unconfirmed says which limiter pods have not checked their store since
// the Redis Cluster settled at settledAt, or "" when all have (or settledAt
// is zero: no change to confirm).
func unconfirmed(acks []observe.PodAck, settledAt time.Time) string {
	if settledAt.IsZero() {
		return ""
	}
	var waiting []string
	for _, a := range acks {
		if a.CheckedAt.Before(settledAt) {
			waiting = append(waiting, a.Addr)
		}
	}
	if len(waiting) == 0 {
		return ""
	}
	slices.Sort(waiting)
	return fmt.Sprintf("the Redis Cluster is ok again since %s; %d/%d limiter pods have not reached it since: %s",
		settledAt.UTC().Format(time.RFC3339), len(waiting), len(acks), strings.Join(waiting, ", "))
}

// storeUnreachable says which limiter pods report that their Redis does not
// answer, with the first one's error, or "" when all that answered can use it.
func storeUnreachable(acks []observe.PodAck) string {
	var bad []observe.PodAck
	for _, a := range acks {
		if a.Answered && a.StoreErr != "" {
			bad = append(bad, a)
		}
	}
	if len(bad) == 0 {
		return ""
	}
	slices.SortFunc(bad, func(a, b observe.PodAck) int { return strings.Compare(a.Addr, b.Addr) })
	return fmt.Sprintf("%d/%d limiter pods can't use Redis, and answer by each policy's failureMode: %s: %s",
		len(bad), len(acks), bad[0].Addr, bad[0].StoreErr)
}

// externalAddresses is spec.store.external.addresses, or none.
func externalAddresses(fleet *v1beta1.LimiterFleet) []string {
	if e := fleet.Spec.Store.External; e != nil {
		return e.Addresses
	}
	return nil
}
