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
	"bytes"
	"cmp"
	"compress/gzip"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/limiter/config"
)

// The objects a LimiterFleet owns are built here by pure functions: the same
// fleet gives the same objects, field for field and byte for byte, so that
// server-side apply writes nothing when nothing changed. Owner references are
// not set here; the controller sets them. Every object carries its TypeMeta,
// which server-side apply needs.

// Labels and annotations of a fleet's objects.
const (
	// LabelName, LabelInstance, LabelComponent, LabelPartOf and
	// LabelManagedBy are the Kubernetes recommended labels.
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"
	LabelPartOf    = "app.kubernetes.io/part-of"
	LabelManagedBy = "app.kubernetes.io/managed-by"

	// LimiterAppName is the app.kubernetes.io/name of limiter objects.
	LimiterAppName = "sluice-limiter"
	// LimiterComponent is the app.kubernetes.io/component of limiter objects.
	LimiterComponent = "limiter"
	// PartOf is the app.kubernetes.io/part-of of every object.
	PartOf = "sluice"
	// ManagedBy is the app.kubernetes.io/managed-by of every object the
	// operator creates.
	ManagedBy = "sluice-operator"

	// SnapshotVersionAnnotation on the snapshot ConfigMap is the version of
	// the snapshot it holds, so that kubectl shows it without decoding.
	SnapshotVersionAnnotation = "ratelimit.sluice.dev/snapshot-version"
)

// The limiter container.
const (
	LimiterContainerName = "limiter"
	LimiterGRPCPortName  = "grpc"
	LimiterHTTPPortName  = "http"
	LimiterAdminPortName = limiterwire.AdminPortName
	// LimiterGRPCPort serves Envoy RLS v3 and gRPC health (data plane).
	LimiterGRPCPort int32 = 8081
	// LimiterHTTPPort serves the HTTP API, /healthz and /readyz (data
	// plane).
	LimiterHTTPPort int32 = 8080
	// LimiterAdminPort serves the admin endpoints the operator polls and
	// /metrics (admin plane), to callers the API server authenticates and
	// authorizes (--admin-auth=kubernetes).
	LimiterAdminPort int32 = limiterwire.AdminPort
	// LimiterAuthDelegatorBinding is the ClusterRoleBinding that lets every
	// fleet's limiter ServiceAccount review the admin plane's callers:
	// system:auth-delegator (create tokenreviews and subjectaccessreviews).
	LimiterAuthDelegatorBinding = "sluice-limiter-auth-delegator"
	// AuthDelegatorClusterRole is Kubernetes' built-in ClusterRole of
	// delegated authentication and authorization.
	AuthDelegatorClusterRole = "system:auth-delegator"
	// LimiterUser is the non-root user and group the limiter runs as (the
	// distroless "nonroot" user).
	LimiterUser int64 = 65532
)

// SnapshotConfigMapName is the name of the fleet's snapshot ConfigMap,
// "<fleet>-snapshot".
func SnapshotConfigMapName(fleet *v1alpha1.LimiterFleet) string {
	return fleet.Name + "-snapshot"
}

// LimiterName is the name of the fleet's limiter Deployment, Service,
// ServiceAccount, Role and RoleBinding, "<fleet>-limiter".
func LimiterName(fleet *v1alpha1.LimiterFleet) string {
	return fleet.Name + "-limiter"
}

// LimiterSelectorLabels select the fleet's limiter pods. They never change
// for a fleet, since a Deployment's selector is immutable.
func LimiterSelectorLabels(fleet *v1alpha1.LimiterFleet) map[string]string {
	return map[string]string{
		LabelName:     LimiterAppName,
		LabelInstance: fleet.Name,
	}
}

// LimiterLabels are the labels of every limiter object of the fleet: the
// selector labels plus component, part-of and managed-by.
func LimiterLabels(fleet *v1alpha1.LimiterFleet) map[string]string {
	l := LimiterSelectorLabels(fleet)
	l[LabelComponent] = LimiterComponent
	l[LabelPartOf] = PartOf
	l[LabelManagedBy] = ManagedBy
	return l
}

func limiterMeta(fleet *v1alpha1.LimiterFleet, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: fleet.Namespace, Labels: LimiterLabels(fleet)}
}

