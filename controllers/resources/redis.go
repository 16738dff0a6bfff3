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

package resources

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/api/v1beta1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The objects of a fleet with store.type Cluster: a redis.conf ConfigMap, a
// headless Service over every node, and per shard a StatefulSet and a
// PodDisruptionBudget. Like the limiter's, they are pure functions of the
// fleet. The operator, not the pods, forms the cluster (see
// controllers/rediscluster): the pods only start empty cluster nodes.

// Labels and names of the Redis objects.
const (
	// RedisAppName is the app.kubernetes.io/name of Redis objects.
	RedisAppName = "sluice-redis"
	// RedisComponent is the app.kubernetes.io/component of Redis objects.
	RedisComponent = "redis"
	// LabelRedisShard on a Redis pod is its shard, from "0".
	LabelRedisShard = "ratelimit.sluice.dev/redis-shard"
	// RedisConfigHashAnnotation on the pod template is the hash of
	// redis.conf, so that a config change rolls the pods.
	RedisConfigHashAnnotation = "ratelimit.sluice.dev/redis-config-hash"

	RedisContainerName = "redis"
	RedisPortName      = "redis"
	RedisBusPortName   = "cluster-bus"
	// RedisPort serves clients; RedisBusPort is the cluster bus.
	RedisPort    int32 = 6379
	RedisBusPort int32 = 16379
	// RedisUser is the redis user and group of the official image.
	RedisUser int64 = 999
	// RedisConfigKey is redis.conf's key in the ConfigMap.
	RedisConfigKey = "redis.conf"

	redisDataVolume   = "data"
	redisConfigVolume = "config"
	redisDataDir      = "/data"
	redisConfigDir    = "/etc/redis"
)

// RedisName is the name of the fleet's headless Redis Service, "<fleet>-redis".
func RedisName(fleet *v1beta1.LimiterFleet) string { return fleet.Name + "-redis" }

// RedisConfigMapName is the name of the redis.conf ConfigMap.
func RedisConfigMapName(fleet *v1beta1.LimiterFleet) string { return fleet.Name + "-redis-config" }

// RedisShardName is the name of shard's StatefulSet and PodDisruptionBudget,
// "<fleet>-redis-<shard>"; its pods are "<fleet>-redis-<shard>-<ordinal>".
func RedisShardName(fleet *v1beta1.LimiterFleet, shard int) string {
	return fmt.Sprintf("%s-redis-%d", fleet.Name, shard)
}

// RedisPodHost is the DNS name of a Redis pod through the headless
// Service, as the pod announces it to the cluster and to clients.
func RedisPodHost(fleet *v1beta1.LimiterFleet, shard, ordinal int) string {
	return fmt.Sprintf("%s-%d.%s.%s.svc", RedisShardName(fleet, shard), ordinal, RedisName(fleet), fleet.Namespace)
}

// RedisSelectorLabels select every Redis pod of the fleet.
func RedisSelectorLabels(fleet *v1beta1.LimiterFleet) map[string]string {
	return map[string]string{LabelName: RedisAppName, LabelInstance: fleet.Name}
}

// RedisShardSelectorLabels select the pods of one shard. They never change
// for a shard, since a StatefulSet's selector is immutable.
func RedisShardSelectorLabels(fleet *v1beta1.LimiterFleet, shard int) map[string]string {
	l := RedisSelectorLabels(fleet)
	l[LabelRedisShard] = strconv.Itoa(shard)
	return l
}

// RedisLabels are the labels of every Redis object of the fleet.
func RedisLabels(fleet *v1beta1.LimiterFleet) map[string]string {
	l := RedisSelectorLabels(fleet)
	l[LabelComponent] = RedisComponent
	l[LabelPartOf] = PartOf
	l[LabelManagedBy] = ManagedBy
	return l
}

func redisMeta(fleet *v1beta1.LimiterFleet, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: fleet.Namespace, Labels: RedisLabels(fleet)}
}

