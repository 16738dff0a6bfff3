package resources

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// DefaultLimiterResources are the limiter container's resources when the
// fleet sets none: requests of 100m CPU and 64Mi memory, a 256Mi memory
// limit, and no CPU limit (throttling would add latency to every decision).
func DefaultLimiterResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("64Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("256Mi"),
		},
	}
}

// GoMemLimitPercent is the share of the limiter container's memory limit
// that GOMEMLIMIT gets: the Go runtime collects harder as the heap nears it,
// well before the kernel's OOM killer would act at the limit; the rest is
// for what the runtime does not count against it (thread stacks are, but
// not memory the kernel holds for the process).
const GoMemLimitPercent = 90

// GoMemLimitEnv is GOMEMLIMIT for a container of resources:
// GoMemLimitPercent of its memory limit, in bytes; nothing without a
// limit. The limiter's memory store takes half the limit by default
// (--memory-max-bytes, read from the container's cgroup), so the runtime
// collects before the store's cap and the process's other memory add up
// to the limit.
func GoMemLimitEnv(resources corev1.ResourceRequirements) []corev1.EnvVar {
	limit, ok := resources.Limits[corev1.ResourceMemory]
	if !ok || limit.Value() <= 0 {
		return nil
	}
	return []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: strconv.FormatInt(limit.Value()/100*GoMemLimitPercent, 10)}}
}

// LimiterArgs are the limiter container's arguments.
func LimiterArgs(fleet *v1beta1.LimiterFleet, storeURL string) []string {
	args := []string{
		"--snapshot-configmap=" + fleet.Namespace + "/" + SnapshotConfigMapName(fleet),
		"--store=" + storeURL,
		fmt.Sprintf("--grpc-addr=0.0.0.0:%d", LimiterGRPCPort),
		fmt.Sprintf("--http-addr=0.0.0.0:%d", LimiterHTTPPort),
		fmt.Sprintf("--admin-addr=0.0.0.0:%d", LimiterAdminPort),
		limiterwire.AdminAuthFlag + "=" + limiterwire.AdminAuthKubernetes,
		"--admin-token-audience=" + limiterwire.FleetAdminAudience(fleet.Namespace, fleet.Name),
		"--log-format=json",
	}
	args = append(args, AdminTLSArgs()...)
	if d := fleet.Spec.DataPlane; d != nil && len(d.TrustedProxies) > 0 {
		args = append(args, "--trusted-proxies="+strings.Join(d.TrustedProxies, ","))
	}
	if _, key := limiterCA(fleet); key != "" {
		args = append(args, "--redis-ca-file="+redisCADir+"/"+key)
	}
	switch t := externalTLS(fleet); {
	case RedisTLSEnabled(fleet):
		args = append(args, "--redis-tls-server-name="+RedisTLSServerName(fleet))
	case t != nil && t.ServerName != nil:
		args = append(args, "--redis-tls-server-name="+*t.ServerName)
	}
	if e := fleet.Spec.Entries; e != nil && e.Accept != nil {
		args = append(args, "--accept-entry="+*e.Accept)
	}
	if e := fleet.Spec.Entries; e != nil && e.Idempotency != nil {
		args = append(args, "--idempotency-entry="+*e.Idempotency)
	}
	args = append(args, "--drain-delay="+LimiterDrainDelay.String())
	args = append(args, topDescriptorArgs(fleet.Spec.Stats)...)
	return append(args, tracingArgs(fleet)...)
}

// redisCADir is where store.external.tls's CA Secret is mounted in limiter pods.
const redisCADir = "/etc/sluice/redis-ca"

