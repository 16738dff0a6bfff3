package rediscluster

import (
	"context"
	"errors"
)

// Reconcile runs one level-based pass over the cluster spec describes and
// returns what it observed and did. An error means the pass could not go
// on (a *SpecError, *ScaleInError, or a *NodeError, possibly joined); the
// Result still carries what was observed.
func Reconcile(ctx context.Context, spec Spec, opts ...Option) (Result, error) {
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	_ = ctx
	return Result{}, errors.New("rediscluster: not implemented yet")
}
