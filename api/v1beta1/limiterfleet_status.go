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

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The status of a LimiterFleet is one definition for both versions:
// v1alpha1 names these types by alias, so the two can't drift and the
// conversion copies the status as it is.

// LimiterFleetStatus is the observed state of a LimiterFleet.
type LimiterFleetStatus struct {
	// observedGeneration is the metadata.generation the operator last
	// reconciled successfully.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions are Ready, RedisReady, SnapshotSynced and AdminTLSReady,
	// RedisDataLoss for a Redis Cluster, and RegionsReachable with
	// spec.regions.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// snapshot describes the fleet's current snapshot: the compiled policies
	// its limiter pods load.
	// +optional
	Snapshot *SnapshotStatus `json:"snapshot,omitempty"`

	// limiters counts the fleet's limiter pods.
	// +optional
	Limiters *LimitersStatus `json:"limiters,omitempty"`

	// redis describes the operator's Redis Cluster. Unset unless the fleet's
	// store is that cluster (v1beta1 spec.store.type, v1alpha1
	// spec.redis.mode, Cluster).
	// +optional
	Redis *RedisStatus `json:"redis,omitempty"`

	// regions is this region's view of each peer of spec.regions.peers, by
	// name, as the fleet's limiter pods report it on their admin plane
	// (GET /v1/admin/regions), summed over the pods the operator read.
	// Unset without spec.regions. The RegionsReachable condition sums it
	// up.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	Regions []RegionStatus `json:"regions,omitempty"`
}

// RegionStatus is what a fleet's limiter pods know of one peer region.
type RegionStatus struct {
	// name is the peer's region name (spec.regions.peers[].name).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// reachable is true when the last grant call of every pod read that
	// made one to the peer was answered.
	// +required
	Reachable bool `json:"reachable"`

	// reason is Reachable, NoExchangeYet (no pod has called the peer: no
	// Global key homed there was asked for yet), or why a pod's last call
	// was not answered: Unreachable (nothing answered at the endpoint),
	// Unauthorized (a certificate, or a lab token, was refused on either
	// side), UnknownRegion (the peer's fleet does not list this region) or
	// Refused.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason"`

	// message says more when the peer is not reachable, naming the limiter
	// pod that reported it, such as "10.0.0.7:8082: Post
	// https://us-east.example.com:8083/v1/peer/grant: connection refused".
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Message string `json:"message,omitempty"`

	// since is when reachable last changed, as the pod the reason is
	// from reports it.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`

	// lastExchange is the last time a pod's call to the peer was answered
	// (refusals included), the latest of the pods read.
	// +optional
	LastExchange *metav1.Time `json:"lastExchange,omitempty"`

	// keys is the number of Global keys homed at the peer that the pods
	// read track, summed over them.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Keys int64 `json:"keys,omitempty"`

	// heldUnits is the number of units the pods read hold now in grants
	// taken from the peer, summed over them.
	// +optional
	// +kubebuilder:validation:Minimum=0
	HeldUnits int64 `json:"heldUnits,omitempty"`

	// pods is the number of limiter pods whose view this sums.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Pods int32 `json:"pods,omitempty"`
}

// SnapshotStatus describes a fleet's current snapshot.
type SnapshotStatus struct {
	// version is the snapshot's content hash. Limiter pods report the version
	// they loaded.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Version string `json:"version,omitempty"`

	// policies is the number of policies in the snapshot.
	// +required
	// +kubebuilder:validation:Minimum=0
	Policies int32 `json:"policies"`

	// configMapName is the name of the ConfigMap, in the fleet's namespace,
	// that holds the snapshot.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ConfigMapName string `json:"configMapName,omitempty"`

	// bytes is the size of the snapshot document in bytes, before compression.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Bytes int64 `json:"bytes,omitempty"`

	// compressed is true when the document is stored gzip-compressed because
	// it is too large to store as it is.
	// +optional
	Compressed bool `json:"compressed,omitempty"`

	// refused is the number of accepted policies the fleet selects that the
	// snapshot leaves out because its ConfigMap would pass the API server's
	// 1 MiB limit: the newest ones, each with Accepted=False and reason
	// SnapshotFull. 0 when every selected policy fits.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Refused int32 `json:"refused,omitempty"`
}

// LimitersStatus counts a fleet's limiter pods.
type LimitersStatus struct {
	// ready is the number of ready limiter pods.
	// +required
	// +kubebuilder:validation:Minimum=0
	Ready int32 `json:"ready"`

	// synced is the number of ready limiter pods that have loaded the current
	// snapshot version.
	// +required
	// +kubebuilder:validation:Minimum=0
	Synced int32 `json:"synced"`
}