// RedisConfig is the redis.conf every node of the fleet runs with. The
// node's hostname (cluster-announce-hostname) is per pod, so it is a
// command-line argument. Users and passwords are in the auth Secret's users
// file, which it includes (see RedisUsersConf): the ConfigMap holds none.
//
//   - protected-mode yes, and the default user off in the users file: a
//     client that does not authenticate can run nothing.
//
//   - maxmemory (RedisMaxMemory) with maxmemory-policy allkeys-lru: at the
//     bound, Redis evicts the key least recently used rather than refuse
//     writes. It used to be volatile-ttl, the key nearest to expiry; but a
//     key's TTL is its policy's period, which a tenant chooses: one that
//     filled a node with keys of an hour had every other tenant's
//     short-lived state (counters of short windows, penalties, holdings)
//     evicted first, however busy (TestAttackRedisEvictionSteeredByTTL).
//     Recency is earned by traffic, which each tenant's own limits bound:
//     to keep a key from eviction a tenant must keep using it, and the
//     keys in use are the ones whose loss matters. A full node lets the
//     idlest counters restart early instead of failing every decision on
//     its shard to the policies' failureMode (noeviction, which one tenant
//     filling the node would inflict on all), and is never OOM-killed,
//     which would fail the shard over or lose it.
//
//   - nodes.conf and the append-only file live in /data, the PVC when
//     spec.store.cluster.storage is set: a restarted pod keeps its node ID and keys.
//
//   - cluster-preferred-endpoint-type ip: CLUSTER SLOTS, CLUSTER SHARDS
//     and MOVED give clients each node's announced pod IP, which the
//     operator re-MEETs as soon as a replaced pod has a new one. Clients
//     that followed DNS names instead (hostname) kept dialling a replaced
//     pod's old IP for as long as the cluster DNS cached it (CoreDNS: up
//     to 30s): the limiters failed open on that shard well after the
//     cluster had healed. DNS names serve only as the limiters' seeds
//     (RedisSeeds), which survive every IP change; the pods still announce
//     their hostname, for people reading CLUSTER SHARDS.
//
//   - cluster-require-full-coverage no: the shards that are up keep
//     counting while one is down.
//
//   - cluster-replica-validity-factor 0: a replica always may take over a
//     dead primary; stale counters beat no counters for a rate limiter.
//
//   - With spec.store.cluster.tls, no plain-text port: clients, replication and the
//     cluster bus (tls-port + 10000) use TLS only, with the certificates of
//     the TLS Secret (see RedisTLSEnabled).
func RedisConfig(fleet *v1beta1.LimiterFleet) string {
	ports := []string{fmt.Sprintf("port %d", RedisPort)}
	if RedisTLSEnabled(fleet) {
		ports = []string{
			"port 0",
			fmt.Sprintf("tls-port %d", RedisPort),
			"tls-cert-file " + redisTLSDir + "/" + RedisTLSCertKey,
			"tls-key-file " + redisTLSDir + "/" + RedisTLSKeyKey,
			"tls-ca-cert-file " + redisTLSDir + "/" + RedisTLSCAKey,
			"tls-auth-clients optional",
			"tls-replication yes",
			"tls-cluster yes",
		}
	}
	lines := append(ports,
		"bind * -::*",
		"protected-mode yes",
		"dir "+redisDataDir,
		"cluster-enabled yes",
		"cluster-config-file "+redisDataDir+"/nodes.conf",
		fmt.Sprintf("cluster-node-timeout %d", fleet.Spec.EffectiveNodeTimeout().Milliseconds()),
		"cluster-require-full-coverage no",
		"cluster-allow-reads-when-down no",
		"cluster-replica-validity-factor 0",
		"cluster-migration-barrier 1",
		"cluster-preferred-endpoint-type ip",
		// Replicas sync at once rather than after the default 5s.
		"repl-diskless-sync yes",
		"repl-diskless-sync-delay 0",
		"appendonly yes",
		"appendfsync everysec",
		`save ""`,
	)
	if max := RedisMaxMemory(fleet); max > 0 {
		lines = append(lines, fmt.Sprintf("maxmemory %d", max))
	}
	lines = append(lines, "maxmemory-policy allkeys-lru", "include "+redisAuthDir+"/"+RedisUsersKey)
	return strings.Join(lines, "\n") + "\n"
}