// BuildSnapshotConfigMap builds the ConfigMap that holds the fleet's snapshot
// document, the canonical JSON of config.EncodeDocument, and its version.
// A document of up to config.MaxPlainDocument bytes is stored as it is in
// data[config.DocumentKey]; a larger one is gzip-compressed into
// binaryData[config.DocumentGzipKey], never truncated. The compression is
// deterministic: equal documents give equal bytes.
func BuildSnapshotConfigMap(fleet *v1alpha1.LimiterFleet, document []byte, version string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: limiterMeta(fleet, SnapshotConfigMapName(fleet)),
		Data:       map[string]string{config.VersionKey: version},
	}
	cm.Annotations = map[string]string{SnapshotVersionAnnotation: version}
	if len(document) <= config.MaxPlainDocument {
		cm.Data[config.DocumentKey] = string(document)
	} else {
		cm.BinaryData = map[string][]byte{config.DocumentGzipKey: gzipDeterministic(document)}
	}
	return cm
}

// gzipDeterministic compresses data at a fixed level with an empty header: no
// name, comment or modification time, so the output depends on data alone.
func gzipDeterministic(data []byte) []byte {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		panic(err) // only for an invalid level
	}
	// A bytes.Buffer never fails a write, so neither do Write and Close.
	_, _ = zw.Write(data)
	_ = zw.Close()
	return buf.Bytes()
}

// BuildLimiterServiceAccount builds the limiter pods' ServiceAccount.
func BuildLimiterServiceAccount(fleet *v1alpha1.LimiterFleet) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: limiterMeta(fleet, LimiterName(fleet)),
	}
}

// BuildLimiterRole builds the limiter pods' Role: get, list and watch of the
// fleet's snapshot ConfigMap, and nothing else. (List and watch honour
// resourceNames when the request selects the object by metadata.name, as an
// informer on one name does.)
func BuildLimiterRole(fleet *v1alpha1.LimiterFleet) *rbacv1.Role {
	return &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"},
		ObjectMeta: limiterMeta(fleet, LimiterName(fleet)),
		Rules: []rbacv1.PolicyRule{{
			APIGroups:     []string{""},
			Resources:     []string{"configmaps"},
			ResourceNames: []string{SnapshotConfigMapName(fleet)},
			Verbs:         []string{"get", "list", "watch"},
		}},
	}
}

// BuildLimiterRoleBinding binds the limiter Role to the limiter
// ServiceAccount.
func BuildLimiterRoleBinding(fleet *v1alpha1.LimiterFleet) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
		ObjectMeta: limiterMeta(fleet, LimiterName(fleet)),
		RoleRef: rbacv1.RoleRef{
			APIGroup: rbacv1.GroupName,
			Kind:     "Role",
			Name:     LimiterName(fleet),
		},
		Subjects: []rbacv1.Subject{{
			Kind:      rbacv1.ServiceAccountKind,
			Name:      LimiterName(fleet),
			Namespace: fleet.Namespace,
		}},
	}
}

// BuildLimiterAuthDelegation builds the one ClusterRoleBinding that grants
// system:auth-delegator to the limiter ServiceAccount of each fleet, so
// that limiters can ask the API server who calls their admin plane. A
// cluster-scoped object can't be owned by a namespaced fleet: the operator
// rebuilds it from the fleets that exist, so a deleted fleet's account
// leaves it. Fleets being deleted are left out; subjects are sorted.
func BuildLimiterAuthDelegation(fleets []v1alpha1.LimiterFleet) *rbacv1.ClusterRoleBinding {
	subjects := []rbacv1.Subject{}
	for i := range fleets {
		f := &fleets[i]
		if !f.DeletionTimestamp.IsZero() {
			continue
		}
		subjects = append(subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: f.Namespace, Name: LimiterName(f)})
	}
	slices.SortFunc(subjects, func(a, b rbacv1.Subject) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return &rbacv1.ClusterRoleBinding{
		TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: LimiterAuthDelegatorBinding, Labels: map[string]string{
			LabelName: LimiterAppName, LabelComponent: LimiterComponent, LabelPartOf: PartOf, LabelManagedBy: ManagedBy}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: AuthDelegatorClusterRole},
		Subjects: subjects,
	}
}

