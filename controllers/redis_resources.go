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
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// The objects of a fleet in redis.mode Cluster: a redis.conf ConfigMap, a
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
func RedisName(fleet *v1alpha1.LimiterFleet) string { return fleet.Name + "-redis" }

// RedisConfigMapName is the name of the redis.conf ConfigMap.
func RedisConfigMapName(fleet *v1alpha1.LimiterFleet) string { return fleet.Name + "-redis-config" }

// RedisShardName is the name of shard's StatefulSet and PodDisruptionBudget,
// "<fleet>-redis-<shard>"; its pods are "<fleet>-redis-<shard>-<ordinal>".
func RedisShardName(fleet *v1alpha1.LimiterFleet, shard int) string {
	return fmt.Sprintf("%s-redis-%d", fleet.Name, shard)
}

// RedisPodHost is the DNS name of a Redis pod through the headless
// Service, as the pod announces it to the cluster and to clients.
func RedisPodHost(fleet *v1alpha1.LimiterFleet, shard, ordinal int) string {
	return fmt.Sprintf("%s-%d.%s.%s.svc", RedisShardName(fleet, shard), ordinal, RedisName(fleet), fleet.Namespace)
}

// RedisSelectorLabels select every Redis pod of the fleet.
func RedisSelectorLabels(fleet *v1alpha1.LimiterFleet) map[string]string {
	return map[string]string{LabelName: RedisAppName, LabelInstance: fleet.Name}
}

// RedisShardSelectorLabels select the pods of one shard. They never change
// for a shard, since a StatefulSet's selector is immutable.
func RedisShardSelectorLabels(fleet *v1alpha1.LimiterFleet, shard int) map[string]string {
	l := RedisSelectorLabels(fleet)
	l[LabelRedisShard] = strconv.Itoa(shard)
	return l
}

// RedisLabels are the labels of every Redis object of the fleet.
func RedisLabels(fleet *v1alpha1.LimiterFleet) map[string]string {
	l := RedisSelectorLabels(fleet)
	l[LabelComponent] = RedisComponent
	l[LabelPartOf] = PartOf
	l[LabelManagedBy] = ManagedBy
	return l
}

func redisMeta(fleet *v1alpha1.LimiterFleet, name string) metav1.ObjectMeta {
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
//     spec.redis.storage is set: a restarted pod keeps its node ID and keys.
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
//   - With spec.redis.tls, no plain-text port: clients, replication and the
//     cluster bus (tls-port + 10000) use TLS only, with the certificates of
//     the TLS Secret (see RedisTLSEnabled).
func RedisConfig(fleet *v1alpha1.LimiterFleet) string {
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
// that maxmemory gets when spec.redis.maxMemory is unset.
const RedisMaxMemoryPercent = 75

// RedisMaxMemory is each node's maxmemory in bytes: spec.redis.maxMemory,
// else RedisMaxMemoryPercent of the container's memory limit (of
// spec.redis.resources, or DefaultRedisResources), else 0, unbounded.
func RedisMaxMemory(fleet *v1alpha1.LimiterFleet) int64 {
	if m := fleet.Spec.Redis.MaxMemory; m != nil {
		return m.Value()
	}
	resources := DefaultRedisResources()
	if r := fleet.Spec.Redis.Resources; r != nil {
		resources = *r
	}
	limit, ok := resources.Limits[corev1.ResourceMemory]
	if !ok || limit.Value() <= 0 {
		return 0
	}
	return limit.Value() / 100 * RedisMaxMemoryPercent
}

// BuildRedisConfigMap builds the ConfigMap that holds redis.conf.
func BuildRedisConfigMap(fleet *v1alpha1.LimiterFleet) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: redisMeta(fleet, RedisConfigMapName(fleet)),
		Data:       map[string]string{RedisConfigKey: RedisConfig(fleet)},
	}
}

// BuildRedisService builds the headless Service that gives every Redis pod
// its DNS name. It publishes pods before they are ready: a node must be
// reachable by name to join the cluster that makes it ready.
func BuildRedisService(fleet *v1alpha1.LimiterFleet) *corev1.Service {
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
func BuildRedisPDB(fleet *v1alpha1.LimiterFleet, shard int) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: policyv1.SchemeGroupVersion.String(), Kind: "PodDisruptionBudget"},
		ObjectMeta: redisMeta(fleet, RedisShardName(fleet, shard)),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: RedisShardSelectorLabels(fleet, shard)},
		},
	}
}

