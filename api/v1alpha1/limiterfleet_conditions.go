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
// observes on every pass.
const (
	// FleetReady is True when the fleet enforces its snapshot: the snapshot
	// is written, every ready limiter pod has loaded it, at least one pod is
	// ready (or replicas is 0), and RedisReady is not False.
	FleetReady = "Ready"

	// FleetRedisReady is True when the store the limiters count in is usable:
	// always for None and External, which the operator does not manage; for
	// Cluster, when every slot is served and no node is near its maxmemory.
	FleetRedisReady = "RedisReady"

	// FleetSnapshotSynced is True when every ready limiter pod reports the
	// version of the snapshot in status.snapshot.
	FleetSnapshotSynced = "SnapshotSynced"
)

// Reasons of LimiterFleet conditions.
const (
	// ReasonSnapshotWritten: the snapshot ConfigMap holds the current snapshot.
	ReasonSnapshotWritten = "SnapshotWritten"
	// ReasonSnapshotTooLarge: the snapshot does not fit in a ConfigMap even
	// compressed; the previous one stays in place.
	ReasonSnapshotTooLarge = "SnapshotTooLarge"
	// ReasonPodsSynced: every ready limiter pod has loaded the snapshot.
	ReasonPodsSynced = "PodsSynced"
	// ReasonPodsNotSynced: some ready limiter pods have not loaded the
	// snapshot yet; the message says how many, such as "2/3 pods on snapshot
	// abc123".
	ReasonPodsNotSynced = "PodsNotSynced"
	// ReasonPodsNotReady: fewer limiter pods are ready than spec.replicas.
	ReasonPodsNotReady = "PodsNotReady"
	// ReasonNoReadyPods: no limiter pod is ready, so nothing is enforced.
	ReasonNoReadyPods = "NoReadyPods"
	// ReasonScaledToZero: spec.replicas is 0, so nothing is enforced.
	ReasonScaledToZero = "ScaledToZero"
	// ReasonRedisNotManaged: redis.mode is None; each pod counts in memory.
	ReasonRedisNotManaged = "RedisNotManaged"
	// ReasonRedisExternal: redis.mode is External; the operator does not
	// manage it, and every limiter pod that answered can use it.
	ReasonRedisExternal = "RedisExternal"
	// ReasonStoreUnreachable: limiter pods report that they can't use the
	// External Redis (a refused password, a TLS or network error, an open
	// breaker); the message names a pod and its error.
	ReasonStoreUnreachable = "StoreUnreachable"
	// ReasonClusterOK: the operator's Redis Cluster reports cluster_state
	// ok, every slot is served and every node follows the plan.
	ReasonClusterOK = "ClusterOK"
	// ReasonWaitingForNodes: some Redis pods have no IP yet or do not answer
	// PING yet.
	ReasonWaitingForNodes = "WaitingForNodes"
	// ReasonBootstrapping: the operator is forming the cluster.
	ReasonBootstrapping = "Bootstrapping"
	// ReasonHealing: the operator is repairing the cluster (re-meeting,
	// re-attaching, failing over, forgetting nodes).
	ReasonHealing = "Healing"
	// ReasonMigratingSlots: the operator is moving slots to new shards.
	ReasonMigratingSlots = "MigratingSlots"
	// ReasonDegraded: the cluster is not ok, or not every slot is served,
	// and the operator has nothing left to send yet (e.g. a failover is in
	// progress).
	ReasonDegraded = "Degraded"
	// ReasonNodeUnreachable: a Redis node does not answer.
	ReasonNodeUnreachable = "NodeUnreachable"
	// ReasonAuthFailed: a Redis node refused the password, or the password
	// Secret is missing.
	ReasonAuthFailed = "AuthFailed"
	// ReasonSecretNotOwned: a Secret the operator would write for the
	// fleet (such as <fleet>-redis-auth) exists and is not the fleet's; the
	// operator leaves it alone and says which.
	ReasonSecretNotOwned = "SecretNotOwned"
	// ReasonMemoryNearLimit: a Redis node uses 90% or more of its
	// maxmemory; beyond it, it evicts the counters nearest to expiry. The
	// message names the pod and its usage.
	ReasonMemoryNearLimit = "MemoryNearLimit"
	// ReasonInvalidReply: a Redis node answered something that is not a
	// Redis Cluster reply (or runs without cluster-enabled).
	ReasonInvalidReply = "InvalidReply"
	// ReasonDuplicateNodeID: two Redis pods hold one node ID (a volume
	// copied or restored onto another pod); the operator leaves both alone.
	ReasonDuplicateNodeID = "DuplicateNodeID"
	// ReasonScaleInRejected: spec.redis.shards is lower than the shards
	// that serve slots; the operator keeps every shard.
	ReasonScaleInRejected = "ScaleInRejected"
	// ReasonReconcileError: the operator failed to apply a child object; the
	// message says which and why.
	ReasonReconcileError = "ReconcileError"
)
