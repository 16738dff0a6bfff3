package controllers

import (
	"context"
	"crypto/rand"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// The per-fleet key of the hottest values' keyed hash. A fleet that
// reports hottest descriptor values (spec.stats.topDescriptors) gets a
// Secret of 32 random bytes that it owns, generated once and kept; its
// limiter pods mount it at limiterwire.TopKKeyFile. Reported hashes then
// can't be reversed by hashing guesses without the key, which only the
// operator (which writes it) and the fleet's pods hold.

// +kubebuilder:rbac:groups="",resources=secrets,verbs=create

// reconcileTopKKey makes sure a fleet that reports hottest values has its
// key Secret: it creates one with a fresh key, owned by the fleet, and
// never reads, changes or replaces one that exists. The operator may
// create Secrets but not read them: it never sees a key again, and
// remembers (per fleet UID) that the Secret exists, so that it asks the
// API server once per fleet and operator run. A Secret of that name that
// someone else created is mounted as it is: keep fleets in namespaces that
// only the platform team writes.
func (r *LimiterFleetReconciler) reconcileTopKKey(ctx context.Context, s *fleetScope) error {
	if !resources.WantsTopKKey(s.fleet) {
		return nil
	}
	if r.topKKeys.has(s.fleet.UID) {
		return nil
	}
	key := make([]byte, limiterwire.TopKKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	desired := resources.BuildTopKKeySecret(s.fleet, key)
	if err := controllerutil.SetControllerReference(s.fleet, desired, r.Scheme); err != nil {
		return err
	}
	switch err := r.Create(ctx, desired); {
	case apierrors.IsAlreadyExists(err):
	case err != nil:
		return fmt.Errorf("creating Secret %s: %w", desired.Name, err)
	default:
		logf.FromContext(ctx).Info("Created the hottest-values key", "secret", desired.Name)
	}
	r.topKKeys.mark(s.fleet.UID)
	return nil
}
