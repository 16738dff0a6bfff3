package controllers

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// reconcileRedis runs the fleet's Redis Cluster in mode Cluster, or
// deletes it (controllers/redisfleet), and keeps what the pass saw for the
// status.
func (r *LimiterFleetReconciler) reconcileRedis(ctx context.Context, s *fleetScope) error {
	pass, err := r.redis.Reconcile(ctx, s.fleet)
	s.redis, s.limiterAuth = pass.Scope, pass.LimiterAuth
	if pass.RequeueAfter > 0 {
		s.requeueAfter = pass.RequeueAfter
	}
	return err
}

func (r *LimiterFleetReconciler) secretReader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}
