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
)

// redisScope carries one Redis pass's observations to the status.
type redisScope struct {
	fleet *v1beta1.LimiterFleet
	// redis is the Redis Cluster pass, for mode Cluster; nil when it did
	// not run to the end.
	redis *redisfleet.Scope
	// storeErr is why spec.store gives the limiters no store URL.
	storeErr error
	// acks are what the fleet's limiter pods last reported, of their store
	// too (read from the acknowledgement tracker, which the fleet
	// controller tells which pods to poll).
	acks []observe.PodAck
}

// computeRedisStatus sets RedisFleetReconciler's part of fleet.Status (see
// RedisStatusFieldOwner): status.redis, RedisReady and RedisDataLoss. It
// is the only place that part is decided. The pass's error, if any, makes
// RedisReady False with its reason, which Ready then reports.
func computeRedisStatus(fleet *v1beta1.LimiterFleet, s *redisScope, reconcileErr error) {
	redis := redisReadyCondition(fleet, s)
	switch {
	case isObjectInTheWay(reconcileErr):
		redis.Status, redis.Reason, redis.Message = metav1.ConditionFalse, v1beta1.ObjectInTheWayReason, reconcileErr.Error()
	case reconcileErr != nil:
		redis.Status, redis.Reason, redis.Message = metav1.ConditionFalse, v1beta1.ReconcileErrorReason, reconcileErr.Error()
	}
	meta.SetStatusCondition(&fleet.Status.Conditions, redis)
	redisfleet.SetDataLossCondition(fleet)
}

// redisReadyCondition is RedisReady, from the fleet's Redis mode, what the
// operator saw of its own Cluster, and what the limiter pods report. It
// sets fleet.Status.Redis too, and records a data loss of the Cluster.
func redisReadyCondition(fleet *v1beta1.LimiterFleet, s *redisScope) metav1.Condition {
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
			redis = *prev // the Redis pass did not run: keep what it last observed
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
func limitersReachRedis(redis *metav1.Condition, mode v1beta1.StoreType, s *redisScope) {
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