// BuildLimiterService builds the Service in front of the limiter pods: gRPC
// (Envoy RLS v3) on 8081 and HTTP on 8080, the data plane; the admin plane
// on 8082. Its EndpointSlices tell the operator which pods are ready and
// where their admin plane is.
func BuildLimiterService(fleet *v1alpha1.LimiterFleet) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: limiterMeta(fleet, LimiterName(fleet)),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: LimiterSelectorLabels(fleet),
			Ports:    append(limiterDataPorts(), limiterAdminServicePort()),
		},
	}
}

// LimiterHeadlessName is the name of the headless Service over the limiter
// pods, "<fleet>-limiter-headless" (at most 63 characters: fleet names have
// at most 46).
func LimiterHeadlessName(fleet *v1alpha1.LimiterFleet) string {
	return LimiterName(fleet) + "-headless"
}

// BuildLimiterHeadlessService builds a headless Service over the same pods
// and their data plane ports (the admin port is the operator's, which finds
// it through the other Service's EndpointSlices): its DNS name answers the IP of every ready limiter pod, for
// gateways that balance each call themselves (Envoy's STRICT_DNS cluster,
// gRPC's round_robin over dns:///). Through the ClusterIP Service, kube-proxy
// balances connections, not calls, and a gateway holds a few long-lived
// HTTP/2 connections: some pods get most calls and others none.
func BuildLimiterHeadlessService(fleet *v1alpha1.LimiterFleet) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: limiterMeta(fleet, LimiterHeadlessName(fleet)),
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: corev1.ClusterIPNone,
			Selector:  LimiterSelectorLabels(fleet),
			Ports:     limiterDataPorts(),
		},
	}
}

// limiterDataPorts are the data plane ports of both limiter Services.
func limiterDataPorts() []corev1.ServicePort {
	return []corev1.ServicePort{
		{
			Name:        LimiterGRPCPortName,
			Protocol:    corev1.ProtocolTCP,
			AppProtocol: ptr.To("grpc"),
			Port:        LimiterGRPCPort,
			TargetPort:  intstr.FromString(LimiterGRPCPortName),
		},
		{
			Name:        LimiterHTTPPortName,
			Protocol:    corev1.ProtocolTCP,
			AppProtocol: ptr.To("http"),
			Port:        LimiterHTTPPort,
			TargetPort:  intstr.FromString(LimiterHTTPPortName),
		},
	}
}