// limiterEnv carries the limiters' Redis password, and its ACL user when
// there is one, into the limiter container, which reads them instead of a
// password in its store URL: store.external.auth's for External; for Cluster, the
// user sluice-limiter with store.cluster.auth's password or the generated one.
func limiterEnv(fleet *v1beta1.LimiterFleet) []corev1.EnvVar {
	env := redisPasswordEnv(fleet)
	if e := fleet.Spec.Store.External; e != nil && e.Auth != nil && e.Auth.UsernameKey != nil && fleet.Spec.EffectiveStoreType() == v1beta1.StoreExternal {
		auth := e.Auth
		env = append(env, secretEnv(limiterwire.RedisUsernameEnv, auth.SecretName, *auth.UsernameKey))
	}
	return env
}

// limiterCA is the Secret and key of the CA certificates the limiters
// verify Redis with: store.external.tls's for External, the TLS Secret's ca.crt for
// the operator's cluster with TLS; "" for the image's CAs or no TLS.
func limiterCA(fleet *v1beta1.LimiterFleet) (secret, key string) {
	switch {
	case RedisTLSEnabled(fleet):
		return RedisTLSSecretName(fleet), RedisTLSCAKey
	case fleet.Spec.EffectiveStoreType() != v1beta1.StoreExternal:
		return "", ""
	case fleet.Spec.EffectiveCAKey() != "":
		return *fleet.Spec.Store.External.TLS.CASecretName, fleet.Spec.EffectiveCAKey()
	}
	return "", ""
}

// limiterCAVolume mounts the CA certificates of limiterCA alone (never the
// key beside them), read-only, or nothing.
func limiterCAVolume(fleet *v1beta1.LimiterFleet) ([]corev1.Volume, []corev1.VolumeMount) {
	secret, key := limiterCA(fleet)
	if key == "" {
		return nil, nil
	}
	const name = "redis-ca"
	return []corev1.Volume{{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  secret,
			Items:       []corev1.KeyToPath{{Key: key, Path: key}},
			DefaultMode: ptr.To[int32](0o444),
		}}}},
		[]corev1.VolumeMount{{Name: name, MountPath: redisCADir, ReadOnly: true}}
}

// topDescriptorArgs turn spec.stats into the limiter's --top-descriptor*
// flags; none while topDescriptors is 0.
func topDescriptorArgs(st *v1beta1.FleetStats) []string {
	if st == nil || ptr.Deref(st.TopDescriptors, 0) == 0 {
		return nil
	}
	args := []string{fmt.Sprintf("--top-descriptors=%d", *st.TopDescriptors)}
	if ptr.Deref(st.DescriptorValues, v1beta1.DescriptorValuesHash) == v1beta1.DescriptorValuesTruncate {
		args = append(args, "--top-descriptor-values=truncate")
		if st.TruncateTo != nil {
			args = append(args, fmt.Sprintf("--top-descriptor-truncate=%d", *st.TruncateTo))
		}
	}
	return args
}

// LimiterDeploymentOptions are what BuildLimiterDeployment needs besides
// the fleet.
type LimiterDeploymentOptions struct {
	// DefaultImage is the limiter image when the fleet's spec.limiters.image is
	// unset.
	DefaultImage string
	// StoreURL is the limiter's --store: StoreURL's answer.
	StoreURL string
	// RedisAuth, RedisLimiterAuthHash in mode Cluster and "" otherwise,
	// goes on the pod template (RedisLimiterAuthAnnotation), so that a new
	// Redis password rolls the limiters (they read it from their
	// environment when they start).
	RedisAuth string
}

