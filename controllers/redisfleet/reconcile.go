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
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/rediscluster"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update;delete

// Scope is what a pass observed, for the status.
type Scope struct {
	// Result is what the engine did and saw.
	Result rediscluster.Result
	// Err is why the pass could not converge (a *rediscluster.NodeError,
	// *ScaleInError, a missing Secret...); reported in RedisReady.
	Err error
	// Reason overrides the condition reason for errors found before the
	// engine ran.
	Reason string
	// Shards is the number of shard StatefulSets kept: spec.store.cluster.shards,
	// or more when shards was lowered.
	Shards int
	// Skipped is true when the engine did not run (its Secrets were not
	// ready).
	Skipped bool
	// Now is when the pass started.
	Now time.Time
	// SettledAt is when this operator last saw the cluster become ok after
	// a pass that found it not ok (zero when it has been ok all along):
	// the limiters must have reached it since for RedisReady.
	SettledAt time.Time
}

// clusterOK reports whether a pass found the cluster converged and ok with
// every slot served.
func clusterOK(rs *Scope) bool {
	obs := rs.Result.Status
	return rs.Err == nil && rs.Result.Converged && obs.ClusterState == "ok" && obs.SlotsAssigned == rediscluster.SlotCount
}

// settle records whether this pass found the cluster ok, and returns since
// when it has been: on a change from not ok, now, and the limiter pods are
// asked at once whether they reach it. An operator that starts on an ok
// cluster has seen no change: zero.
func (r *Provisioner) settle(fleet *v1beta1.LimiterFleet, rs *Scope) time.Time {
	key := client.ObjectKeyFromObject(fleet)
	settledAt, becameOK := r.health.settle(key, clusterOK(rs), rs.Now)
	if becameOK {
		r.Confirm(key, rs.Now)
	}
	return settledAt
}

// Requeue delays while the cluster converges.
const (
	redisRequeueConverging = 2 * time.Second
	redisRequeueFailing    = 5 * time.Second
	// redisMigrationBudget bounds the slot moves of one pass, so that
	// status.redis.migration records progress every few seconds.
	redisMigrationBudget = 2 * time.Second
	// redisResync is how often a converged cluster is observed again.
	redisResync = 30 * time.Second
)

// Pass is what one Reconcile saw, for the fleet's status and requeue.
type Pass struct {
	// Scope is what the pass observed; nil outside mode Cluster.
	Scope *Scope
	// LimiterAuth is RedisLimiterAuthHash of the auth Secret this pass
	// read; "" when it could not be read.
	LimiterAuth string
	// RequeueAfter is when to look again; 0 leaves it to the watches.
	RequeueAfter time.Duration
}