// limiterAdminServicePort is the admin plane's port of the ClusterIP
// Service.
func limiterAdminServicePort() corev1.ServicePort {
	return corev1.ServicePort{
		Name:        LimiterAdminPortName,
		Protocol:    corev1.ProtocolTCP,
		AppProtocol: ptr.To("https"),
		Port:        LimiterAdminPort,
		TargetPort:  intstr.FromString(LimiterAdminPortName),
	}
}

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
func LimiterArgs(fleet *v1alpha1.LimiterFleet, storeURL string) []string {
	args := []string{
		"--snapshot-configmap=" + fleet.Namespace + "/" + SnapshotConfigMapName(fleet),
		"--store=" + storeURL,
		fmt.Sprintf("--grpc-addr=0.0.0.0:%d", LimiterGRPCPort),
		fmt.Sprintf("--http-addr=0.0.0.0:%d", LimiterHTTPPort),
		fmt.Sprintf("--admin-addr=0.0.0.0:%d", LimiterAdminPort),
		limiterwire.AdminAuthFlag + "=" + limiterwire.AdminAuthKubernetes,
		"--admin-token-audience=" + limiterwire.AdminAudience,
		"--log-format=json",
	}
	args = append(args, AdminTLSArgs()...)
	if len(fleet.Spec.TrustedProxies) > 0 {
		args = append(args, "--trusted-proxies="+strings.Join(fleet.Spec.TrustedProxies, ","))
	}
	if _, key := limiterCA(fleet); key != "" {
		args = append(args, "--redis-ca-file="+redisCADir+"/"+key)
	}
	switch t := fleet.Spec.Redis.TLS; {
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
	return append(args, topDescriptorArgs(fleet.Spec.Stats)...)
}

// redisCADir is where redis.tls's CA Secret is mounted in limiter pods.
const redisCADir = "/etc/sluice/redis-ca"

// limiterEnv carries the limiters' Redis password, and its ACL user when
// there is one, into the limiter container, which reads them instead of a
// password in its store URL: redis.auth's for External; for Cluster, the
// user sluice-limiter with redis.auth's password or the generated one.
func limiterEnv(fleet *v1alpha1.LimiterFleet) []corev1.EnvVar {
	env := redisPasswordEnv(fleet)
	if auth := fleet.Spec.Redis.Auth; auth != nil && auth.UsernameKey != nil && fleet.Spec.EffectiveRedisMode() == v1alpha1.RedisExternal {
		env = append(env, secretEnv(limiterwire.RedisUsernameEnv, auth.SecretName, *auth.UsernameKey))
	}
	return env
}

// limiterCA is the Secret and key of the CA certificates the limiters
// verify Redis with: redis.tls's for External, the TLS Secret's ca.crt for
// the operator's cluster with TLS; "" for the image's CAs or no TLS.
func limiterCA(fleet *v1alpha1.LimiterFleet) (secret, key string) {
	switch {
	case RedisTLSEnabled(fleet):
		return RedisTLSSecretName(fleet), RedisTLSCAKey
	case fleet.Spec.EffectiveRedisMode() != v1alpha1.RedisExternal:
		return "", ""
	case fleet.Spec.EffectiveCAKey() != "":
		return *fleet.Spec.Redis.TLS.CASecretName, fleet.Spec.EffectiveCAKey()
	}
	return "", ""
}

// limiterCAVolume mounts the CA certificates of limiterCA alone (never the
// key beside them), read-only, or nothing.
func limiterCAVolume(fleet *v1alpha1.LimiterFleet) ([]corev1.Volume, []corev1.VolumeMount) {
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
func topDescriptorArgs(st *v1alpha1.FleetStats) []string {
	if st == nil || ptr.Deref(st.TopDescriptors, 0) == 0 {
		return nil
	}
	args := []string{fmt.Sprintf("--top-descriptors=%d", *st.TopDescriptors)}
	if ptr.Deref(st.DescriptorValues, v1alpha1.DescriptorValuesHash) == v1alpha1.DescriptorValuesTruncate {
		args = append(args, "--top-descriptor-values=truncate")
		if st.TruncateTo != nil {
			args = append(args, fmt.Sprintf("--top-descriptor-truncate=%d", *st.TruncateTo))
		}
	}
	return args
}

// BuildLimiterDeployment builds the limiter Deployment. The image is
// spec.image, or defaultImage when unset; storeURL is StoreURL's answer;
// redisAuth, RedisLimiterAuthHash for mode Cluster, goes on the pod
// template, so that a new Redis password rolls the limiters (they read it
// from their environment when they start).
//
// Pods load policies from the snapshot ConfigMap through the API and swap
// them in place, so nothing in the pod template depends on the snapshot: a
// policy change never rolls the Deployment.
func BuildLimiterDeployment(fleet *v1alpha1.LimiterFleet, defaultImage, storeURL, redisAuth string) *appsv1.Deployment {
	image := defaultImage
	if fleet.Spec.Image != nil && *fleet.Spec.Image != "" {
		image = *fleet.Spec.Image
	}
	resources := DefaultLimiterResources()
	if fleet.Spec.Resources != nil {
		resources = *fleet.Spec.Resources.DeepCopy()
	}
	selector := LimiterSelectorLabels(fleet)
	volumes, mounts := limiterCAVolume(fleet)
	keyVolumes, keyMounts, keyEnv := limiterTopKKey(fleet)
	volumes, mounts = append(volumes, keyVolumes...), append(mounts, keyMounts...)
	adminVolume, adminMount := adminTLSVolume(fleet)
	volumes, mounts = append(volumes, adminVolume), append(mounts, adminMount)
	var annotations map[string]string
	if redisAuth != "" {
		annotations = map[string]string{RedisLimiterAuthAnnotation: redisAuth}
	}

	container := corev1.Container{
		Name:  LimiterContainerName,
		Image: image,
		Args:  LimiterArgs(fleet, storeURL),
		Ports: []corev1.ContainerPort{
			{Name: LimiterGRPCPortName, ContainerPort: LimiterGRPCPort, Protocol: corev1.ProtocolTCP},
			{Name: LimiterHTTPPortName, ContainerPort: LimiterHTTPPort, Protocol: corev1.ProtocolTCP},
			{Name: LimiterAdminPortName, ContainerPort: LimiterAdminPort, Protocol: corev1.ProtocolTCP},
		},
		Env:          append(append(limiterEnv(fleet), keyEnv...), GoMemLimitEnv(resources)...),
		VolumeMounts: mounts,
		Resources:    resources,
		ReadinessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/readyz", Port: intstr.FromString(LimiterHTTPPortName), Scheme: corev1.URISchemeHTTP,
			}},
			PeriodSeconds:    5,
			TimeoutSeconds:   1,
			SuccessThreshold: 1,
			FailureThreshold: 3,
		},
		LivenessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/healthz", Port: intstr.FromString(LimiterHTTPPortName), Scheme: corev1.URISchemeHTTP,
			}},
			PeriodSeconds:    10,
			TimeoutSeconds:   1,
			SuccessThreshold: 1,
			FailureThreshold: 3,
		},
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

	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "Deployment"},
		ObjectMeta: limiterMeta(fleet, LimiterName(fleet)),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(fleet.Spec.EffectiveReplicas()),
			Selector: &metav1.LabelSelector{MatchLabels: selector},
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
				Spec: corev1.PodSpec{
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
					// local tier's leases back (see LimiterGracePeriod).
					TerminationGracePeriodSeconds: ptr.To(int64(LimiterGracePeriod.Seconds())),
					// Prefer one pod per node, and spreading over zones; never
					// leave a pod pending for it.
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{
						{
							MaxSkew:           1,
							TopologyKey:       corev1.LabelHostname,
							WhenUnsatisfiable: corev1.ScheduleAnyway,
							LabelSelector:     &metav1.LabelSelector{MatchLabels: LimiterSelectorLabels(fleet)},
						},
						{
							MaxSkew:           1,
							TopologyKey:       corev1.LabelTopologyZone,
							WhenUnsatisfiable: corev1.ScheduleAnyway,
							LabelSelector:     &metav1.LabelSelector{MatchLabels: LimiterSelectorLabels(fleet)},
						},
					},
				},
			},
		},
	}
}

