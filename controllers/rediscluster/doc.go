// Package rediscluster forms, heals and scales a Redis Cluster from Go, with
// go-redis, against the node addresses the caller reads from the API server.
// It imports nothing from Kubernetes: the fleet controller turns its pods
// into a Spec, calls Reconcile once per pass, and copies the Result into the
// fleet's status.
//
// Reconcile is level-based. Each pass observes every member (PING, CLUSTER
// MYID, CLUSTER NODES, CLUSTER INFO), compares what it sees with the Spec,
// and sends the few commands that move the cluster one step closer:
//
//   - bootstrap: CLUSTER MEET, ADDSLOTSRANGE with the slots split evenly
//     across the shards' ordinal-0 pods, CLUSTER REPLICATE for the others;
//   - heal: re-MEET a node whose address changed (matched by node ID),
//     re-attach orphaned replicas or replicas of the wrong shard, CLUSTER
//     FAILOVER FORCE when a dead master's replica was not promoted within
//     about twice the node timeout, assign uncovered slots only when their
//     data is provably gone (reported in Result.DataLoss), and CLUSTER
//     FORGET node IDs that no member holds any more;
//   - scale out: new shards join empty, then slots move with SETSLOT
//     IMPORTING/MIGRATING, MIGRATE in batches and SETSLOT NODE, one slot at a
//     time; Result.Migration records the progress, and the caller passes it
//     back in Spec.Migration so that a restarted operator resumes.
//
// It never sends FLUSHALL, never sends CLUSTER RESET to a node that holds
// keys, and never forgets a node ID that a member still holds. A converged
// cluster gets no mutating command at all (Result.Actions is empty).
// Scale-in is rejected with a *ScaleInError.
//
// Every command has a deadline. A member that does not answer, answers
// something that is not RESP, or refuses AUTH is reported as a *NodeError
// naming the pod and the reason, never a panic or a hang.
package rediscluster