// Reconcile applies the Redis objects of a Cluster fleet, reads its pods'
// IPs, and runs one pass of the cluster engine against them; it deletes
// them when the fleet is in another mode. What the
// engine finds (a node refusing AUTH, answering garbage, unreachable) is
// reported in RedisReady and retried, never returned: the rest of the fleet
// keeps being reconciled.
func (r *Provisioner) Reconcile(ctx context.Context, fleet *v1beta1.LimiterFleet) (Pass, error) {
	if fleet.Spec.EffectiveStoreType() != v1beta1.StoreCluster {
		recordRedisMemory(fleet, rediscluster.Status{})
		return Pass{}, r.deleteRedis(ctx, fleet)
	}
	rs := &Scope{Now: time.Now()}
	p := Pass{Scope: rs}
	var err error
	if rs.Shards, err = r.redisShards(ctx, fleet); err != nil {
		return p, err
	}
	secret, err := r.reconcileRedisAuth(ctx, fleet)
	var tlsSecret *corev1.Secret
	if err == nil {
		tlsSecret, err = r.reconcileRedisTLS(ctx, fleet, rs.Now)
	}
	var notOwned errSecretNotOwned
	var authErr errRedisAuth
	switch {
	case errors.As(err, &notOwned):
		rs.Err, rs.Reason, rs.Skipped = err, v1beta1.SecretNotOwnedReason, true
		p.RequeueAfter = redisRequeueFailing // Secrets are not watched
		return p, nil
	case errors.As(err, &authErr):
		rs.Err, rs.Reason, rs.Skipped = err, v1beta1.AuthFailedReason, true
		p.RequeueAfter = redisRequeueFailing
		return p, nil
	case err != nil:
		return p, err
	}
	p.LimiterAuth = RedisLimiterAuthHash(secret)
	if err := r.applyRedis(ctx, fleet, rs.Shards, resources.RedisSecretHashes{Auth: RedisAuthHash(secret), TLS: RedisTLSHash(tlsSecret)}); err != nil {
		return p, err
	}
	spec, err := r.redisSpec(ctx, fleet, rs.Shards)
	if err != nil {
		return p, err
	}
	spec.Username, spec.Password = resources.RedisOperatorUser, string(secret.Data[resources.RedisOperatorPasswordKey])
	if tlsSecret != nil {
		if spec.TLS, err = RedisClientTLS(fleet, tlsSecret); err != nil {
			return p, err
		}
	}
	rs.Result, rs.Err = rediscluster.Reconcile(ctx, spec, r.redisOptions(fleet)...)
	recordRedisMemory(fleet, rs.Result.Status)
	r.recordRedisActions(ctx, fleet, rs.Result.Actions)
	// The fast path's hand-overs since the last pass join its actions in
	// status (their Event is recorded already).
	rs.Result.Actions = append(r.handOvers.take(client.ObjectKeyFromObject(fleet)), rs.Result.Actions...)
	if rs.Result.DataLoss != "" {
		r.reportDataLoss(ctx, fleet, rs.Result.DataLoss)
	}
	if want := int(fleet.Spec.EffectiveShards()); rs.Err == nil && rs.Shards > want {
		rs.Err, rs.Reason = fmt.Errorf("spec.store.cluster.shards is %d but the cluster has %d shards: scale-in is not supported, so every shard is kept; set spec.store.cluster.shards back to %d",
			want, rs.Shards, rs.Shards), v1beta1.ScaleInRejectedReason
	}
	rs.SettledAt = r.settle(fleet, rs)
	if rs.Err != nil {
		logf.FromContext(ctx).Info("Redis Cluster not converged", "fleet", client.ObjectKeyFromObject(fleet), "error", rs.Err.Error())
	}
	p.RequeueAfter = requeueAfter(rs)
	return p, nil
}

// requeueAfter is when to look at the cluster again after a pass. The
// engine's own ask wins when it is sooner than redisRequeueFailing, even
// after an error: a dead master's replica is promoted at a deadline the
// engine watches closely, and when a Kubernetes node stops, every pass
// has an error (the node's other Redis pods are unreachable too), which
// must not put each promotion 5s after the last.
func requeueAfter(rs *Scope) time.Duration {
	asked := rs.Result.RequeueAfter
	switch {
	case asked > 0 && (rs.Err == nil || asked < redisRequeueFailing):
		return asked
	case rs.Err != nil:
		return redisRequeueFailing
	case !rs.Result.Converged:
		return redisRequeueConverging
	}
	// A node can fail without its pod changing (a hung process, a network
	// split): look again now and then.
	return redisResync
}