// StoreURL is the limiter's --store for the fleet's redis section: "memory"
// for None; for External, redis://host:port for one server, or
// redis-cluster://host:port,... when redis.cluster is true or, unset, when
// there are several addresses. Cluster mode gives
// redis-cluster://seed,... with RedisSeeds. With redis.tls the schemes are
// rediss:// and rediss-cluster://. Credentials are never in the URL: the
// limiter reads them from the env vars that carry them from their Secret
// (LimiterEnv).
func StoreURL(fleet *v1alpha1.LimiterFleet) (string, error) {
	spec := &fleet.Spec
	switch mode := spec.EffectiveRedisMode(); mode {
	case v1alpha1.RedisNone:
		return "memory", nil
	case v1alpha1.RedisExternal:
		addrs := spec.Redis.Addresses
		scheme := "redis"
		if spec.Redis.TLS != nil {
			scheme = "rediss"
		}
		switch {
		case len(addrs) == 0:
			return "", errors.New("spec.redis.addresses is required when spec.redis.mode is External")
		case spec.RedisIsCluster():
			return scheme + "-cluster://" + strings.Join(addrs, ","), nil
		case len(addrs) > 1:
			return "", errors.New("spec.redis.addresses must hold one address when spec.redis.cluster is false")
		default:
			return scheme + "://" + addrs[0], nil
		}
	case v1alpha1.RedisCluster:
		scheme := "redis-cluster"
		if RedisTLSEnabled(fleet) {
			scheme = "rediss-cluster"
		}
		return scheme + "://" + strings.Join(RedisSeeds(fleet), ","), nil
	default:
		return "", fmt.Errorf("spec.redis.mode %q: want Cluster, External or None", mode)
	}
}
