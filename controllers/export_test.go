package controllers

import (
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
)

// The two writers of a RateLimitPolicy's status, for the tests of package
// controllers_test that run them against the API server.
var (
	ApplyConditions  = applyConditions
	ApplyEnforcement = applyEnforcement
)

// IndexPolicies adds the policy controller's indexes to a cache.
var IndexPolicies = indexPolicies

// PolicyMaps returns how the policy controller maps a fleet event and a pod
// acknowledgement (which names its fleet alone) to policies, reading
// through c, whose cache holds IndexPolicies' indexes.
func PolicyMaps(c client.Client) (fleetEvent, ackEvent handler.MapFunc) {
	r := &RateLimitPolicyReconciler{Client: c}
	return r.policiesOfFleet, r.policiesOfAckedFleet
}