// BuildLimiterDeployment builds the limiter Deployment of the fleet.
//
// Pods load policies from the snapshot ConfigMap through the API and swap
// them in place, so nothing in the pod template depends on the snapshot: a
// policy change never rolls the Deployment.
func BuildLimiterDeployment(fleet *v1beta1.LimiterFleet, opts LimiterDeploymentOptions) *appsv1.Deployment {
	var annotations map[string]string
	if opts.RedisAuth != "" {
		annotations = map[string]string{RedisLimiterAuthAnnotation: opts.RedisAuth}
	}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "Deployment"},
		ObjectMeta: limiterMeta(fleet, LimiterName(fleet)),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(fleet.Spec.EffectiveReplicas()),
			Selector: &metav1.LabelSelector{MatchLabels: LimiterSelectorLabels(fleet)},
			// Keep every ready pod serving while a new one starts.
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					MaxUnavailable: ptr.To(intstr.FromInt32(0)),
					MaxSurge:       ptr.To(intstr.FromString("25%")),
				},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: LimiterLabels(fleet), Annotations: annotations},
				Spec:       limiterPodSpec(fleet, opts),
			},
		},
	}
}

// limiterPodSpec is the limiter pods' spec: one container, non-root, spread
// over nodes and zones.
func limiterPodSpec(fleet *v1beta1.LimiterFleet, opts LimiterDeploymentOptions) corev1.PodSpec {
	volumes, mounts := limiterCAVolume(fleet)
	keyVolumes, keyMounts, keyEnv := limiterTopKKey(fleet)
	volumes, mounts = append(volumes, keyVolumes...), append(mounts, keyMounts...)
	adminVolume, adminMount := adminTLSVolume(fleet)
	volumes, mounts = append(volumes, adminVolume), append(mounts, adminMount)
	regionArgs, regionVolumes, regionMounts, regionPorts := limiterRegions(fleet)
	volumes, mounts = append(volumes, regionVolumes...), append(mounts, regionMounts...)
	container := limiterContainer(fleet, opts, mounts, keyEnv)
	container.Args = append(container.Args, regionArgs...)
	container.Ports = append(container.Ports, regionPorts...)
	// Spread the pods of one revision (pod-template-hash: a rollout's new
	// pods spread among themselves, not around the old ones they replace,
	// which left every limiter on one node), over the nodes that take pods
	// (a cordoned or unreachable node's taint is honoured).
	spread := func(key string, when corev1.UnsatisfiableConstraintAction) corev1.TopologySpreadConstraint {
		return corev1.TopologySpreadConstraint{
			MaxSkew:           1,
			TopologyKey:       key,
			WhenUnsatisfiable: when,
			LabelSelector:     &metav1.LabelSelector{MatchLabels: LimiterSelectorLabels(fleet)},
			MatchLabelKeys:    []string{appsv1.DefaultDeploymentUniqueLabelKey},
			NodeTaintsPolicy:  ptr.To(corev1.NodeInclusionPolicyHonor),
		}
	}
	return corev1.PodSpec{
		ServiceAccountName: LimiterName(fleet),
		// The limiter reads its snapshot ConfigMap through the API.
		AutomountServiceAccountToken: ptr.To(true),
		EnableServiceLinks:           ptr.To(false),
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			RunAsUser:      ptr.To(LimiterUser),
			RunAsGroup:     ptr.To(LimiterUser),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{container},
		Volumes:    volumes,
		// Drain, then finish what is in flight, then give the
		// local tier's grants back (see LimiterGracePeriod).
		TerminationGracePeriodSeconds: ptr.To(int64(LimiterGracePeriod.Seconds())),
		// Nodes: at most one pod more on any node than on another. As a
		// preference (ScheduleAnyway) the scheduler's other scores put all
		// three on one node of two, and that node's loss took every
		// limiter. Zones only as a preference: a node without the zone
		// label would take no pod under DoNotSchedule.
		TopologySpreadConstraints: []corev1.TopologySpreadConstraint{
			spread(corev1.LabelHostname, corev1.DoNotSchedule),
			spread(corev1.LabelTopologyZone, corev1.ScheduleAnyway),
		},
	}
}