// DefaultRedisResources are a Redis container's resources when the fleet
// sets none: requests of 100m CPU and 128Mi memory, a 512Mi memory limit.
func DefaultRedisResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("128Mi"),
		},
		Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
}

// RedisArgs are the Redis container's arguments: the ConfigMap's
// redis.conf, the pod's IP and hostname to announce (a restarted pod tells
// the cluster its new IP at once; clients are given the IP, the hostname is
// for people). No password: those are in the users file that redis.conf
// includes.
func RedisArgs(fleet *v1alpha1.LimiterFleet) []string {
	return []string{
		redisConfigDir + "/" + RedisConfigKey,
		"--cluster-announce-ip", "$(POD_IP)",
		"--cluster-announce-hostname", fmt.Sprintf("$(POD_NAME).%s.%s.svc", RedisName(fleet), fleet.Namespace),
	}
}

// redisPasswordEnv is the env var that carries the limiters' Redis
// password from its Secret: for External, redis.auth's (or none); for
// Cluster, redis.auth's or the auth Secret's, with the user's name.
func redisPasswordEnv(fleet *v1alpha1.LimiterFleet) []corev1.EnvVar {
	switch auth := fleet.Spec.Redis.Auth; {
	case fleet.Spec.EffectiveRedisMode() == v1alpha1.RedisCluster:
		secret, key := redisLimiterPasswordRef(fleet)
		return []corev1.EnvVar{{Name: limiterwire.RedisUsernameEnv, Value: RedisLimiterUser}, secretEnv(limiterwire.RedisPasswordEnv, secret, key)}
	case auth == nil:
		return nil
	default:
		return []corev1.EnvVar{secretEnv(limiterwire.RedisPasswordEnv, auth.SecretName, fleet.Spec.EffectiveAuthKey())}
	}
}

// secretEnv is the env var name, from key of Secret secret.
func secretEnv(name, secret, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret},
		Key:                  key,
	}}}
}

// RedisSecretHashes are the hashes of the Secrets a Redis pod mounts:
// RedisAuthHash and RedisTLSHash.
type RedisSecretHashes struct{ Auth, TLS string }

