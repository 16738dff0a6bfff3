package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

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
func RedisArgs(fleet *v1beta1.LimiterFleet) []string {
	return []string{
		redisConfigDir + "/" + RedisConfigKey,
		"--cluster-announce-ip", "$(POD_IP)",
		"--cluster-announce-hostname", fmt.Sprintf("$(POD_NAME).%s.%s.svc", RedisName(fleet), fleet.Namespace),
	}
}

// redisPasswordEnv is the env var that carries the limiters' Redis
// password from its Secret: for External, store.external.auth's (or none); for
// Cluster, store.cluster.auth's or the auth Secret's, with the user's name.
func redisPasswordEnv(fleet *v1beta1.LimiterFleet) []corev1.EnvVar {
	switch auth := fleet.Spec.RedisAuth(); {
	case fleet.Spec.EffectiveStoreType() == v1beta1.StoreCluster:
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
// its replica on one node would die together. They run spec.store.cluster.image, or
// defaultImage (the operator's --redis-image) when unset, or
// v1beta1.DefaultRedisImage when both are empty. The pods mount the users
// file of the auth Secret and, with TLS, the TLS Secret; the hashes of
// what they mount are on the pod template, so that a new password or
// certificate rolls them.
func BuildRedisStatefulSet(fleet *v1beta1.LimiterFleet, shard int, defaultImage string, hashes RedisSecretHashes) *appsv1.StatefulSet {
	labels := RedisLabels(fleet)
	labels[LabelRedisShard] = strconv.Itoa(shard)
	pod, claims := redisPodSpec(fleet, shard, defaultImage)
	return &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Name: RedisShardName(fleet, shard), Namespace: fleet.Namespace, Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(1 + fleet.Spec.EffectiveReplicasPerShard()),
			ServiceName: RedisName(fleet),
			Selector:    &metav1.LabelSelector{MatchLabels: RedisShardSelectorLabels(fleet, shard)},
			// Nodes start empty and the operator joins them: there is no
			// order to keep.
			PodManagementPolicy: appsv1.ParallelPodManagement,
			UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      labels,
					Annotations: redisPodAnnotations(fleet, hashes),
				},
				Spec: pod,
			},
			VolumeClaimTemplates: claims,
		},
	}
}

// redisPodAnnotations are the hashes of what a Redis pod reads when it
// starts (its configuration, users file and, with TLS, certificate).
func redisPodAnnotations(fleet *v1beta1.LimiterFleet, hashes RedisSecretHashes) map[string]string {
	sum := sha256.Sum256([]byte(RedisConfig(fleet)))
	annotations := map[string]string{RedisConfigHashAnnotation: hex.EncodeToString(sum[:8]), RedisAuthHashAnnotation: hashes.Auth}
	if RedisTLSEnabled(fleet) {
		annotations[RedisTLSHashAnnotation] = hashes.TLS
	}
	return annotations
}

// redisPodSpec is the spec of a shard's Redis pods, and the claim template
// of their data volume when spec.store.cluster.storage asks for one (an emptyDir
// otherwise).
func redisPodSpec(fleet *v1beta1.LimiterFleet, shard int, defaultImage string) (corev1.PodSpec, []corev1.PersistentVolumeClaim) {
	container := redisContainer(fleet, defaultImage)
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
	if RedisTLSEnabled(fleet) {
		// The certificate, its key and the CA, readable by the redis group.
		volumes = append(volumes, corev1.Volume{Name: redisTLSVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  RedisTLSSecretName(fleet),
			DefaultMode: ptr.To[int32](0o440),
		}}})
		container.VolumeMounts = append(container.VolumeMounts, corev1.VolumeMount{Name: redisTLSVolume, MountPath: redisTLSDir, ReadOnly: true})
	}
	var claims []corev1.PersistentVolumeClaim
	if st := clusterStore(fleet).Storage; st != nil {
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
	return corev1.PodSpec{
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
	}, claims
}

// RedisHandOverSeconds is how long a deleted Redis pod keeps serving
// before SIGTERM (its preStop sleep): the operator's hand-over of a
// master's slots to its replica takes well under a second.
const RedisHandOverSeconds = 5

// redisContainer is the redis-server container, without the TLS mount.
func redisContainer(fleet *v1beta1.LimiterFleet, defaultImage string) corev1.Container {
	spec := &fleet.Spec
	image := spec.EffectiveRedisImage()
	c := clusterStore(fleet)
	if (c.Image == nil || *c.Image == "") && defaultImage != "" {
		image = defaultImage
	}
	resources := DefaultRedisResources()
	if c.Resources != nil {
		resources = *c.Resources.DeepCopy()
	}
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
	return corev1.Container{
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
		// A deleted master keeps serving while the operator, which sees
		// the pod terminating, has a synced replica take its slots over
		// (CLUSTER FAILOVER): clients follow the MOVED at once instead of
		// failing until the pod is back.
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: RedisHandOverSeconds}}},
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
}
