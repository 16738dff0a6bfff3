package rediscluster

import (
	"crypto/tls"
	"fmt"
	"time"
)

// SlotCount is the number of hash slots in a Redis Cluster.
const SlotCount = 16384

// Member is one Redis node as the API server sees it: a pod of a shard's
// StatefulSet.
type Member struct {
	// Pod names the pod, for status and errors.
	Pod string
	// Shard is the shard the pod belongs to, 0-based.
	Shard int
	// Ordinal is the pod's StatefulSet ordinal; ordinal 0 is the shard's
	// master at bootstrap.
	Ordinal int
	// Addr is podIP:port, or "" while the pod has no IP.
	Addr string
	// Terminating is set once the pod is being deleted (a rollout, a
	// drain, kubectl delete): a master serving slots hands them to a
	// synced replica (CLUSTER FAILOVER) before it stops, so that clients
	// move on at once instead of waiting for the pod to come back.
	Terminating bool
}

// Spec is the cluster a fleet asks for, and what the caller persisted of the
// last pass.
type Spec struct {
	// Shards is the number of shards (masters).
	Shards int
	// ReplicasPerShard is the number of replicas of each master.
	ReplicasPerShard int
	// Members are the pods, any order. A member without an address is
	// waited for, and so is a pod the shards and replicas call for that is
	// not a member (deleted, not yet made again): no node is given up for
	// gone until every one of them answers.
	Members []Member
	// NodeTimeout is the cluster-node-timeout the nodes run with; it sets
	// how long a dead master may wait for its replica's own failover
	// (about 2x) before CLUSTER FAILOVER FORCE. 0 means 15s.
	NodeTimeout time.Duration
	// Username and Password authenticate every connection (AUTH [user]
	// pass) when Password is not empty, and MIGRATE's connections from
	// source to target nodes (AUTH2, or AUTH without a user). The user
	// needs OperatorACLRules.
	Username, Password string
	// TLS, when not nil, is how every connection is made: the nodes serve
	// TLS only (tls-port, port 0; and tls-cluster, so that MIGRATE between
	// them uses TLS too).
	TLS *tls.Config
	// Migration is the progress of a slot migration from the last pass
	// (Result.Migration, persisted in status), or nil.
	Migration *Migration
}

// Migration is the progress of a scale-out: the slot ranges still to move,
// in order. It is plain data so that the caller can persist it as JSON in
// status and hand it back in Spec.Migration. The slot being moved when a
// pass was cut short is found again from the nodes' MIGRATING/IMPORTING
// state, so no slot is left open.
type Migration struct {
	// Moves are the slot ranges still to move; the first is in progress.
	Moves []SlotMove `json:"moves"`
}

// SlotMove moves the slots First..Last (inclusive) from one shard to
// another. Shards, not node IDs, are recorded: a failover during the
// migration changes a shard's master, not the plan.
type SlotMove struct {
	First     int `json:"first"`
	Last      int `json:"last"`
	FromShard int `json:"fromShard"`
	ToShard   int `json:"toShard"`
}

// Slots is the number of slots the move covers.
func (m SlotMove) Slots() int { return m.Last - m.First + 1 }

// Operations Status.Operation takes.
const (
	OperationNone      = ""
	OperationWaiting   = "WaitingForNodes"
	OperationBootstrap = "Bootstrapping"
	OperationHealing   = "Healing"
	OperationHandOver  = "HandingOver"
	OperationMigrating = "MigratingSlots"
)