// RedisStatus describes the operator's Redis Cluster.
type RedisStatus struct {
	// clusterState is the cluster_state that CLUSTER INFO reports, "ok" or
	// "fail"; "none" or "external" when the operator does not manage Redis.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ClusterState string `json:"clusterState,omitempty"`

	// slotsAssigned is the number of hash slots, of 16384, that a primary
	// serves.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16384
	SlotsAssigned int32 `json:"slotsAssigned,omitempty"`

	// primaries are the cluster's primaries, sorted by pod.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=600
	Primaries []RedisNodeStatus `json:"primaries,omitempty"`

	// replicas are the cluster's replicas, sorted by pod.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=600
	Replicas []RedisNodeStatus `json:"replicas,omitempty"`

	// operation is what the operator is doing to the cluster: empty when it
	// is converged, else WaitingForNodes, Bootstrapping, Healing or
	// MigratingSlots.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Operation string `json:"operation,omitempty"`

	// migration is the slot migration of a scale-out still to do. The
	// operator resumes it from here after a restart.
	// +optional
	Migration *RedisMigration `json:"migration,omitempty"`

	// lastActions are the last mutating commands the operator sent to the
	// cluster, newest last, at most 10.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	LastActions []RedisAction `json:"lastActions,omitempty"`

	// dataLoss, when set, says which slots lost their keys, newest first:
	// slots the operator assigned afresh because no node of their shard
	// survived. It is kept after the cluster heals, until the next loss
	// replaces it; the RedisDataLoss condition is True until the loss is
	// acknowledged (the ratelimit.sluice.dev/data-loss-acknowledged
	// annotation).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	DataLoss string `json:"dataLoss,omitempty"`

	// dataLossTime is when the operator last found keys lost (dataLoss).
	// +optional
	DataLossTime *metav1.Time `json:"dataLossTime,omitempty"`
}

// RedisNodeStatus is one Redis node's place in the cluster.
type RedisNodeStatus struct {
	// pod is the name of the node's pod.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod"`

	// shard is the shard the pod belongs to, from 0.
	// +required
	// +kubebuilder:validation:Minimum=0
	Shard int32 `json:"shard"`

	// nodeID is the node's Redis Cluster ID, empty until it answers.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	NodeID string `json:"nodeID,omitempty"`

	// address is the node's podIP:port.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Address string `json:"address,omitempty"`

	// link is "connected" or "disconnected" as the other nodes see it, or
	// "unreachable" when the operator could not reach the node.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Link string `json:"link,omitempty"`

	// slots is the number of hash slots the node serves (primaries).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16384
	Slots int32 `json:"slots,omitempty"`

	// usedMemoryBytes is the node's used_memory, in bytes, as it last
	// answered INFO memory.
	// +optional
	// +kubebuilder:validation:Minimum=0
	UsedMemoryBytes int64 `json:"usedMemoryBytes,omitempty"`

	// maxMemoryBytes is the node's maxmemory, in bytes; 0 means unbounded.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxMemoryBytes int64 `json:"maxMemoryBytes,omitempty"`
}

// RedisMigration is the progress of a scale-out: the slot ranges still to
// move, the first in progress.
type RedisMigration struct {
	// moves are the slot ranges still to move.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4096
	Moves []RedisSlotMove `json:"moves"`
}

// RedisSlotMove moves slots first..last from one shard to another.
type RedisSlotMove struct {
	// first is the first slot of the range.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16383
	First int32 `json:"first"`

	// last is the last slot of the range, inclusive.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16383
	Last int32 `json:"last"`

	// fromShard is the shard the slots leave.
	// +required
	// +kubebuilder:validation:Minimum=0
	FromShard int32 `json:"fromShard"`

	// toShard is the shard the slots join.
	// +required
	// +kubebuilder:validation:Minimum=0
	ToShard int32 `json:"toShard"`
}

// RedisAction is one mutating command the operator sent to the cluster.
type RedisAction struct {
	// time is when the operator sent it.
	// +required
	Time metav1.Time `json:"time"`

	// action says what was sent and to whom, such as "CLUSTER MEET
	// 10.0.0.7:6379 on edge-redis-0-0".
	// +required
	// +kubebuilder:validation:MaxLength=512
	Action string `json:"action"`
}
