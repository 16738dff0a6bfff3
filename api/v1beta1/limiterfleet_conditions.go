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

package v1beta1

// Condition types of a LimiterFleet. The operator recomputes them from what it
// observes on every pass. Types are named <Type>Condition and reasons
// <Reason>Reason, as for RateLimitPolicy.
const (
	// ReadyCondition is True when the fleet enforces its snapshot: the snapshot
	// is written, every ready limiter pod has loaded it, at least one pod is
	// ready (or replicas is 0), RedisReady is True and AdminTLSReady is not
	// False.
	ReadyCondition = "Ready"

	// RedisReadyCondition is True when the store the limiters count in is usable:
	// always for None; for External, when every limiter pod that answers can
	// use it; for Cluster, when every slot is served and every limiter pod
	// that answers has reached the cluster since it last healed, and no node is
	// near its maxmemory.
	RedisReadyCondition = "RedisReady"

	// SnapshotSyncedCondition is True when every ready limiter pod reports the
	// version of the snapshot in status.snapshot.
	SnapshotSyncedCondition = "SnapshotSynced"

	// AdminTLSReadyCondition is True when the fleet's admin plane CA and
	// serving certificate are current and the operator trusts that CA
	// (reason CertificateCurrent); False (ReconcileError, the message
	// saying why) when they could not be read or written. Ready is False
	// while it is.
	AdminTLSReadyCondition = "AdminTLSReady"

	// RedisDataLossCondition, for store.type Cluster, is True from the moment
	// the operator finds slots whose keys are gone (a shard lost with every
	// replica: the limiters' counters there start again from zero) until a
	// person acknowledges it with AnnotationDataLossAcknowledged. It does not
	// make the fleet less Ready: the cluster serves every slot again.
	RedisDataLossCondition = "RedisDataLoss"

	// RegionsReachableCondition, for a fleet with spec.regions,
	// is True when every peer region that the fleet's limiter pods have
	// called answered their last grant call, False (reason PeerUnreachable,
	// PeerUnauthorized, PeerUnknownRegion or PeerRefused, the message
	// naming the peer and the pod) when a call was not, and Unknown
	// (NoExchangeYet) while no pod has called some peer yet, or no pod
	// could be read (PodsUnread). A region that can't reach a peer keeps
	// limiting from its partition share; status.regions has each peer.
	RegionsReachableCondition = "RegionsReachable"
)

// Reasons of RegionsReachable.
const (
	// PeersReachableReason: every peer answered the last grant call.
	PeersReachableReason = "PeersReachable"
	// PeerUnreachableReason: nothing answered at a peer's endpoint.
	PeerUnreachableReason = "PeerUnreachable"
	// PeerUnauthorizedReason: a token was refused: this region's token for
	// the peer (peers[].credentials) or the peer's for this region (auth).
	PeerUnauthorizedReason = "PeerUnauthorized"
	// PeerUnknownRegionReason: the peer's fleet does not list this region
	// among its peers.
	PeerUnknownRegionReason = "PeerUnknownRegion"
	// PeerRefusedReason: the peer refused the call otherwise (a policy not
	// Global there, a peer counting in memory).
	PeerRefusedReason = "PeerRefused"
	// NoExchangeYetReason: no limiter pod has called some peer yet (no
	// Global key homed there was asked for), and none failed.
	NoExchangeYetReason = "NoExchangeYet"
	// PodsUnreadReason: no limiter pod's view of its peers could be read.
	PodsUnreadReason = "PodsUnread"
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
	// PodsSyncedReason: every ready limiter pod has loaded the snapshot.
	PodsSyncedReason = "PodsSynced"
	// PodsNotSyncedReason: some ready limiter pods have not loaded the
	// snapshot yet; the message says how many, such as "2/3 pods on snapshot
	// abc123".
	PodsNotSyncedReason = "PodsNotSynced"
	// NoReadyPodsReason: no limiter pod is ready, so nothing is enforced.
	NoReadyPodsReason = "NoReadyPods"
	// ScaledToZeroReason: spec.limiters.replicas is 0, so nothing is enforced.
	ScaledToZeroReason = "ScaledToZero"
	// RedisNotManagedReason: store.type is Memory; each pod counts in memory.
	RedisNotManagedReason = "RedisNotManaged"
	// RedisExternalReason: store.type is External; the operator does not
	// manage it, and every limiter pod that answered can use it.
	RedisExternalReason = "RedisExternal"
	// StoreUnreachableReason: limiter pods report that they can't use the
	// External Redis or the operator's Redis Cluster (a refused password, a
	// TLS or network error, an open breaker, a node they can't reach); the
	// message names a pod and its error.
	StoreUnreachableReason = "StoreUnreachable"
	// WaitingForLimitersReason: the operator's Redis Cluster is ok again
	// after it changed (a node replaced, healed, failed over), and some
	// limiter pods have not reported reaching it since; the message names
	// them.
	WaitingForLimitersReason = "WaitingForLimiters"
	// WaitingForRedisReason: the fleet's Redis store has not been observed
	// yet (RedisReady is not written); Ready says so until it is.
	WaitingForRedisReason = "WaitingForRedis"
	// CertificateCurrentReason: the admin plane's CA and certificate are
	// current (AdminTLSReady).
	CertificateCurrentReason = "CertificateCurrent"
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
	// FailedOverReason: primaries were lost and their replicas serve every
	// slot again; the lost nodes do not answer yet (the message says when
	// each was last heard from and when its replica took over).
	FailedOverReason = "FailedOver"
	// AuthFailedReason: a Redis node refused the password, or a Secret the
	// operator needs (store.*.auth's, or store.*.tls's CA) is missing or
	// unusable.
	AuthFailedReason = "AuthFailed"
	// SecretNotOwnedReason: a Secret the operator would write for the
	// fleet (such as <fleet>-redis-auth) exists and is not the fleet's; the
	// operator leaves it alone and says which.
	SecretNotOwnedReason = "SecretNotOwned"
	// MemoryNearLimitReason: a Redis node uses 90% or more of its
	// maxmemory; beyond it, it evicts the counters nearest to expiry. The
	// message names the pod and its usage.
	MemoryNearLimitReason = "MemoryNearLimit"
	// InvalidReplyReason: a Redis node answered something that is not a
	// Redis Cluster reply (or runs without cluster-enabled).
	InvalidReplyReason = "InvalidReply"
	// DuplicateNodeIDReason: two Redis pods hold one node ID (a volume
	// copied or restored onto another pod); the operator leaves both alone.
	DuplicateNodeIDReason = "DuplicateNodeID"
	// ScaleInRejectedReason: spec.store.cluster.shards is lower than the shards
	// that serve slots; the operator keeps every shard.
	ScaleInRejectedReason = "ScaleInRejected"
	// ReconcileErrorReason: the operator failed to apply a child object; the
	// message says which and why.
	ReconcileErrorReason = "ReconcileError"
	// ObjectInTheWayReason: an object the fleet would own (its snapshot
	// ConfigMap, a Service, the Deployment...) already exists and is not
	// controlled by the fleet. The operator leaves it alone; the message
	// names it.
	ObjectInTheWayReason = "ObjectInTheWay"
	// DataLostReason (RedisDataLoss True): slots lost their keys and nobody
	// has acknowledged it yet; the message says which and when.
	DataLostReason = "DataLost"
	// DataLossAcknowledgedReason (RedisDataLoss False): the last loss is
	// acknowledged.
	DataLossAcknowledgedReason = "Acknowledged"
	// NoDataLossReason (RedisDataLoss False): no key has been lost.
	NoDataLossReason = "NoDataLoss"
)
