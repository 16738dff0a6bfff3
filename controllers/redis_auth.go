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

package controllers

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

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/controllers/rediscluster"
	"github.com/sluice-dev/sluice/internal/redisacl"
)

// The users of the operator's Redis Cluster. Every node runs with the
// default user off, so a client that does not authenticate can run
// nothing, and three users whose rules come from the code that uses them:
//
//   - RedisLimiterUser, for the limiters: the store's commands and its
//     scripts' on its own keys (internal/redisacl.LimiterRules, which
//     a test of limiter/store/redis checks against its scripts). It can't
//     flush, reconfigure, reset, shut down or list keys.
//   - RedisOperatorUser, for the operator's cluster engine
//     (rediscluster.OperatorACLRules).
//   - RedisReplicationUser, which replicas authenticate to their primary as
//     (masteruser): PSYNC, REPLCONF and PING.
//
// The passwords live in the Secret <fleet>-redis-auth, which the operator
// generates and owns, with the users file built from them. Redis pods mount
// that one key as a file that redis.conf includes; limiter pods get their
// password from a secretKeyRef env var. No password is in a pod's
// arguments, in a ConfigMap or in a plain env var: the users file holds
// SHA-256 hashes of them, and the replication password, which a replica
// must send, only in the Secret.
const (
	RedisLimiterUser     = "sluice-limiter"
	RedisOperatorUser    = "sluice-operator"
	RedisReplicationUser = "sluice-replication"

	// Keys of the auth Secret.
	RedisLimiterPasswordKey     = "limiter-password"
	RedisOperatorPasswordKey    = "operator-password"
	RedisReplicationPasswordKey = "replication-password"
	RedisUsersKey               = "users.conf"

	// RedisAuthHashAnnotation on the Redis pod template is a hash of the
	// users file, so that a new password or rule rolls the pods.
	RedisAuthHashAnnotation = "ratelimit.sluice.dev/redis-auth-hash"
	// RedisLimiterAuthAnnotation on the limiter pod template is
	// RedisLimiterAuthHash: a new limiter password rolls the limiters, which
	// read it from their environment at start only.
	RedisLimiterAuthAnnotation = "ratelimit.sluice.dev/redis-limiter-auth-hash"

	redisAuthVolume = "auth"
	redisAuthDir    = "/etc/redis-auth"
)

// RedisAuthSecretName is the name of the Secret with the passwords and the
// users file of a Cluster fleet, "<fleet>-redis-auth".
func RedisAuthSecretName(fleet *v1alpha1.LimiterFleet) string { return fleet.Name + "-redis-auth" }

// RedisPasswords are the passwords of the three users.
type RedisPasswords struct {
	Limiter, Operator, Replication string
}

// RedisUsersConf is the users file of every node: the default user off,
// the three users with their rules and the SHA-256 of their passwords,
// and the replication user and password that replicas authenticate with.
// Generated passwords are base64url; a limiter password from redis.auth is
// only ever hashed here, so it may hold any byte.
func RedisUsersConf(pw RedisPasswords) string {
	user := func(name, password, rules string) string {
		sum := sha256.Sum256([]byte(password))
		return fmt.Sprintf("user %s on resetpass #%s %s", name, hex.EncodeToString(sum[:]), rules)
	}
	return strings.Join([]string{
		"user default off resetpass resetkeys resetchannels -@all",
		user(RedisLimiterUser, pw.Limiter, redisacl.LimiterRules("")),
		user(RedisOperatorUser, pw.Operator, rediscluster.OperatorACLRules()),
		user(RedisReplicationUser, pw.Replication, rediscluster.ReplicaACLRules()),
		"masteruser " + RedisReplicationUser,
		"masterauth " + pw.Replication,
	}, "\n") + "\n"
}

// BuildRedisAuthSecret builds the auth Secret from the passwords. The
// limiter's password is left out when it comes from redis.auth's Secret.
func BuildRedisAuthSecret(fleet *v1alpha1.LimiterFleet, pw RedisPasswords) *corev1.Secret {
	data := map[string][]byte{
		RedisOperatorPasswordKey:    []byte(pw.Operator),
		RedisReplicationPasswordKey: []byte(pw.Replication),
		RedisUsersKey:               []byte(RedisUsersConf(pw)),
	}
	if fleet.Spec.Redis.Auth == nil {
		data[RedisLimiterPasswordKey] = []byte(pw.Limiter)
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: redisMeta(fleet, RedisAuthSecretName(fleet)),
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
}

// redisLimiterPasswordRef is where limiter pods of a Cluster fleet read
// their password: redis.auth's Secret and key, or the auth Secret.
func redisLimiterPasswordRef(fleet *v1alpha1.LimiterFleet) (secret, key string) {
	if auth := fleet.Spec.Redis.Auth; auth != nil {
		return auth.SecretName, fleet.Spec.EffectiveAuthKey()
	}
	return RedisAuthSecretName(fleet), RedisLimiterPasswordKey
}

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
	sum := sha256.Sum256(secret.Data[RedisUsersKey])
	return hex.EncodeToString(sum[:8])
}

// RedisLimiterAuthHash is a short HMAC-SHA-256 of the limiters' user line
// in the auth Secret's users file (which holds the SHA-256 of their
// password), keyed by the operator's password. It changes with the
// limiters' password, and it lets nobody who can read the Deployment test
// guesses of a password that a user chose: the key is only in the Secret.
// "" when the Secret has no such line.
func RedisLimiterAuthHash(secret *corev1.Secret) string {
	prefix := "user " + RedisLimiterUser + " "
	for line := range strings.SplitSeq(string(secret.Data[RedisUsersKey]), "\n") {
		if strings.HasPrefix(line, prefix) {
			mac := hmac.New(sha256.New, secret.Data[RedisOperatorPasswordKey])
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
// any that are missing, and takes the limiters' from redis.auth's Secret
// when set. Secrets are read by name through the API reader and never
// cached or listed. A Secret of that name that the fleet does not control
// is left alone (errSecretNotOwned).
func (r *LimiterFleetReconciler) reconcileRedisAuth(ctx context.Context, fleet *v1alpha1.LimiterFleet) (*corev1.Secret, error) {
	existing := &corev1.Secret{}
	key := client.ObjectKey{Namespace: fleet.Namespace, Name: RedisAuthSecretName(fleet)}
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
	pw := RedisPasswords{Operator: keep(RedisOperatorPasswordKey), Replication: keep(RedisReplicationPasswordKey)}
	if fleet.Spec.Redis.Auth != nil {
		if pw.Limiter, err = r.redisPassword(ctx, fleet); err != nil {
			return nil, err
		}
	} else {
		pw.Limiter = keep(RedisLimiterPasswordKey)
	}
	desired := BuildRedisAuthSecret(fleet, pw)
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