// RedisMaxMemoryPercent is the share of the Redis container's memory limit
// that maxmemory gets when spec.store.cluster.maxMemory is unset.
const RedisMaxMemoryPercent = 75

// RedisMaxMemory is each node's maxmemory in bytes: spec.store.cluster.maxMemory,
// else RedisMaxMemoryPercent of the container's memory limit (of
// spec.store.cluster.resources, or DefaultRedisResources), else 0, unbounded.
func RedisMaxMemory(fleet *v1beta1.LimiterFleet) int64 {
	c := clusterStore(fleet)
	if m := c.MaxMemory; m != nil {
		return m.Value()
	}
	resources := DefaultRedisResources()
	if r := c.Resources; r != nil {
		resources = *r
	}
	limit, ok := resources.Limits[corev1.ResourceMemory]
	if !ok || limit.Value() <= 0 {
		return 0
	}
	return limit.Value() / 100 * RedisMaxMemoryPercent
}

// BuildRedisConfigMap builds the ConfigMap that holds redis.conf.
func BuildRedisConfigMap(fleet *v1beta1.LimiterFleet) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: redisMeta(fleet, RedisConfigMapName(fleet)),
		Data:       map[string]string{RedisConfigKey: RedisConfig(fleet)},
	}
}

// BuildRedisService builds the headless Service that gives every Redis pod
// its DNS name. It publishes pods before they are ready: a node must be
// reachable by name to join the cluster that makes it ready.
func BuildRedisService(fleet *v1beta1.LimiterFleet) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: redisMeta(fleet, RedisName(fleet)),
		Spec: corev1.ServiceSpec{
			Type:                     corev1.ServiceTypeClusterIP,
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 RedisSelectorLabels(fleet),
			Ports: []corev1.ServicePort{
				{Name: RedisPortName, Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("redis"), Port: RedisPort, TargetPort: intstr.FromString(RedisPortName)},
				{Name: RedisBusPortName, Protocol: corev1.ProtocolTCP, Port: RedisBusPort, TargetPort: intstr.FromString(RedisBusPortName)},
			},
		},
	}
}

// BuildRedisPDB builds shard's PodDisruptionBudget: at most one of its pods
// evicted at a time, so a drain never takes a primary and its replica
// together.
func BuildRedisPDB(fleet *v1beta1.LimiterFleet, shard int) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: policyv1.SchemeGroupVersion.String(), Kind: "PodDisruptionBudget"},
		ObjectMeta: redisMeta(fleet, RedisShardName(fleet, shard)),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: RedisShardSelectorLabels(fleet, shard)},
		},
	}
}

// RedisSeeds are the addresses limiters start from: every ordinal of the
// first three shards by DNS name, ordinal 0 of each first. Every fleet has
// these three shards for life (shards is at least 3 and never lowered), so
// the limiter Deployment's arguments change only with replicasPerShard,
// not when shards are added or pods move; the client learns the rest of the
// cluster from CLUSTER SLOTS. The replicas are seeds too: a limiter that
// starts while every ordinal-0 pod is gone (their node drained or stopped)
// takes the slot map from a replica.
func RedisSeeds(fleet *v1beta1.LimiterFleet) []string {
	var seeds []string
	for ordinal := range 1 + int(fleet.Spec.EffectiveReplicasPerShard()) {
		for shard := range int(v1beta1.MinShards) {
			seeds = append(seeds, fmt.Sprintf("%s:%d", RedisPodHost(fleet, shard, ordinal), RedisPort))
		}
	}
	return seeds
}

// clusterStore is store.cluster, or an empty one when unset.
func clusterStore(fleet *v1beta1.LimiterFleet) *v1beta1.ClusterStore {
	if c := fleet.Spec.Store.Cluster; c != nil {
		return c
	}
	return &v1beta1.ClusterStore{}
}