// Status is what the pass observed, for the fleet's status.redis.
type Status struct {
	// ClusterState is cluster_state from CLUSTER INFO of the members
	// ("ok", "fail"), or "" when no member answered. When the members
	// disagree, "fail" wins.
	ClusterState string
	// SlotsAssigned is the number of slots some master serves, as the
	// members agree.
	SlotsAssigned int
	// Primaries and Replicas list the members by role, sorted by pod.
	Primaries []NodeStatus
	Replicas  []NodeStatus
	// Unreachable lists the members that have no address yet or did not
	// answer (Link "unreachable"), sorted by pod.
	Unreachable []NodeStatus
	// Operation is what the pass did or waits for (Operation* constants).
	Operation string
	// WaitingFor names what keeps a pass that sent nothing from finding
	// the cluster converged ("pod a to connect to pod b"), else "".
	WaitingFor string
	// Lost are the masters lost while serving slots that do not answer
	// yet, by shard, with what serves their slots since.
	Lost []LostPrimary
}

// NodeStatus is one member's place in the cluster.
type NodeStatus struct {
	Pod    string
	NodeID string
	Addr   string
	// Shard is the member's shard in the Spec.
	Shard int
	// Role is "master" or "replica".
	Role string
	// Link is "connected" or "disconnected" as the other members see it,
	// or "unreachable" when the pass could not reach the member.
	Link string
	// Slots is the number of slots the member serves (masters).
	Slots int
	// MasterLink is a replica's master_link_status: "up" once it has
	// synced from its master, "down" before.
	MasterLink string
	// UsedMemory and MaxMemory are the member's used_memory and maxmemory
	// in bytes (INFO memory); MaxMemory 0 is unbounded.
	UsedMemory, MaxMemory int64
}

// Result is the outcome of one pass.
type Result struct {
	Status Status
	// Actions lists the mutating commands sent, human-readable, in order.
	// It is empty on a converged cluster.
	Actions []string
	// Migration is the slot migration still to do, or nil. Persist it and
	// pass it back in Spec.Migration.
	Migration *Migration
	// Converged is true when every member answered, every node agrees on
	// a full slot map, cluster_state is ok, every replica follows its
	// shard's master and has synced from it, and no migration is pending.
	Converged bool
	// RequeueAfter is when to run the next pass if nothing else triggers
	// one: soon while converging, 0 when converged.
	RequeueAfter time.Duration
	// DataLoss is non-empty when the pass assigned slots whose data was
	// provably gone (no member of their shard survives and no node claims
	// them). It names the slots and shards.
	DataLoss string
}

// Reasons a NodeError gives.
const (
	// ReasonUnreachable: no TCP connection, or no answer in time.
	ReasonUnreachable = "Unreachable"
	// ReasonAuthFailed: the node refused AUTH, or asked for it.
	ReasonAuthFailed = "AuthFailed"
	// ReasonGarbage: the node answered something that is not a Redis
	// reply, or a reply that makes no sense.
	ReasonGarbage = "Garbage"
	// ReasonNotClusterNode: the node runs without cluster-enabled.
	ReasonNotClusterNode = "NotClusterNode"
	// ReasonDuplicateID: the node has the node ID of another member, as
	// when a volume with nodes.conf was copied; it is left alone.
	ReasonDuplicateID = "DuplicateNodeID"
)

// NodeError is a member that the pass could not work with.
type NodeError struct {
	Pod    string
	Addr   string
	Reason string
	Err    error
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("redis node %s (%s): %s: %v", e.Pod, e.Addr, e.Reason, e.Err)
}

func (e *NodeError) Unwrap() error { return e.Err }

// ScaleInError rejects lowering the number of shards: slots would have to
// leave a shard, which this package does not do.
type ScaleInError struct {
	// Have is the number of shards that serve slots; Want is Spec.Shards.
	Have, Want int
}

func (e *ScaleInError) Error() string {
	return fmt.Sprintf("scale-in from %d to %d Redis shards is not supported: lowering shards would drop the slots of shards %d..%d; set shards back to %d",
		e.Have, e.Want, e.Want, e.Have-1, e.Have)
}

// SpecError is a Spec that cannot describe a cluster (e.g. fewer than 3
// shards, a member of a shard beyond Shards, two members with one address).
type SpecError struct{ Msg string }

func (e *SpecError) Error() string { return "invalid Redis Cluster spec: " + e.Msg }