// BuildRedisStatefulSet builds shard's StatefulSet: 1 + replicasPerShard
// pods, of which ordinal 0 becomes the primary at bootstrap. The pods of a
// shard must run on different nodes (required anti-affinity): a primary and
// its replica on one node would die together. They run spec.redis.image, or
// defaultImage (the operator's --redis-image) when unset, or
// v1alpha1.DefaultRedisImage when both are empty. The pods mount the users
// file of the auth Secret and, with TLS, the TLS Secret; the hashes of
// what they mount are on the pod template, so that a new password or
// certificate rolls them.
func BuildRedisStatefulSet(fleet *v1alpha1.LimiterFleet, shard int, defaultImage string, hashes RedisSecretHashes) *appsv1.StatefulSet {
	spec := &fleet.Spec
	image := spec.EffectiveRedisImage()
	if (spec.Redis.Image == nil || *spec.Redis.Image == "") && defaultImage != "" {
		image = defaultImage
	}
	resources := DefaultRedisResources()
	if spec.Redis.Resources != nil {
		resources = *spec.Redis.Resources.DeepCopy()
	}
	conf := RedisConfig(fleet)
	sum := sha256.Sum256([]byte(conf))
	labels := RedisLabels(fleet)
	labels[LabelRedisShard] = strconv.Itoa(shard)

	env := []corev1.EnvVar{
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}},
	}
	tcpProbe := func(period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(RedisPortName)}},
			PeriodSeconds:    period,
			TimeoutSeconds:   1,
			SuccessThreshold: 1,
			FailureThreshold: failures,
		}
	}
	container := corev1.Container{
		Name:    RedisContainerName,
		Image:   image,
		Command: []string{"redis-server"},
		Args:    RedisArgs(fleet),
		Env:     env,
		Ports: []corev1.ContainerPort{
			{Name: RedisPortName, ContainerPort: RedisPort, Protocol: corev1.ProtocolTCP},
			{Name: RedisBusPortName, ContainerPort: RedisBusPort, Protocol: corev1.ProtocolTCP},
		},
		Resources:      resources,
		ReadinessProbe: tcpProbe(5, 3),
		LivenessProbe:  tcpProbe(10, 6),
		VolumeMounts: []corev1.VolumeMount{
			{Name: redisDataVolume, MountPath: redisDataDir},
			{Name: redisConfigVolume, MountPath: redisConfigDir, ReadOnly: true},
			{Name: redisAuthVolume, MountPath: redisAuthDir, ReadOnly: true},
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To(RedisUser),
			RunAsGroup:               ptr.To(RedisUser),
			ReadOnlyRootFilesystem:   ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}

	volumes := []corev1.Volume{
		{Name: redisConfigVolume, VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: RedisConfigMapName(fleet)}},
		}},
		// The users file alone, readable by the redis group (fsGroup).
		{Name: redisAuthVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  RedisAuthSecretName(fleet),
			Items:       []corev1.KeyToPath{{Key: RedisUsersKey, Path: RedisUsersKey}},
			DefaultMode: ptr.To[int32](0o440),
		}}},
	}
	annotations := map[string]string{RedisConfigHashAnnotation: hex.EncodeToString(sum[:8]), RedisAuthHashAnnotation: hashes.Auth}
	if RedisTLSEnabled(fleet) {
		// The certificate, its key and the CA, readable by the redis group.
		volumes = append(volumes, corev1.Volume{Name: redisTLSVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  RedisTLSSecretName(fleet),
			DefaultMode: ptr.To[int32](0o440),
		}}})
		container.VolumeMounts = append(container.VolumeMounts, corev1.VolumeMount{Name: redisTLSVolume, MountPath: redisTLSDir, ReadOnly: true})
		annotations[RedisTLSHashAnnotation] = hashes.TLS
	}
	var claims []corev1.PersistentVolumeClaim
	if st := spec.Redis.Storage; st != nil {
		claims = []corev1.PersistentVolumeClaim{{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
			ObjectMeta: metav1.ObjectMeta{Name: redisDataVolume, Labels: RedisShardSelectorLabels(fleet, shard)},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: st.StorageClassName,
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: st.Size}},
			},
		}}
	} else {
		volumes = append([]corev1.Volume{{Name: redisDataVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}, volumes...)
	}

	return &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Name: RedisShardName(fleet, shard), Namespace: fleet.Namespace, Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(1 + spec.EffectiveReplicasPerShard()),
			ServiceName: RedisName(fleet),
			Selector:    &metav1.LabelSelector{MatchLabels: RedisShardSelectorLabels(fleet, shard)},
			// Nodes start empty and the operator joins them: there is no
			// order to keep.
			PodManagementPolicy: appsv1.ParallelPodManagement,
			UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      labels,
					Annotations: annotations,
				},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To(RedisUser),
						RunAsGroup:     ptr.To(RedisUser),
						FSGroup:        ptr.To(RedisUser),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{container},
					Volumes:    volumes,
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
							LabelSelector: &metav1.LabelSelector{MatchLabels: RedisShardSelectorLabels(fleet, shard)},
							TopologyKey:   corev1.LabelHostname,
						}},
					}},
				},
			},
			VolumeClaimTemplates: claims,
		},
	}
}

// RedisSeeds are the addresses limiters start from: ordinal 0 of the first
// three shards by DNS name. Every fleet has these three shards for life
// (shards is at least 3 and never lowered), so the limiter Deployment's
// arguments do not change when shards are added or pods move; the client
// learns the rest of the cluster from CLUSTER SLOTS.
func RedisSeeds(fleet *v1alpha1.LimiterFleet) []string {
	seeds := make([]string, v1alpha1.MinShards)
	for i := range seeds {
		seeds[i] = fmt.Sprintf("%s:%d", RedisPodHost(fleet, i, 0), RedisPort)
	}
	return seeds
}
