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

package redisfleet

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// generatedPassword matches a password the operator generated (or one as
// strong): it keeps those, and replaces anything else in its Secret.
var generatedPassword = regexp.MustCompile(`^[A-Za-z0-9_-]{32,}$`)

// newPassword is 32 random bytes, base64url: 43 characters.
func newPassword() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// RedisAuthHash is a short hash of the users file, for the pod template.
func RedisAuthHash(secret *corev1.Secret) string {
	sum := sha256.Sum256(secret.Data[resources.RedisUsersKey])
	return hex.EncodeToString(sum[:8])
}

// RedisLimiterAuthHash is a short HMAC-SHA-256 of the limiters' user line
// in the auth Secret's users file (which holds the SHA-256 of their
// password), keyed by the operator's password. It changes with the
// limiters' password, and it lets nobody who can read the Deployment test
// guesses of a password that a user chose: the key is only in the Secret.
// "" when the Secret has no such line.
func RedisLimiterAuthHash(secret *corev1.Secret) string {
	prefix := "user " + resources.RedisLimiterUser + " "
	for line := range strings.SplitSeq(string(secret.Data[resources.RedisUsersKey]), "\n") {
		if strings.HasPrefix(line, prefix) {
			mac := hmac.New(sha256.New, secret.Data[resources.RedisOperatorPasswordKey])
			mac.Write([]byte(line))
			return hex.EncodeToString(mac.Sum(nil)[:8])
		}
	}
	return ""
}

// errSecretNotOwned is a Secret in the way of one the operator writes.
type errSecretNotOwned struct{ namespace, name, fleet string }

func (e errSecretNotOwned) Error() string {
	return fmt.Sprintf("Secret %s/%s exists and is not controlled by LimiterFleet %s: the operator does not take it over; delete or rename it",
		e.namespace, e.name, e.fleet)
}

// reconcileRedisAuth makes sure the fleet's auth Secret exists and is
// current, and returns it. It keeps the passwords it finds there, fills in
// any that are missing, and takes the limiters' from store.cluster.auth's Secret
// when set. Secrets are read by name through the API reader and never
// cached or listed. A Secret of that name that the fleet does not control
// is left alone (errSecretNotOwned).
func (r *Provisioner) reconcileRedisAuth(ctx context.Context, fleet *v1beta1.LimiterFleet) (*corev1.Secret, error) {
	existing := &corev1.Secret{}
	key := client.ObjectKey{Namespace: fleet.Namespace, Name: resources.RedisAuthSecretName(fleet)}
	err := r.secretReader().Get(ctx, key, existing)
	switch {
	case apierrors.IsNotFound(err):
		existing = nil
	case err != nil:
		return nil, fmt.Errorf("reading Secret %s: %w", key, err)
	case !metav1.IsControlledBy(existing, fleet):
		return nil, errSecretNotOwned{key.Namespace, key.Name, fleet.Name}
	}
	keep := func(k string) string {
		if existing != nil && generatedPassword.Match(existing.Data[k]) {
			return string(existing.Data[k])
		}
		return newPassword()
	}
	pw := resources.RedisPasswords{Operator: keep(resources.RedisOperatorPasswordKey), Replication: keep(resources.RedisReplicationPasswordKey)}
	if fleet.Spec.RedisAuth() != nil {
		if pw.Limiter, err = r.redisPassword(ctx, fleet); err != nil {
			return nil, err
		}
	} else {
		pw.Limiter = keep(resources.RedisLimiterPasswordKey)
	}
	desired := resources.BuildRedisAuthSecret(fleet, pw)
	if err := controllerutil.SetControllerReference(fleet, desired, r.Scheme); err != nil {
		return nil, err
	}
	if existing == nil {
		logf.FromContext(ctx).Info("Creating the Redis auth Secret", "secret", key)
		if err := r.Create(ctx, desired); err != nil {
			return nil, fmt.Errorf("creating Secret %s: %w", key, err)
		}
		return desired, nil
	}
	if maps.EqualFunc(existing.Data, desired.Data, func(a, b []byte) bool { return string(a) == string(b) }) &&
		subset(desired.Labels, existing.Labels) {
		return existing, nil
	}
	logf.FromContext(ctx).Info("Updating the Redis auth Secret", "secret", key)
	existing.Data = desired.Data
	existing.Labels = mergeStrings(existing.Labels, desired.Labels)
	if err := r.Update(ctx, existing); err != nil {
		return nil, fmt.Errorf("updating Secret %s: %w", key, err)
	}
	return existing, nil
}
