package rediscluster

import "context"

// Rescue runs only the failover phase of a pass: each dead master that is
// due is failed over to its answering replica (FORCE, or TAKEOVER when no
// majority of masters is left to vote), and nothing else is touched. It is
// safe to run beside a full pass of another operator pod: both pick the
// same replica (the most replicated, then the first by shard and
// ordinal), and a second FAILOVER to a replica that is already a master is
// refused by Redis and changes nothing. The operator's standby pods run it
// (see controllers' failover watch) so that a leader lost with the masters
// it would have failed over does not hold the cluster down until a
// standby leads. Result.RequeueAfter is set while a dead master awaits its
// promotion.
func Rescue(ctx context.Context, spec Spec, opts ...Option) (Result, error) {
	return Reconcile(ctx, spec, append(opts, func(o *options) { o.failoverOnly = true })...)
}
