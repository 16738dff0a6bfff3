package controllers

import (
	"context"
	"crypto/rand"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// The per-fleet key of the hottest values' keyed hash. A fleet that
// reports hottest descriptor values (spec.stats.topDescriptors) gets a
// Secret of 32 random bytes that it owns, generated once and kept; its
// limiter pods mount it at limiterwire.TopKKeyFile. Reported hashes then
// can't be reversed by hashing guesses without the key, which only the
// operator (which writes it) and the fleet's pods hold.

// +kubebuilder:rbac:groups="",resources=secrets,verbs=create

// TopKKeySecretName names the Secret of a fleet's hottest-values key.
func TopKKeySecretName(fleet *v1alpha1.LimiterFleet) string { return LimiterName(fleet) + "-topk-key" }

// wantsTopKKey reports whether the fleet's limiters report hottest values,
// and so need the key.
func wantsTopKKey(fleet *v1alpha1.LimiterFleet) bool {
	st := fleet.Spec.Stats
	return st != nil && ptr.Deref(st.TopDescriptors, 0) > 0
}

// BuildTopKKeySecret builds the Secret that holds key, the fleet's
// hottest-values key. Owner references are set by the controller.
func BuildTopKKeySecret(fleet *v1alpha1.LimiterFleet, key []byte) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: limiterMeta(fleet, TopKKeySecretName(fleet)),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{limiterwire.TopKKeyName: key},
	}
}

// limiterTopKKey mounts the key's Secret, read-only, and names its file in
// the environment, when the fleet reports hottest values; else nothing.
func limiterTopKKey(fleet *v1alpha1.LimiterFleet) ([]corev1.Volume, []corev1.VolumeMount, []corev1.EnvVar) {
	if !wantsTopKKey(fleet) {
		return nil, nil, nil
	}
	const name = "topk-key"
	return []corev1.Volume{{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  TopKKeySecretName(fleet),
			Items:       []corev1.KeyToPath{{Key: limiterwire.TopKKeyName, Path: limiterwire.TopKKeyName}},
			DefaultMode: ptr.To[int32](0o444),
		}}}},
		[]corev1.VolumeMount{{Name: name, MountPath: limiterwire.TopKKeyDir, ReadOnly: true}},
		[]corev1.EnvVar{{Name: limiterwire.TopKKeyFileEnv, Value: limiterwire.TopKKeyFile}}
}

// reconcileTopKKey makes sure a fleet that reports hottest values has its
// key Secret: it creates one with a fresh key, owned by the fleet, and
// never reads, changes or replaces one that exists. The operator may
// create Secrets but not read them: it never sees a key again, and
// remembers (per fleet UID) that the Secret exists, so that it asks the
// API server once per fleet and operator run. A Secret of that name that
// someone else created is mounted as it is: keep fleets in namespaces that
// only the platform team writes.
func (r *LimiterFleetReconciler) reconcileTopKKey(ctx context.Context, s *fleetScope) error {
	if !wantsTopKKey(s.fleet) {
		return nil
	}
	if r.topKKeys.has(s.fleet.UID) {
		return nil
	}
	key := make([]byte, limiterwire.TopKKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	desired := BuildTopKKeySecret(s.fleet, key)
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