// deleteRedis deletes the Redis objects of a fleet that left mode Cluster:
// the limiters count elsewhere now. The StatefulSets' claims stay (their
// retention policy), so the data of a persistent cluster is not lost.
func (r *Provisioner) deleteRedis(ctx context.Context, fleet *v1beta1.LimiterFleet) error {
	inFleet := []client.ListOption{client.InNamespace(fleet.Namespace), client.MatchingLabels(resources.RedisSelectorLabels(fleet))}
	var sets appsv1.StatefulSetList
	if err := r.List(ctx, &sets, inFleet...); err != nil {
		return err
	}
	var pdbs policyv1.PodDisruptionBudgetList
	if err := r.List(ctx, &pdbs, inFleet...); err != nil {
		return err
	}
	var objs []client.Object
	for i := range sets.Items {
		objs = append(objs, &sets.Items[i])
	}
	for i := range pdbs.Items {
		objs = append(objs, &pdbs.Items[i])
	}
	for _, obj := range []client.Object{&corev1.Service{}, &corev1.ConfigMap{}} {
		name := resources.RedisName(fleet)
		if _, ok := obj.(*corev1.ConfigMap); ok {
			name = resources.RedisConfigMapName(fleet)
		}
		if err := r.Get(ctx, client.ObjectKey{Namespace: fleet.Namespace, Name: name}, obj); err == nil {
			objs = append(objs, obj)
		} else if !apierrors.IsNotFound(err) {
			return err
		}
	}
	for _, name := range []string{resources.RedisAuthSecretName(fleet), resources.RedisTLSSecretName(fleet), resources.RedisCASecretName(fleet)} {
		secret := &corev1.Secret{}
		if err := r.secretReader().Get(ctx, client.ObjectKey{Namespace: fleet.Namespace, Name: name}, secret); err == nil {
			objs = append(objs, secret)
		} else if !apierrors.IsNotFound(err) {
			return err
		}
	}
	for _, obj := range objs {
		if !metav1.IsControlledBy(obj, fleet) {
			continue // not ours: leave it
		}
		if err := r.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %T %s: %w", obj, obj.GetName(), err)
		}
		logf.FromContext(ctx).Info("Deleted a Redis object of a fleet that left mode Cluster", "kind", fmt.Sprintf("%T", obj), "name", obj.GetName())
	}
	return nil
}

// redisShards is the number of shards to keep: spec.store.cluster.shards, or the
// number of shard StatefulSets when more exist. The CRD refuses lowering
// shards; if it happens anyway (an old CRD), no shard is removed and
// RedisReady reports the scale-in.
func (r *Provisioner) redisShards(ctx context.Context, fleet *v1beta1.LimiterFleet) (int, error) {
	want := int(fleet.Spec.EffectiveShards())
	var sets appsv1.StatefulSetList
	if err := r.List(ctx, &sets, client.InNamespace(fleet.Namespace), client.MatchingLabels(resources.RedisSelectorLabels(fleet))); err != nil {
		return 0, err
	}
	for _, set := range sets.Items {
		if shard, err := strconv.Atoi(set.Labels[resources.LabelRedisShard]); err == nil && shard+1 > want {
			want = shard + 1
		}
	}
	return want, nil
}

