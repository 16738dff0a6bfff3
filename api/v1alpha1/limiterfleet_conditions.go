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
	// always for None; for External, when every limiter pod that answers can
	// use it; for Cluster, when every slot is served and every limiter pod
	// that answers has reached the cluster since it last healed.
	FleetRedisReady = "RedisReady"

	// FleetSnapshotSynced is True when every ready limiter pod reports the
	// version of the snapshot in status.snapshot.
	FleetSnapshotSynced = "SnapshotSynced"

	// FleetRedisDataLoss, for redis.mode Cluster, is True from the moment
	// the operator finds slots whose keys are gone (a shard lost with every
	// replica: the limiters' counters there start again from zero) until a
	// person acknowledges it with AnnotationDataLossAcknowledged. It does not
	// make the fleet less Ready: the cluster serves every slot again.
	FleetRedisDataLoss = "RedisDataLoss"
)

// AnnotationDataLossAcknowledged on a LimiterFleet acknowledges its Redis
// data losses up to a time: RedisDataLoss turns False when the value, an
// RFC 3339 time, is at or after status.redis.dataLossTime. A later loss
// makes it True again. For example:
//
//	kubectl annotate limiterfleet NAME ratelimit.sluice.dev/data-loss-acknowledged="$(kubectl get limiterfleet NAME -o jsonpath='{.status.redis.dataLossTime}')" --overwrite
const AnnotationDataLossAcknowledged = "ratelimit.sluice.dev/data-loss-acknowledged"

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
	// External Redis or the operator's Redis Cluster (a refused password, a
	// TLS or network error, an open breaker, a node they can't reach); the
	// message names a pod and its error.
	ReasonStoreUnreachable = "StoreUnreachable"
	// ReasonWaitingForLimiters: the operator's Redis Cluster is ok again
	// after it changed (a node replaced, healed, failed over), and some
	// limiter pods have not reported reaching it since; the message names
	// them.
	ReasonWaitingForLimiters = "WaitingForLimiters"
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
	// ReasonDataLost (RedisDataLoss True): slots lost their keys and nobody
	// has acknowledged it yet; the message says which and when.
	ReasonDataLost = "DataLost"
	// ReasonDataLossAcknowledged (RedisDataLoss False): the last loss is
	// acknowledged.
	ReasonDataLossAcknowledged = "Acknowledged"
	// ReasonNoDataLoss (RedisDataLoss False): no key has been lost.
	ReasonNoDataLoss = "NoDataLoss"
)
