package redisfleet

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/rediscluster"
)

// migrationFromStatus is the engine's view of status.redis.migration.
func migrationFromStatus(st *v1beta1.RedisStatus) *rediscluster.Migration {
	if st == nil || st.Migration == nil {
		return nil
	}
	m := &rediscluster.Migration{}
	for _, mv := range st.Migration.Moves {
		m.Moves = append(m.Moves, rediscluster.SlotMove{First: int(mv.First), Last: int(mv.Last), FromShard: int(mv.FromShard), ToShard: int(mv.ToShard)})
	}
	return m
}

// migrationToStatus is the engine's migration as status.redis.migration.
func migrationToStatus(m *rediscluster.Migration) *v1beta1.RedisMigration {
	if m == nil || len(m.Moves) == 0 {
		return nil
	}
	out := &v1beta1.RedisMigration{}
	for _, mv := range m.Moves {
		out.Moves = append(out.Moves, v1beta1.RedisSlotMove{First: int32(mv.First), Last: int32(mv.Last), FromShard: int32(mv.FromShard), ToShard: int32(mv.ToShard)})
	}
	return out
}

// maxRedisActions bounds status.redis.lastActions.
const maxRedisActions = 10

// Status is status.redis and the RedisReady condition's
// status, reason and message for a Cluster fleet, from one pass. prev is
// the status before the pass: only its lastActions carry over (they are
// history, not observation), and its migration when the pass did not run;
// RecordDataLoss carries the data loss.
func Status(prev *v1beta1.RedisStatus, rs *Scope) (*v1beta1.RedisStatus, metav1.ConditionStatus, string, string) {
	st := &v1beta1.RedisStatus{}
	if prev != nil {
		st.LastActions = prev.LastActions
		st.Migration = prev.Migration
	}
	if rs == nil {
		return st, metav1.ConditionFalse, v1beta1.WaitingForNodesReason, "the operator has not reached the Redis Cluster yet"
	}
	res := rs.Result
	obs := res.Status
	st.ClusterState = obs.ClusterState
	st.SlotsAssigned = int32(obs.SlotsAssigned)
	st.Primaries = nodeStatuses(obs.Primaries)
	st.Replicas = nodeStatuses(obs.Replicas)
	st.Operation = obs.Operation
	if !rs.Skipped {
		st.Migration = migrationToStatus(res.Migration)
	}
	for _, a := range res.Actions {
		st.LastActions = append(st.LastActions, v1beta1.RedisAction{Time: metav1.NewTime(rs.Now), Action: truncate(a, 512)})
	}
	if n := len(st.LastActions); n > maxRedisActions {
		st.LastActions = st.LastActions[n-maxRedisActions:]
	}

	summary := fmt.Sprintf("cluster_state %s, %d/%d slots assigned, %d primaries, %d replicas",
		orDash(obs.ClusterState), obs.SlotsAssigned, rediscluster.SlotCount, len(obs.Primaries), len(obs.Replicas))
	if obs.WaitingFor != "" {
		summary += "; waiting for " + obs.WaitingFor
	}
	if res.DataLoss != "" {
		summary += "; data lost: " + res.DataLoss
	}
	lost := lostSummary(obs.Lost, rs.Now)
	if lost != "" {
		lost += "; "
	}
	if rs.Err != nil {
		reason := redisErrorReason(rs)
		if reason == v1beta1.NodeUnreachableReason && failedOver(obs) {
			reason = v1beta1.FailedOverReason
		}
		return st, metav1.ConditionFalse, reason, truncate(lost+rs.Err.Error()+"; "+summary, 32768)
	}
	summary = lost + summary
	switch {
	case clusterOK(rs) && memoryNearLimit(obs) != "":
		return st, metav1.ConditionFalse, v1beta1.MemoryNearLimitReason, memoryNearLimit(obs) + "; " + summary
	case clusterOK(rs):
		return st, metav1.ConditionTrue, v1beta1.ClusterOKReason, summary
	case obs.Operation == rediscluster.OperationWaiting:
		return st, metav1.ConditionFalse, v1beta1.WaitingForNodesReason, summary
	case obs.Operation == rediscluster.OperationBootstrap:
		return st, metav1.ConditionFalse, v1beta1.BootstrappingReason, summary
	case obs.Operation == rediscluster.OperationHealing:
		return st, metav1.ConditionFalse, v1beta1.HealingReason, summary
	case obs.Operation == rediscluster.OperationMigrating:
		return st, metav1.ConditionFalse, v1beta1.MigratingSlotsReason, summary
	default:
		return st, metav1.ConditionFalse, v1beta1.DegradedReason, summary
	}
}

// redisErrorReason names why a pass failed.
func redisErrorReason(rs *Scope) string {
	if rs.Reason != "" {
		return rs.Reason
	}
	var scaleIn *rediscluster.ScaleInError
	if errors.As(rs.Err, &scaleIn) {
		return v1beta1.ScaleInRejectedReason
	}
	var nodeErr *rediscluster.NodeError
	if errors.As(rs.Err, &nodeErr) {
		return nodeErrorReason(nodeErr)
	}
	return v1beta1.DegradedReason
}

// nodeErrorReason maps the engine's reason for a node to a condition reason.
func nodeErrorReason(e *rediscluster.NodeError) string {
	switch e.Reason {
	case rediscluster.ReasonAuthFailed:
		return v1beta1.AuthFailedReason
	case rediscluster.ReasonGarbage, rediscluster.ReasonNotClusterNode:
		return v1beta1.InvalidReplyReason
	case rediscluster.ReasonDuplicateID:
		return v1beta1.DuplicateNodeIDReason
	default:
		return v1beta1.NodeUnreachableReason
	}
}

