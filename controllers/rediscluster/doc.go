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
//   - hand over: a master whose pod is terminating (Member.Terminating,
//     while its preStop sleep keeps it serving) has its synced replica
//     take its slots with a coordinated CLUSTER FAILOVER, so no count
//     fails or is lost when a pod is deleted, drained or rolled;
//   - heal: re-MEET a node whose address changed (matched by node ID),
//     re-attach orphaned replicas or replicas of the wrong shard, CLUSTER
//     FAILOVER FORCE one node timeout after a dead master was last heard
//     from (twice that when the operator still reaches it), TAKEOVER
//     instead when most masters are dead (no vote can be won) or when
//     FORCE did not work by four node timeouts; assign
//     uncovered slots only when their
//     data is provably gone (reported in Result.DataLoss), and CLUSTER
//     FORGET node IDs that no member holds any more;
//   - scale out: new shards join empty, then slots move with SETSLOT
//     IMPORTING/MIGRATING, MIGRATE in batches and SETSLOT NODE (empty slots
//     64 at a time, a slot with keys on its own); Result.Migration records
//     the progress, and the caller passes it back in Spec.Migration so that
//     a restarted operator resumes.
//
// It never sends FLUSHALL, never sends CLUSTER RESET to a node that holds
// keys, and never forgets a node ID that a member still holds. A converged
// cluster gets no mutating command at all (Result.Actions is empty).
// Scale-in is rejected with a *ScaleInError.
//
// Every command has a deadline. A member that does not answer, answers
// something that is not RESP, or refuses AUTH is reported as a *NodeError
// naming the pod and the reason, never a panic or a hang.
//
// # Using it from a controller
//
// Call Reconcile on every pass of the fleet:
//
//	res, err := rediscluster.Reconcile(ctx, spec, rediscluster.WithTracker(tracker))
//
// Then:
//
//   - Build Spec.Members from the shard StatefulSets' pods (shard, ordinal,
//     status.podIP:6379; "" while a pod has no IP), and pass back the
//     Migration persisted from the last Result.
//   - Persist res.Migration (JSON) and copy res.Status, res.Actions and
//     res.DataLoss into status, even when err is not nil.
//   - err: *SpecError and *ScaleInError are the user's to fix (a condition,
//     no requeue); errors that join *NodeError values (see errors.As) name
//     pods that could not be used: RedisReady=False with the reason, and
//     requeue after res.RequeueAfter like any pass.
//   - Requeue after res.RequeueAfter while it is not 0; res.Converged is
//     RedisReady=True.
//   - Hold one *Tracker per fleet for the life of the operator.
//
// The nodes are expected to run with cluster-enabled yes, their
// cluster-config-file and append-only file on the pod's volume,
// cluster-announce-ip set to the pod IP, and cluster-require-full-coverage
// no; with a password, the user Spec.Username with OperatorACLRules (or
// requirepass for the default user) and, for replicas, masteruser and
// masterauth of a user with ReplicaACLRules. With
// repl-diskless-sync-delay 0 replicas sync at once instead of after 5s,
// which is most of a bootstrap's time.
package rediscluster
