/*
Copyright 2026 The Sluice Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

// Condition types of a LimiterFleet. The operator recomputes them from what it
// observes on every pass. Types are named <Type>Condition and reasons
// <Reason>Reason, as for RateLimitPolicy.
const (
	// ReadyCondition is True when the fleet enforces its snapshot: the
	// snapshot is written, every ready limiter pod has loaded it, at least
	// one pod is ready (or replicas is 0), and RedisReady is not False.
	ReadyCondition = "Ready"

	// RedisReadyCondition is True when the store the limiters count in is
	// usable: always for None and External, which the operator does not
	// manage; for Cluster, when every slot is served.
	RedisReadyCondition = "RedisReady"

	// SnapshotSyncedCondition is True when every ready limiter pod reports
	// the version of the snapshot in status.snapshot.
	SnapshotSyncedCondition = "SnapshotSynced"
)

// Reasons of LimiterFleet conditions.
const (
	// PodsSyncedReason: every ready limiter pod has loaded the snapshot.
	PodsSyncedReason = "PodsSynced"
	// PodsNotSyncedReason: some ready limiter pods have not loaded the
	// snapshot yet; the message says how many, such as "2/3 pods on snapshot
	// abc123".
	PodsNotSyncedReason = "PodsNotSynced"
	// NoReadyPodsReason: no limiter pod is ready, so nothing is enforced.
	NoReadyPodsReason = "NoReadyPods"
	// ScaledToZeroReason: spec.replicas is 0, so nothing is enforced.
	ScaledToZeroReason = "ScaledToZero"
	// RedisNotManagedReason: redis.mode is None; each pod counts in memory.
	RedisNotManagedReason = "RedisNotManaged"
	// RedisExternalReason: redis.mode is External; the operator does not
	// manage it, and every limiter pod that answered can use it.
	RedisExternalReason = "RedisExternal"
	// StoreUnreachableReason: limiter pods report that they can't use the
	// External Redis (a refused password, a TLS or network error, an open
	// breaker); the message names a pod and its error.
	StoreUnreachableReason = "StoreUnreachable"
	// ClusterOKReason: the operator's Redis Cluster reports cluster_state
	// ok, every slot is served and every node follows the plan.
	ClusterOKReason = "ClusterOK"
	// WaitingForNodesReason: some Redis pods have no IP yet or do not answer
	// PING yet.
	WaitingForNodesReason = "WaitingForNodes"
	// BootstrappingReason: the operator is forming the cluster.
	BootstrappingReason = "Bootstrapping"
	// HealingReason: the operator is repairing the cluster (re-meeting,
	// re-attaching, failing over, forgetting nodes).
	HealingReason = "Healing"
	// MigratingSlotsReason: the operator is moving slots to new shards.
	MigratingSlotsReason = "MigratingSlots"
	// DegradedReason: the cluster is not ok, or not every slot is served,
	// and the operator has nothing left to send yet (e.g. a failover is in
	// progress).
	DegradedReason = "Degraded"
	// NodeUnreachableReason: a Redis node does not answer.
	NodeUnreachableReason = "NodeUnreachable"
	// AuthFailedReason: a Redis node refused the password, or the password
	// Secret is missing.
	AuthFailedReason = "AuthFailed"
	// InvalidReplyReason: a Redis node answered something that is not a
	// Redis Cluster reply (or runs without cluster-enabled).
	InvalidReplyReason = "InvalidReply"
	// DuplicateNodeIDReason: two Redis pods hold one node ID (a volume
	// copied or restored onto another pod); the operator leaves both alone.
	DuplicateNodeIDReason = "DuplicateNodeID"
	// ScaleInRejectedReason: spec.redis.shards is lower than the shards
	// that serve slots; the operator keeps every shard.
	ScaleInRejectedReason = "ScaleInRejected"
	// ReconcileErrorReason: the operator failed to apply a child object; the
	// message says which and why.
	ReconcileErrorReason = "ReconcileError"
)