// limiterContainer is the limiter container: the image is spec.limiters.image, or
// opts.DefaultImage when unset.
func limiterContainer(fleet *v1beta1.LimiterFleet, opts LimiterDeploymentOptions, mounts []corev1.VolumeMount, keyEnv []corev1.EnvVar) corev1.Container {
	image := opts.DefaultImage
	if l := fleet.Spec.Limiters; l.Image != nil && *l.Image != "" {
		image = *l.Image
	}
	resources := DefaultLimiterResources()
	if fleet.Spec.Limiters.Resources != nil {
		resources = *fleet.Spec.Limiters.Resources.DeepCopy()
	}
	probe := func(path, port string, period int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: path, Port: intstr.FromString(port), Scheme: corev1.URISchemeHTTP,
			}},
			PeriodSeconds:    period,
			TimeoutSeconds:   1,
			SuccessThreshold: 1,
			FailureThreshold: 3,
		}
	}
	return corev1.Container{
		Name:  LimiterContainerName,
		Image: image,
		Args:  LimiterArgs(fleet, opts.StoreURL),
		Ports: []corev1.ContainerPort{
			{Name: LimiterGRPCPortName, ContainerPort: LimiterGRPCPort, Protocol: corev1.ProtocolTCP},
			{Name: LimiterHTTPPortName, ContainerPort: LimiterHTTPPort, Protocol: corev1.ProtocolTCP},
			{Name: LimiterAdminPortName, ContainerPort: LimiterAdminPort, Protocol: corev1.ProtocolTCP},
		},
		Env:            append(append(append(limiterEnv(fleet), keyEnv...), GoMemLimitEnv(resources)...), tracingEnv(fleet)...),
		VolumeMounts:   mounts,
		Resources:      resources,
		ReadinessProbe: probe("/readyz", LimiterHTTPPortName, 5),
		LivenessProbe:  probe("/healthz", LimiterHTTPPortName, 10),
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To(LimiterUser),
			RunAsGroup:               ptr.To(LimiterUser),
			ReadOnlyRootFilesystem:   ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// StoreURL is the limiter's --store for the fleet's spec.store: "memory"
// for None; for External, redis://host:port for one server, or
// redis-cluster://host:port,... when redis.cluster is true or, unset, when
// there are several addresses. Cluster mode gives
// redis-cluster://seed,... with RedisSeeds. With store.*.tls the schemes are
// rediss:// and rediss-cluster://. Credentials are never in the URL: the
// limiter reads them from the env vars that carry them from their Secret
// (LimiterEnv).
func StoreURL(fleet *v1beta1.LimiterFleet) (string, error) {
	spec := &fleet.Spec
	switch mode := spec.EffectiveStoreType(); mode {
	case v1beta1.StoreMemory:
		return "memory", nil
	case v1beta1.StoreExternal:
		var addrs []string
		if e := spec.Store.External; e != nil {
			addrs = e.Addresses
		}
		scheme := "redis"
		if externalTLS(fleet) != nil {
			scheme = "rediss"
		}
		switch {
		case len(addrs) == 0:
			return "", errors.New("spec.store.external.addresses is required when spec.store.type is External")
		case spec.RedisIsCluster():
			return scheme + "-cluster://" + strings.Join(addrs, ","), nil
		case len(addrs) > 1:
			return "", errors.New("spec.store.external.addresses must hold one address when spec.store.external.cluster is false")
		default:
			return scheme + "://" + addrs[0], nil
		}
	case v1beta1.StoreCluster:
		scheme := "redis-cluster"
		if RedisTLSEnabled(fleet) {
			scheme = "rediss-cluster"
		}
		return scheme + "://" + strings.Join(RedisSeeds(fleet), ","), nil
	default:
		return "", fmt.Errorf("spec.store.type %q: want Cluster, External or Memory", mode)
	}
}

// externalTLS is store.external.tls, or nil.
func externalTLS(fleet *v1beta1.LimiterFleet) *v1beta1.ExternalTLS {
	if e := fleet.Spec.Store.External; e != nil && fleet.Spec.EffectiveStoreType() == v1beta1.StoreExternal {
		return e.TLS
	}
	return nil
}