func nodeStatuses(in []rediscluster.NodeStatus) []v1beta1.RedisNodeStatus {
	var out []v1beta1.RedisNodeStatus
	for _, n := range in {
		out = append(out, v1beta1.RedisNodeStatus{
			Pod: n.Pod, Shard: int32(n.Shard), NodeID: n.NodeID, Address: n.Addr, Link: n.Link, Slots: int32(n.Slots),
			UsedMemoryBytes: n.UsedMemory, MaxMemoryBytes: n.MaxMemory,
		})
	}
	return out
}

// MemoryNearLimitRatio is the share of maxmemory a node may use before
// RedisReady turns False with reason MemoryNearLimit; the alert
// SluiceRedisMemoryNearLimit fires at the same ratio.
const MemoryNearLimitRatio = 0.9

// memoryNearLimit names the nodes that use MemoryNearLimitRatio or more of
// their maxmemory, or "" when none does.
func memoryNearLimit(obs rediscluster.Status) string {
	var near []string
	for _, n := range append(slices.Clone(obs.Primaries), obs.Replicas...) {
		if n.MaxMemory > 0 && float64(n.UsedMemory) >= MemoryNearLimitRatio*float64(n.MaxMemory) {
			near = append(near, fmt.Sprintf("%s uses %s of its maxmemory %s (%d%%)", n.Pod,
				binaryBytes(n.UsedMemory), binaryBytes(n.MaxMemory), 100*n.UsedMemory/n.MaxMemory))
		}
	}
	if len(near) == 0 {
		return ""
	}
	return strings.Join(near, ", ") + ": at maxmemory a node evicts the counters least recently used (allkeys-lru), so their limits restart early; " +
		"raise spec.store.cluster.resources.limits.memory (or spec.store.cluster.maxMemory) or spec.store.cluster.shards"
}

// binaryBytes writes n bytes in Ki, Mi or Gi with one decimal, as "7.5Mi".
func binaryBytes(n int64) string {
	for _, u := range []struct {
		unit  string
		shift uint
	}{{"Gi", 30}, {"Mi", 20}, {"Ki", 10}} {
		if n >= 1<<u.shift {
			return strings.TrimSuffix(strconv.FormatFloat(float64(n)/float64(int64(1)<<u.shift), 'f', 1, 64), ".0") + u.unit
		}
	}
	return strconv.FormatInt(n, 10)
}

// recordRedisMemory exports each node's used memory and maxmemory.
func recordRedisMemory(fleet *v1beta1.LimiterFleet, obs rediscluster.Status) {
	l := fleet.Namespace + "/" + fleet.Name
	redisUsedMemory.DeletePartialMatch(map[string]string{"fleet": l})
	redisMaxMemory.DeletePartialMatch(map[string]string{"fleet": l})
	for _, n := range append(slices.Clone(obs.Primaries), obs.Replicas...) {
		redisUsedMemory.WithLabelValues(l, n.Pod).Set(float64(n.UsedMemory))
		if n.MaxMemory > 0 {
			redisMaxMemory.WithLabelValues(l, n.Pod).Set(float64(n.MaxMemory))
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// truncate cuts s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// lostSummary tells each lost primary's failover: when it was last heard
// from, and which replica serves its slots, seen when and after what, or that
// none does yet.
func lostSummary(lost []rediscluster.LostPrimary, now time.Time) string {
	parts := make([]string, 0, len(lost))
	for _, lp := range lost {
		who := lp.Pod
		if who == "" {
			who = "node " + lp.NodeID
		}
		heard := "never heard from"
		if !lp.LastHeard.IsZero() {
			heard = "last heard from at " + lp.LastHeard.UTC().Format(stampMilli)
		}
		if lp.Heir == "" {
			ago := ""
			if !lp.LastHeard.IsZero() {
				ago = fmt.Sprintf(", %s ago", now.Sub(lp.LastHeard).Round(100*time.Millisecond))
			}
			parts = append(parts, fmt.Sprintf("shard %d: primary %s lost (%s%s), no replica serves its slots yet", lp.Shard, who, heard, ago))
			continue
		}
		by := "promoted by Redis's election"
		if lp.By != "" {
			by = "after the operator's CLUSTER FAILOVER " + lp.By
		}
		after := ""
		if !lp.LastHeard.IsZero() {
			after = fmt.Sprintf(", %s after", lp.HeirSince.Sub(lp.LastHeard).Round(100*time.Millisecond))
		}
		parts = append(parts, fmt.Sprintf("shard %d: primary %s lost (%s), %s serves its slots (seen at %s%s), %s",
			lp.Shard, who, heard, lp.Heir, lp.HeirSince.UTC().Format(stampMilli), after, by))
	}
	return strings.Join(parts, "; ")
}

// stampMilli is how condition messages write a time.
const stampMilli = "15:04:05.000Z"

// failedOver reports that primaries were lost and every slot is served
// again, by their replicas.
func failedOver(obs rediscluster.Status) bool {
	if len(obs.Lost) == 0 || obs.ClusterState != "ok" || obs.SlotsAssigned != rediscluster.SlotCount {
		return false
	}
	for _, lp := range obs.Lost {
		if lp.Heir == "" {
			return false
		}
	}
	return true
}
