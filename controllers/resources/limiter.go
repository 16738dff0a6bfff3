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

// Package resources builds the objects a LimiterFleet owns, by pure
// functions: the same fleet gives the same objects, field for field and byte
// for byte, so that server-side apply writes nothing when nothing changed.
// Owner references are not set here; the controller sets them. Every object
// carries its TypeMeta, which server-side apply needs. It holds the names,
// labels, annotations and Secret keys of those objects too, so that the
// reconcilers and the objects agree on them: limiter.go and
// limiter_deployment.go (the limiters), redis.go and redis_statefulset.go
// (the operator's Redis Cluster), secrets.go (the names and shapes of the
// Secrets the reconcilers fill), networkpolicy.go and disruption.go. It
// reads nothing: no client, no cache.
package resources

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/limiter/config"
)

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
func SnapshotConfigMapName(fleet *v1beta1.LimiterFleet) string {
	return fleet.Name + "-snapshot"
}

// LimiterName is the name of the fleet's limiter Deployment, Service,
// ServiceAccount, Role and RoleBinding, "<fleet>-limiter".
func LimiterName(fleet *v1beta1.LimiterFleet) string {
	return fleet.Name + "-limiter"
}

// LimiterSelectorLabels select the fleet's limiter pods. They never change
// for a fleet, since a Deployment's selector is immutable.
func LimiterSelectorLabels(fleet *v1beta1.LimiterFleet) map[string]string {
	return map[string]string{
		LabelName:     LimiterAppName,
		LabelInstance: fleet.Name,
	}
}

// LimiterLabels are the labels of every limiter object of the fleet: the
// selector labels plus component, part-of and managed-by.
func LimiterLabels(fleet *v1beta1.LimiterFleet) map[string]string {
	l := LimiterSelectorLabels(fleet)
	l[LabelComponent] = LimiterComponent
	l[LabelPartOf] = PartOf
	l[LabelManagedBy] = ManagedBy
	return l
}

func limiterMeta(fleet *v1beta1.LimiterFleet, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: fleet.Namespace, Labels: LimiterLabels(fleet)}
}

// BuildSnapshotConfigMap builds the ConfigMap that holds the fleet's snapshot
// document, the canonical JSON of config.EncodeDocument, and its version.
// A document of up to config.MaxPlainDocument bytes is stored as it is in
// data[config.DocumentKey]; a larger one is gzip-compressed into
// binaryData[config.DocumentGzipKey], never truncated. The compression is
// deterministic: equal documents give equal bytes.
func BuildSnapshotConfigMap(fleet *v1beta1.LimiterFleet, document []byte, version string) *corev1.ConfigMap {
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
func BuildLimiterServiceAccount(fleet *v1beta1.LimiterFleet) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: limiterMeta(fleet, LimiterName(fleet)),
	}
}

// BuildLimiterRole builds the limiter pods' Role: get, list and watch of the
// fleet's snapshot ConfigMap, and nothing else. (List and watch honour
// resourceNames when the request selects the object by metadata.name, as an
// informer on one name does.)
func BuildLimiterRole(fleet *v1beta1.LimiterFleet) *rbacv1.Role {
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
func BuildLimiterRoleBinding(fleet *v1beta1.LimiterFleet) *rbacv1.RoleBinding {
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
func BuildLimiterAuthDelegation(fleets []v1beta1.LimiterFleet) *rbacv1.ClusterRoleBinding {
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
func BuildLimiterService(fleet *v1beta1.LimiterFleet) *corev1.Service {
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
func LimiterHeadlessName(fleet *v1beta1.LimiterFleet) string {
	return LimiterName(fleet) + "-headless"
}

// BuildLimiterHeadlessService builds a headless Service over the same pods
// and their data plane ports (the admin port is the operator's, which finds
// it through the other Service's EndpointSlices): its DNS name answers the IP of every ready limiter pod, for
// gateways that balance each call themselves (Envoy's STRICT_DNS cluster,
// gRPC's round_robin over dns:///). Through the ClusterIP Service, kube-proxy
// balances connections, not calls, and a gateway holds a few long-lived
// HTTP/2 connections: some pods get most calls and others none.
func BuildLimiterHeadlessService(fleet *v1beta1.LimiterFleet) *corev1.Service {
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