// applyRedis applies the ConfigMap, headless Service, and per shard the
// StatefulSet and PodDisruptionBudget. hashes are those of the Secrets
// the pods mount.
func (r *Provisioner) applyRedis(ctx context.Context, fleet *v1beta1.LimiterFleet, shards int, hashes resources.RedisSecretHashes) error {
	objs := []client.Object{resources.BuildRedisConfigMap(fleet), resources.BuildRedisService(fleet)}
	for shard := range shards {
		objs = append(objs, resources.BuildRedisStatefulSet(fleet, shard, r.DefaultRedisImage, hashes), resources.BuildRedisPDB(fleet, shard))
	}
	for _, obj := range objs {
		if err := r.Apply(ctx, fleet, obj); err != nil {
			return fmt.Errorf("applying %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return nil
}

// redisSpec turns the fleet and its pods into the engine's Spec, without
// the password.
func (r *Provisioner) redisSpec(ctx context.Context, fleet *v1beta1.LimiterFleet, shards int) (rediscluster.Spec, error) {
	spec := rediscluster.Spec{
		Shards:           shards,
		ReplicasPerShard: int(fleet.Spec.EffectiveReplicasPerShard()),
		NodeTimeout:      fleet.Spec.EffectiveNodeTimeout(),
		Migration:        migrationFromStatus(fleet.Status.Redis),
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(fleet.Namespace), client.MatchingLabels(resources.RedisSelectorLabels(fleet))); err != nil {
		return spec, err
	}
	spec.Members = redisMembers(fleet, pods.Items, shards)
	return spec, nil
}

// redisMembers maps pods to members: the shard from its label, the ordinal
// from its name, the address from status.podIP, and whether it is being
// deleted (a terminating master hands its slots over). Pods of other
// shards and pods whose name is not their StatefulSet's are left out.
func redisMembers(fleet *v1beta1.LimiterFleet, pods []corev1.Pod, shards int) []rediscluster.Member {
	var out []rediscluster.Member
	for i := range pods {
		pod := &pods[i]
		shard, err := strconv.Atoi(pod.Labels[resources.LabelRedisShard])
		if err != nil || shard < 0 || shard >= shards {
			continue
		}
		ordinal, err := strconv.Atoi(strings.TrimPrefix(pod.Name, resources.RedisShardName(fleet, shard)+"-"))
		if err != nil || ordinal < 0 || pod.Name != fmt.Sprintf("%s-%d", resources.RedisShardName(fleet, shard), ordinal) {
			continue
		}
		m := rediscluster.Member{Pod: pod.Name, Shard: shard, Ordinal: ordinal, Terminating: !pod.DeletionTimestamp.IsZero()}
		if pod.Status.PodIP != "" {
			m.Addr = net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(resources.RedisPort)))
		}
		out = append(out, m)
	}
	return out
}

// redisPassword reads the limiters' password from spec.store.cluster.auth's
// Secret, through the API reader: the operator reads Secrets by name and
// caches none. Its errors are errRedisAuth.
func (r *Provisioner) redisPassword(ctx context.Context, fleet *v1beta1.LimiterFleet) (string, error) {
	auth := fleet.Spec.RedisAuth()
	if auth == nil {
		return "", nil
	}
	secret := &corev1.Secret{}
	err := r.secretReader().Get(ctx, client.ObjectKey{Namespace: fleet.Namespace, Name: auth.SecretName}, secret)
	switch {
	case apierrors.IsNotFound(err):
		return "", errRedisAuth{fmt.Errorf("spec.store.cluster.auth: Secret %s/%s not found", fleet.Namespace, auth.SecretName)}
	case apierrors.IsForbidden(err):
		return "", errRedisAuth{fmt.Errorf("spec.store.cluster.auth: the operator may not read Secret %s/%s: grant its ServiceAccount get on that Secret",
			fleet.Namespace, auth.SecretName)}
	case err != nil:
		return "", errRedisAuth{fmt.Errorf("spec.store.cluster.auth: reading Secret %s/%s: %w", fleet.Namespace, auth.SecretName, err)}
	}
	pw, ok := secret.Data[fleet.Spec.EffectiveAuthKey()]
	if !ok || len(pw) == 0 {
		return "", errRedisAuth{fmt.Errorf("spec.store.cluster.auth: Secret %s/%s has no key %q", fleet.Namespace, auth.SecretName, fleet.Spec.EffectiveAuthKey())}
	}
	return string(pw), nil
}

// errRedisAuth is a spec.store.cluster.auth Secret the operator can't use.
type errRedisAuth struct{ error }

func (e errRedisAuth) Unwrap() error { return e.error }

func (r *Provisioner) secretReader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// redisOptions are the engine's options for one fleet: its tracker of dead
// masters, kept across passes, and the dialer when one is set.
func (r *Provisioner) redisOptions(fleet *v1beta1.LimiterFleet) []rediscluster.Option {
	t := r.trackers.of(client.ObjectKeyFromObject(fleet))
	opts := []rediscluster.Option{rediscluster.WithTracker(t), rediscluster.WithMigrationBudget(redisMigrationBudget)}
	if r.RedisDialer != nil {
		opts = append(opts, rediscluster.WithDialer(r.RedisDialer))
	}
	return opts
}

// recordRedisActions records the pass's mutating commands as one Event.
func (r *Provisioner) recordRedisActions(ctx context.Context, fleet *v1beta1.LimiterFleet, actions []string) {
	if len(actions) == 0 {
		return
	}
	logf.FromContext(ctx).Info("Sent Redis Cluster commands", "fleet", client.ObjectKeyFromObject(fleet), "actions", actions)
	if r.Recorder == nil {
		return
	}
	const shown = 5
	msg := strings.Join(actions[:min(len(actions), shown)], "; ")
	if len(actions) > shown {
		msg += fmt.Sprintf("; and %d more", len(actions)-shown)
	}
	r.Recorder.Event(fleet, corev1.EventTypeNormal, "RedisClusterCommands", msg)
}
