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

package controllers_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/controllers/resources"
	"github.com/sluice-dev/sluice/internal/policytest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/config/kube"
	"github.com/sluice-dev/sluice/limiter/store/redis"
)

const resDefaultImage = "ghcr.io/sluice-dev/sluice-limiter:test"

func resFleet(namespace, name string, mutate ...func(*v1alpha1.LimiterFleet)) *v1alpha1.LimiterFleet {
	f := &v1alpha1.LimiterFleet{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "LimiterFleet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: "7b1f6c1e-0000-4000-8000-000000000001", Generation: 4},
	}
	for _, m := range mutate {
		m(f)
	}
	return f
}

func resExternal(cluster *bool, addrs ...string) func(*v1alpha1.LimiterFleet) {
	return func(f *v1alpha1.LimiterFleet) {
		f.Spec.Redis = v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisExternal), Addresses: addrs, Cluster: cluster}
	}
}

// resFleets are fleets that exercise every branch of the builders.
func resFleets() []*v1alpha1.LimiterFleet {
	return []*v1alpha1.LimiterFleet{
		resFleet("sluice-system", "default"),
		resFleet("team-a", strings.Repeat("f", v1alpha1.MaxFleetNameLength), func(f *v1alpha1.LimiterFleet) {
			f.Spec.Replicas = ptr.To[int32](5)
			f.Spec.Image = ptr.To("registry.example.com/limiter:v1")
			f.Spec.Enforcement = ptr.To(v1alpha1.EnforcementDisabled)
			f.Spec.Resources = &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")},
			}
			f.Spec.PolicySelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold", "app": "x"}}
		}, resExternal(nil, "redis-0:6379", "redis-1:6379", "redis-2:6379")),
		resFleet("edge", "zero", func(f *v1alpha1.LimiterFleet) { f.Spec.Replicas = ptr.To[int32](0) }, resExternal(nil, "redis:6379")),
	}
}

// resBuildAll builds every object of fleet, with document as its snapshot.
func resBuildAll(t *testing.T, fleet *v1alpha1.LimiterFleet, document []byte) []client.Object {
	t.Helper()
	storeURL, err := resources.StoreURL(fleet)
	if err != nil {
		t.Fatal(err)
	}
	return []client.Object{
		resources.BuildSnapshotConfigMap(fleet, document, "0123456789abcdef"),
		resources.BuildLimiterServiceAccount(fleet),
		resources.BuildLimiterRole(fleet),
		resources.BuildLimiterRoleBinding(fleet),
		resources.BuildLimiterService(fleet),
		resources.BuildLimiterDeployment(fleet, resources.LimiterDeploymentOptions{DefaultImage: resDefaultImage, StoreURL: storeURL}),
		resources.BuildLimiterHeadlessService(fleet),
	}
}

// resBigDocument is the canonical document of n distinct policies.
func resBigDocument(n int) ([]byte, string) {
	policies := make([]v1alpha1.RateLimitPolicy, n)
	for i := range policies {
		policies[i] = v1alpha1.RateLimitPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("team-%03d", i%50), Name: fmt.Sprintf("policy-%05d", i), UID: "00000000-0000-4000-8000-000000000000", Generation: 1},
			Spec: v1alpha1.RateLimitPolicySpec{
				Domain:      fmt.Sprintf("api-%d", i%20),
				Descriptors: []v1alpha1.Descriptor{{Key: "user_id"}, {Key: "path", Value: ptr.To(fmt.Sprintf("/v1/resource-%d", i))}},
				Rate:        v1alpha1.Rate{Limit: int64(10 + i), Period: metav1.Duration{Duration: time.Minute}},
			},
		}
	}
	return config.EncodeDocument(config.DocumentFor(policytest.Sources(policies...), config.EnforcementEnabled))
}

// TestBuildersDeterministic builds every object twice from equal fleets and
// requires equal objects and equal bytes (gzip included), and that building
// leaves the fleet alone and shares no memory with it.
func TestBuildersDeterministic(t *testing.T) {
	big, _ := resBigDocument(3000)
	if len(big) <= config.MaxPlainDocument {
		t.Fatalf("big document is %d bytes, want more than %d", len(big), config.MaxPlainDocument)
	}
	small, _ := config.EncodeDocument(config.Document{})
	for _, fleet := range resFleets() {
		for _, doc := range [][]byte{small, big} {
			t.Run(fmt.Sprintf("%s/%d-bytes", fleet.Name, len(doc)), func(t *testing.T) {
				before := fleet.DeepCopy()
				first := resBuildAll(t, fleet, doc)
				second := resBuildAll(t, fleet.DeepCopy(), slices.Clone(doc))
				if !reflect.DeepEqual(first, second) {
					t.Errorf("two builds differ:\n%s", cmp.Diff(first, second))
				}
				for i := range first {
					a, _ := json.Marshal(first[i])
					b, _ := json.Marshal(second[i])
					if !bytes.Equal(a, b) {
						t.Errorf("%T: encodings differ", first[i])
					}
				}
				if diff := cmp.Diff(before, fleet); diff != "" {
					t.Errorf("building changed the fleet (-before +after):\n%s", diff)
				}

				// Changing a built object must not reach the fleet.
				dep := first[5].(*appsv1.Deployment)
				dep.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("42")
				dep.Spec.Selector.MatchLabels["x"] = "y"
				if diff := cmp.Diff(before, fleet); diff != "" {
					t.Errorf("a built Deployment shares memory with the fleet (-before +after):\n%s", diff)
				}
				if again := resBuildAll(t, fleet, doc); !reflect.DeepEqual(again, second) {
					t.Errorf("a built object shares memory with the next build")
				}
			})
		}
	}
}

// TestResourceNamesAndLabels pins every object's name, namespace, TypeMeta
// and labels.
func TestResourceNamesAndLabels(t *testing.T) {
	for _, fleet := range resFleets() {
		t.Run(fleet.Name, func(t *testing.T) {
			limiter := fleet.Name + "-limiter"
			if got := resources.LimiterName(fleet); got != limiter {
				t.Errorf("LimiterName = %q, want %q", got, limiter)
			}
			if got, want := resources.SnapshotConfigMapName(fleet), fleet.Name+"-snapshot"; got != want {
				t.Errorf("SnapshotConfigMapName = %q, want %q", got, want)
			}
			// The longest fleet name still gives a valid Service name, and
			// leaves room for "<fleet>-redis" StatefulSet pods' labels.
			if errs := validation.IsDNS1035Label(limiter); len(errs) > 0 {
				t.Errorf("limiter name %q: %v", limiter, errs)
			}
			if errs := validation.IsDNS1035Label(resources.LimiterHeadlessName(fleet)); len(errs) > 0 {
				t.Errorf("headless Service name %q: %v", resources.LimiterHeadlessName(fleet), errs)
			}
			if n := len(fleet.Name + "-redis"); n > 52 {
				t.Errorf("%q-redis is %d characters, more than a StatefulSet may have", fleet.Name, n)
			}

			wantSelector := map[string]string{
				"app.kubernetes.io/name":     "sluice-limiter",
				"app.kubernetes.io/instance": fleet.Name,
			}
			if diff := cmp.Diff(wantSelector, resources.LimiterSelectorLabels(fleet)); diff != "" {
				t.Errorf("LimiterSelectorLabels (-want +got):\n%s", diff)
			}
			wantLabels := map[string]string{
				"app.kubernetes.io/name":       "sluice-limiter",
				"app.kubernetes.io/instance":   fleet.Name,
				"app.kubernetes.io/component":  "limiter",
				"app.kubernetes.io/part-of":    "sluice",
				"app.kubernetes.io/managed-by": "sluice-operator",
			}
			want := []struct{ apiVersion, kind, name string }{
				{"v1", "ConfigMap", fleet.Name + "-snapshot"},
				{"v1", "ServiceAccount", limiter},
				{"rbac.authorization.k8s.io/v1", "Role", limiter},
				{"rbac.authorization.k8s.io/v1", "RoleBinding", limiter},
				{"v1", "Service", limiter},
				{"apps/v1", "Deployment", limiter},
				{"v1", "Service", limiter + "-headless"},
			}
			for i, obj := range resBuildAll(t, fleet, []byte(`{}`)) {
				w := want[i]
				gvk := obj.GetObjectKind().GroupVersionKind()
				if gvk.GroupVersion().String() != w.apiVersion || gvk.Kind != w.kind {
					t.Errorf("object %d: TypeMeta %s, want %s %s", i, gvk, w.apiVersion, w.kind)
				}
				if obj.GetName() != w.name || obj.GetNamespace() != fleet.Namespace {
					t.Errorf("%s: name %s/%s, want %s/%s", w.kind, obj.GetNamespace(), obj.GetName(), fleet.Namespace, w.name)
				}
				if diff := cmp.Diff(wantLabels, obj.GetLabels()); diff != "" {
					t.Errorf("%s labels (-want +got):\n%s", w.kind, diff)
				}
				if len(obj.GetOwnerReferences()) > 0 {
					t.Errorf("%s: builders must leave owner references to the controller", w.kind)
				}
			}
		})
	}
}

// TestBuildLimiterDeployment pins the Deployment: image, replicas, arguments,
// ports, probes, resources, security context and spreading.
func TestBuildLimiterDeployment(t *testing.T) {
	defaultResources := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
	custom := corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}
	cases := []struct {
		name          string
		fleet         *v1alpha1.LimiterFleet
		storeURL      string
		wantImage     string
		wantReplicas  int32
		wantResources corev1.ResourceRequirements
	}{
		{
			name:          "defaults",
			fleet:         resFleet("sluice-system", "default"),
			storeURL:      "memory",
			wantImage:     resDefaultImage,
			wantReplicas:  2,
			wantResources: defaultResources,
		},
		{
			name: "image, replicas and resources from the spec",
			fleet: resFleet("payments", "edge", func(f *v1alpha1.LimiterFleet) {
				f.Spec.Image = ptr.To("registry.example.com/limiter:v2")
				f.Spec.Replicas = ptr.To[int32](7)
				f.Spec.Resources = custom.DeepCopy()
			}),
			storeURL:      "redis-cluster://a:6379,b:6379",
			wantImage:     "registry.example.com/limiter:v2",
			wantReplicas:  7,
			wantResources: custom,
		},
		{
			name:          "zero replicas",
			fleet:         resFleet("payments", "off", func(f *v1alpha1.LimiterFleet) { f.Spec.Replicas = ptr.To[int32](0) }),
			storeURL:      "redis://r:6379",
			wantImage:     resDefaultImage,
			wantReplicas:  0,
			wantResources: defaultResources,
		},
		{
			name:          "empty image means the default",
			fleet:         resFleet("payments", "blank", func(f *v1alpha1.LimiterFleet) { f.Spec.Image = ptr.To("") }),
			storeURL:      "memory",
			wantImage:     resDefaultImage,
			wantReplicas:  2,
			wantResources: defaultResources,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := resources.BuildLimiterDeployment(tc.fleet, resources.LimiterDeploymentOptions{DefaultImage: resDefaultImage, StoreURL: tc.storeURL})
			name := tc.fleet.Name + "-limiter"
			selector := resources.LimiterSelectorLabels(tc.fleet)

			if d.Spec.Replicas == nil || *d.Spec.Replicas != tc.wantReplicas {
				t.Errorf("replicas = %v, want %d", d.Spec.Replicas, tc.wantReplicas)
			}
			if diff := cmp.Diff(&metav1.LabelSelector{MatchLabels: selector}, d.Spec.Selector); diff != "" {
				t.Errorf("selector (-want +got):\n%s", diff)
			}
			tmpl := d.Spec.Template
			for k, v := range selector {
				if tmpl.Labels[k] != v {
					t.Errorf("pod label %s = %q, want %q: the selector must select the pods", k, tmpl.Labels[k], v)
				}
			}
			if len(tmpl.Annotations) > 0 {
				t.Errorf("pod annotations %v: nothing in the template may change with the snapshot", tmpl.Annotations)
			}
			if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
				t.Errorf("rolling update %+v: want maxUnavailable 0", ru)
			}

			pod := tmpl.Spec
			if pod.ServiceAccountName != name {
				t.Errorf("serviceAccountName = %q, want %q", pod.ServiceAccountName, name)
			}
			if !ptr.Deref(pod.AutomountServiceAccountToken, false) {
				t.Errorf("the limiter needs its token to watch its ConfigMap")
			}
			wantPodSC := &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](65532),
				RunAsGroup:     ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			}
			if diff := cmp.Diff(wantPodSC, pod.SecurityContext); diff != "" {
				t.Errorf("pod security context (-want +got):\n%s", diff)
			}
			wantSpread := []corev1.TopologySpreadConstraint{
				{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: selector},
					MatchLabelKeys: []string{"pod-template-hash"}, NodeTaintsPolicy: ptr.To(corev1.NodeInclusionPolicyHonor)},
				{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: selector},
					MatchLabelKeys: []string{"pod-template-hash"}, NodeTaintsPolicy: ptr.To(corev1.NodeInclusionPolicyHonor)},
			}
			if diff := cmp.Diff(wantSpread, pod.TopologySpreadConstraints); diff != "" {
				t.Errorf("topology spread (-want +got):\n%s", diff)
			}

			if len(pod.Containers) != 1 {
				t.Fatalf("%d containers, want 1", len(pod.Containers))
			}
			c := pod.Containers[0]
			if c.Name != "limiter" || c.Image != tc.wantImage {
				t.Errorf("container %q image %q, want limiter image %q", c.Name, c.Image, tc.wantImage)
			}
			wantArgs := []string{
				"--snapshot-configmap=" + tc.fleet.Namespace + "/" + tc.fleet.Name + "-snapshot",
				"--store=" + tc.storeURL,
				"--grpc-addr=0.0.0.0:8081",
				"--http-addr=0.0.0.0:8080",
				"--admin-addr=0.0.0.0:8082",
				"--admin-auth=kubernetes",
				"--admin-token-audience=sluice-limiter-admin." + tc.fleet.Namespace + "." + tc.fleet.Name,
				"--log-format=json",
				"--admin-tls-cert=/etc/sluice/admin-tls/tls.crt",
				"--admin-tls-key=/etc/sluice/admin-tls/tls.key",
				"--drain-delay=5s",
			}
			if diff := cmp.Diff(wantArgs, c.Args); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			// GOMEMLIMIT is 90% of the memory limit, when there is one.
			var wantEnv []corev1.EnvVar
			if _, ok := tc.wantResources.Limits[corev1.ResourceMemory]; ok {
				wantEnv = []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: "241591860"}} // of 256Mi
			}
			if len(c.Command) > 0 || !cmp.Equal(wantEnv, c.Env) {
				t.Errorf("command %v env %v: want the image's entrypoint and environment %v", c.Command, c.Env, wantEnv)
			}
			wantPorts := []corev1.ContainerPort{
				{Name: "grpc", ContainerPort: 8081, Protocol: corev1.ProtocolTCP},
				{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
				{Name: "admin", ContainerPort: 8082, Protocol: corev1.ProtocolTCP},
			}
			if diff := cmp.Diff(wantPorts, c.Ports); diff != "" {
				t.Errorf("ports (-want +got):\n%s", diff)
			}
			for _, p := range []struct {
				probe *corev1.Probe
				path  string
			}{{c.ReadinessProbe, "/readyz"}, {c.LivenessProbe, "/healthz"}} {
				if p.probe == nil || p.probe.HTTPGet == nil {
					t.Errorf("no HTTP probe for %s", p.path)
					continue
				}
				if g := p.probe.HTTPGet; g.Path != p.path || g.Port != intstr.FromString("http") {
					t.Errorf("probe %s on %v, want %s on port http", g.Path, g.Port, p.path)
				}
			}
			if diff := cmp.Diff(tc.wantResources, c.Resources); diff != "" {
				t.Errorf("resources (-want +got):\n%s", diff)
			}
			wantSC := &corev1.SecurityContext{
				RunAsNonRoot:             ptr.To(true),
				RunAsUser:                ptr.To[int64](65532),
				RunAsGroup:               ptr.To[int64](65532),
				ReadOnlyRootFilesystem:   ptr.To(true),
				AllowPrivilegeEscalation: ptr.To(false),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			}
			if diff := cmp.Diff(wantSC, c.SecurityContext); diff != "" {
				t.Errorf("container security context (-want +got):\n%s", diff)
			}
			if c.SecurityContext.Privileged != nil || c.SecurityContext.Capabilities.Add != nil {
				t.Errorf("container must not be privileged or add capabilities")
			}
		})
	}
}

// TestBuildLimiterRBAC shows least privilege: the limiter may read its one
// ConfigMap and nothing else.
func TestBuildLimiterRBAC(t *testing.T) {
	fleet := resFleet("sluice-system", "default")
	role := resources.BuildLimiterRole(fleet)
	wantRules := []rbacv1.PolicyRule{{
		APIGroups:     []string{""},
		Resources:     []string{"configmaps"},
		ResourceNames: []string{"default-snapshot"},
		Verbs:         []string{"get", "list", "watch"},
	}}
	if diff := cmp.Diff(wantRules, role.Rules); diff != "" {
		t.Errorf("role rules (-want +got):\n%s", diff)
	}
	for _, r := range role.Rules {
		for _, s := range slices.Concat(r.APIGroups, r.Resources, r.ResourceNames, r.Verbs) {
			if strings.Contains(s, "*") {
				t.Errorf("wildcard %q in rule %+v", s, r)
			}
		}
	}
	rb := resources.BuildLimiterRoleBinding(fleet)
	wantRef := rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "default-limiter"}
	if diff := cmp.Diff(wantRef, rb.RoleRef); diff != "" {
		t.Errorf("roleRef (-want +got):\n%s", diff)
	}
	wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "default-limiter", Namespace: "sluice-system"}}
	if diff := cmp.Diff(wantSubjects, rb.Subjects); diff != "" {
		t.Errorf("subjects (-want +got):\n%s", diff)
	}
	if sa := resources.BuildLimiterServiceAccount(fleet); sa.Name != rb.Subjects[0].Name {
		t.Errorf("ServiceAccount %q is not the bound subject", sa.Name)
	}
}

// TestBuildLimiterAuthDelegation: one ClusterRoleBinding grants
// system:auth-delegator (TokenReview and SubjectAccessReview, for the admin
// plane's --admin-auth=kubernetes) to every fleet's limiter ServiceAccount,
// sorted, and to no fleet being deleted.
func TestBuildLimiterAuthDelegation(t *testing.T) {
	gone := resFleet("a", "gone")
	gone.DeletionTimestamp = ptr.To(metav1.Now())
	crb := resources.BuildLimiterAuthDelegation([]v1alpha1.LimiterFleet{
		*resFleet("shop", "edge"), *gone, *resFleet("payments", "default"), *resFleet("payments", "batch")})
	want := []rbacv1.Subject{
		{Kind: "ServiceAccount", Namespace: "payments", Name: "batch-limiter"},
		{Kind: "ServiceAccount", Namespace: "payments", Name: "default-limiter"},
		{Kind: "ServiceAccount", Namespace: "shop", Name: "edge-limiter"},
	}
	if diff := cmp.Diff(want, crb.Subjects); diff != "" {
		t.Errorf("subjects (-want +got):\n%s", diff)
	}
	if crb.Name != "sluice-limiter-auth-delegator" || crb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:auth-delegator"}) {
		t.Errorf("ClusterRoleBinding %s to %+v", crb.Name, crb.RoleRef)
	}
	if got := resources.BuildLimiterAuthDelegation(nil); got.Subjects == nil || len(got.Subjects) != 0 {
		t.Errorf("no fleets: subjects %#v, want [] (the binding stays, granting nothing)", got.Subjects)
	}
}

// TestBuildLimiterService pins the Services' ports and selector.
func TestBuildLimiterService(t *testing.T) {
	fleet := resFleet("sluice-system", "default")
	svc := resources.BuildLimiterService(fleet)
	want := corev1.ServiceSpec{
		Type:     corev1.ServiceTypeClusterIP,
		Selector: map[string]string{"app.kubernetes.io/name": "sluice-limiter", "app.kubernetes.io/instance": "default"},
		Ports: []corev1.ServicePort{
			{Name: "grpc", Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("grpc"), Port: 8081, TargetPort: intstr.FromString("grpc")},
			{Name: "http", Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("http"), Port: 8080, TargetPort: intstr.FromString("http")},
			{Name: "admin", Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("https"), Port: 8082, TargetPort: intstr.FromString("admin")},
		},
	}
	if diff := cmp.Diff(want, svc.Spec); diff != "" {
		t.Errorf("service spec (-want +got):\n%s", diff)
	}
	// The headless Service: the same pods and data plane ports (gateways
	// have no business on the admin port), no cluster IP, only ready pods
	// in its DNS answers.
	headless := resources.BuildLimiterHeadlessService(fleet)
	want.ClusterIP = corev1.ClusterIPNone
	want.Ports = want.Ports[:2]
	if diff := cmp.Diff(want, headless.Spec); diff != "" || headless.Name != "default-limiter-headless" {
		t.Errorf("headless service %s spec (-want +got):\n%s", headless.Name, diff)
	}
	// The Service's target ports name the container's ports.
	dep := resources.BuildLimiterDeployment(fleet, resources.LimiterDeploymentOptions{DefaultImage: resDefaultImage, StoreURL: "memory"})
	names := map[string]bool{}
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		names[p.Name] = true
	}
	for _, p := range svc.Spec.Ports {
		if !names[p.TargetPort.StrVal] {
			t.Errorf("service port %s targets %q, which the container does not have", p.Name, p.TargetPort.StrVal)
		}
	}
}

func resGunzip(t *testing.T, data []byte) ([]byte, gzip.Header) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return out, zr.Header
}

// TestBuildSnapshotConfigMap shows where the document goes on each side of
// the compression threshold, that compressed documents decompress to the
// input, and that compression is deterministic.
func TestBuildSnapshotConfigMap(t *testing.T) {
	fleet := resFleet("sluice-system", "default")
	empty, emptyVersion := config.EncodeDocument(config.Document{})
	big, bigVersion := resBigDocument(2000)
	t.Logf("2000 policies: %d bytes of canonical JSON", len(big))
	cases := []struct {
		name       string
		document   []byte
		version    string
		compressed bool
	}{
		{"empty snapshot", empty, emptyVersion, false},
		{"at the threshold", bytes.Repeat([]byte("a"), config.MaxPlainDocument), "v-at", false},
		{"one byte over", bytes.Repeat([]byte("a"), config.MaxPlainDocument+1), "v-over", true},
		{"2000 policies", big, bigVersion, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cm := resources.BuildSnapshotConfigMap(fleet, tc.document, tc.version)
			if cm.Name != "default-snapshot" || cm.Namespace != "sluice-system" {
				t.Errorf("ConfigMap %s/%s", cm.Namespace, cm.Name)
			}
			if got := cm.Annotations["ratelimit.sluice.dev/snapshot-version"]; got != tc.version {
				t.Errorf("version annotation %q, want %q", got, tc.version)
			}
			if got := cm.Data[config.VersionKey]; got != tc.version {
				t.Errorf("data[%s] = %q, want %q", config.VersionKey, got, tc.version)
			}
			if cm.Immutable != nil {
				t.Errorf("the snapshot ConfigMap is updated in place; it must not be immutable")
			}
			if !tc.compressed {
				if got := cm.Data[config.DocumentKey]; got != string(tc.document) {
					t.Errorf("data[%s] holds %d bytes, want the %d-byte document", config.DocumentKey, len(got), len(tc.document))
				}
				if len(cm.BinaryData) > 0 {
					t.Errorf("binaryData %v, want none", slices.Collect(maps.Keys(cm.BinaryData)))
				}
				if want := []string{config.DocumentKey, config.VersionKey}; !slices.Equal(slices.Sorted(maps.Keys(cm.Data)), want) {
					t.Errorf("data keys %v, want %v", slices.Sorted(maps.Keys(cm.Data)), want)
				}
				return
			}
			if _, ok := cm.Data[config.DocumentKey]; ok {
				t.Errorf("a compressed document must not also be in data[%s]", config.DocumentKey)
			}
			gz := cm.BinaryData[config.DocumentGzipKey]
			got, header := resGunzip(t, gz)
			if !bytes.Equal(got, tc.document) {
				t.Fatalf("binaryData[%s] decompresses to %d bytes, want the %d-byte document", config.DocumentGzipKey, len(got), len(tc.document))
			}
			if !header.ModTime.IsZero() || header.Name != "" || header.Comment != "" || len(header.Extra) > 0 {
				t.Errorf("gzip header %+v: want no time, name, comment or extra", header)
			}
			again := resources.BuildSnapshotConfigMap(fleet, slices.Clone(tc.document), tc.version)
			if !bytes.Equal(gz, again.BinaryData[config.DocumentGzipKey]) {
				t.Errorf("two compressions of one document differ")
			}
			// A ConfigMap holds at most 1 MiB in all.
			if len(gz) >= 1<<20 {
				t.Errorf("compressed document is %d bytes, too large for a ConfigMap", len(gz))
			}
			t.Logf("%d bytes compressed to %d", len(tc.document), len(gz))
		})
	}
}

// TestStoreURL maps each redis section to the limiter's --store, and checks
// that the limiter's own parser accepts the result.
func TestStoreURL(t *testing.T) {
	cases := []struct {
		name    string
		mutate  func(*v1alpha1.LimiterFleet)
		want    string
		wantErr string
		is      error
	}{
		{name: "mode unset is None", mutate: func(*v1alpha1.LimiterFleet) {}, want: "memory"},
		{name: "None", mutate: func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Mode = ptr.To(v1alpha1.RedisNone) }, want: "memory"},
		{name: "External, one server", mutate: resExternal(nil, "redis.cache.svc:6379"), want: "redis://redis.cache.svc:6379"},
		{name: "External, IPv6 server", mutate: resExternal(nil, "[fd00::1]:6379"), want: "redis://[fd00::1]:6379"},
		{name: "External, one server, cluster false", mutate: resExternal(ptr.To(false), "r:6379"), want: "redis://r:6379"},
		{name: "External, one cluster seed", mutate: resExternal(ptr.To(true), "r:6379"), want: "redis-cluster://r:6379"},
		{
			name:   "External, several seeds are a cluster",
			mutate: resExternal(nil, "r-0:6379", "r-1:6379", "r-2:6379"),
			want:   "redis-cluster://r-0:6379,r-1:6379,r-2:6379",
		},
		{name: "External, several seeds, cluster true", mutate: resExternal(ptr.To(true), "r-1:6379", "r-0:6379"), want: "redis-cluster://r-1:6379,r-0:6379"},
		{name: "External without addresses", mutate: resExternal(nil), wantErr: "spec.redis.addresses is required"},
		{name: "External, several addresses, cluster false", mutate: resExternal(ptr.To(false), "a:1", "b:1"), wantErr: "must hold one address"},
		{
			name:   "Cluster: every ordinal of the first three shards by DNS name (a replica each by default), ordinal 0 first",
			mutate: func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Mode = ptr.To(v1alpha1.RedisCluster) },
			want: "redis-cluster://f-redis-0-0.f-redis.ns.svc:6379,f-redis-1-0.f-redis.ns.svc:6379,f-redis-2-0.f-redis.ns.svc:6379," +
				"f-redis-0-1.f-redis.ns.svc:6379,f-redis-1-1.f-redis.ns.svc:6379,f-redis-2-1.f-redis.ns.svc:6379",
		},
		{
			name: "Cluster, 5 shards: the same seeds",
			mutate: func(f *v1alpha1.LimiterFleet) {
				f.Spec.Redis.Mode, f.Spec.Redis.Shards = ptr.To(v1alpha1.RedisCluster), ptr.To[int32](5)
			},
			want: "redis-cluster://f-redis-0-0.f-redis.ns.svc:6379,f-redis-1-0.f-redis.ns.svc:6379,f-redis-2-0.f-redis.ns.svc:6379," +
				"f-redis-0-1.f-redis.ns.svc:6379,f-redis-1-1.f-redis.ns.svc:6379,f-redis-2-1.f-redis.ns.svc:6379",
		},
		{
			name: "Cluster without replicas: ordinal 0 only",
			mutate: func(f *v1alpha1.LimiterFleet) {
				f.Spec.Redis.Mode, f.Spec.Redis.ReplicasPerShard = ptr.To(v1alpha1.RedisCluster), ptr.To[int32](0)
			},
			want: "redis-cluster://f-redis-0-0.f-redis.ns.svc:6379,f-redis-1-0.f-redis.ns.svc:6379,f-redis-2-0.f-redis.ns.svc:6379",
		},
		{
			name: "Cluster with auth: no password in the URL (the limiter reads it from its environment)",
			mutate: func(f *v1alpha1.LimiterFleet) {
				f.Spec.Redis.Mode, f.Spec.Redis.Auth = ptr.To(v1alpha1.RedisCluster), &v1alpha1.RedisAuth{SecretName: "pw"}
			},
			want: "redis-cluster://f-redis-0-0.f-redis.ns.svc:6379,f-redis-1-0.f-redis.ns.svc:6379,f-redis-2-0.f-redis.ns.svc:6379," +
				"f-redis-0-1.f-redis.ns.svc:6379,f-redis-1-1.f-redis.ns.svc:6379,f-redis-2-1.f-redis.ns.svc:6379",
		},
		{
			name: "External over TLS, one server",
			mutate: func(f *v1alpha1.LimiterFleet) {
				resExternal(nil, "redis.example.com:6380")(f)
				f.Spec.Redis.TLS = &v1alpha1.RedisTLS{}
			},
			want: "rediss://redis.example.com:6380",
		},
		{
			name: "External over TLS, a cluster",
			mutate: func(f *v1alpha1.LimiterFleet) {
				resExternal(nil, "r-0:6380", "r-1:6380")(f)
				f.Spec.Redis.TLS = &v1alpha1.RedisTLS{}
			},
			want: "rediss-cluster://r-0:6380,r-1:6380",
		},
		{name: "unknown mode", mutate: func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Mode = ptr.To(v1alpha1.RedisMode("Sentinel")) }, wantErr: `"Sentinel"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resources.StoreURL(resFleet("ns", "f", tc.mutate))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("StoreURL = %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				if tc.is != nil && !errors.Is(err, tc.is) {
					t.Errorf("error %v is not %v", err, tc.is)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("StoreURL = %q, %v; want %q", got, err, tc.want)
			}
			if got == "memory" {
				return
			}
			opts, err := redis.ParseURL(got)
			if err != nil {
				t.Fatalf("the limiter rejects --store=%s: %v", got, err)
			}
			f := resFleet("ns", "f", tc.mutate)
			wantCluster, wantAddrs := f.Spec.RedisIsCluster(), f.Spec.Redis.Addresses
			if f.Spec.EffectiveRedisMode() == v1alpha1.RedisCluster {
				wantCluster, wantAddrs = true, resources.RedisSeeds(f)
			}
			if opts.Password != "" || opts.Username != "" {
				t.Errorf("credentials in --store=%s", got)
			}
			if (opts.TLS != nil) != (f.Spec.Redis.TLS != nil) {
				t.Errorf("--store=%s: TLS %v, want %v", got, opts.TLS != nil, f.Spec.Redis.TLS != nil)
			}
			if opts.Cluster != wantCluster || !slices.Equal(opts.Addrs, wantAddrs) {
				t.Errorf("the limiter reads --store=%s as cluster=%v addrs=%v", got, opts.Cluster, opts.Addrs)
			}
		})
	}
}

// TestBuildSnapshotConfigMapLimiterDecodes shows that a limiter loads what the
// builder writes, plain and compressed, at the version the builder names.
func TestBuildSnapshotConfigMapLimiterDecodes(t *testing.T) {
	fleet := resFleet("sluice-system", "default")
	for _, n := range []int{0, 3, 2000} {
		t.Run(fmt.Sprintf("%d policies", n), func(t *testing.T) {
			doc, version := resBigDocument(n)
			cm := resources.BuildSnapshotConfigMap(fleet, doc, version)
			snap, err := kube.Decode(cm)
			if err != nil {
				t.Fatalf("the limiter rejects the ConfigMap: %v", err)
			}
			if snap.Version != version || len(snap.Policies) != n {
				t.Errorf("the limiter loads version %s with %d policies, want %s with %d", snap.Version, len(snap.Policies), version, n)
			}
		})
	}
}

func TestLimiterArgsTopDescriptors(t *testing.T) {
	base := resources.LimiterArgs(resFleet("ns", "f"), "memory")
	for _, tc := range []struct {
		name  string
		stats *v1alpha1.FleetStats
		want  []string
	}{
		{"no stats section", nil, nil},
		{"zero is off", &v1alpha1.FleetStats{TopDescriptors: ptr.To[int32](0), DescriptorValues: ptr.To(v1alpha1.DescriptorValuesTruncate)}, nil},
		{"hash by default", &v1alpha1.FleetStats{TopDescriptors: ptr.To[int32](5)}, []string{"--top-descriptors=5"}},
		{"truncate", &v1alpha1.FleetStats{TopDescriptors: ptr.To[int32](3), DescriptorValues: ptr.To(v1alpha1.DescriptorValuesTruncate), TruncateTo: ptr.To[int32](12)},
			[]string{"--top-descriptors=3", "--top-descriptor-values=truncate", "--top-descriptor-truncate=12"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := resFleet("ns", "f", func(f *v1alpha1.LimiterFleet) { f.Spec.Stats = tc.stats })
			got := resources.LimiterArgs(f, "memory")
			if diff := cmp.Diff(append(slices.Clone(base), tc.want...), got); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLimiterArgsTrustedProxies(t *testing.T) {
	f := resFleet("ns", "f", func(f *v1alpha1.LimiterFleet) { f.Spec.TrustedProxies = []string{"10.0.0.0/8", "fd00::1"} })
	got := resources.LimiterArgs(f, "memory")
	if !slices.Contains(got, "--trusted-proxies=10.0.0.0/8,fd00::1") {
		t.Errorf("args %q lack --trusted-proxies", got)
	}
	if got := resources.LimiterArgs(resFleet("ns", "f"), "memory"); slices.ContainsFunc(got, func(a string) bool { return strings.HasPrefix(a, "--trusted-proxies") }) {
		t.Errorf("args %q: --trusted-proxies without spec.trustedProxies", got)
	}
}

// TestLimiterRedisCredentialsAndCA: redis.auth reaches the limiter as env
// vars from the Secret (the user too, with usernameKey), redis.tls's CA as
// a read-only Secret volume named in --redis-ca-file, and the server name
// as --redis-tls-server-name; without them, none of it.
// TestGoMemLimitEnv: the limiter container gets GOMEMLIMIT, 90% of its
// memory limit in bytes (the Go runtime's soft limit, so it collects
// before the kernel kills it at the limit), and none without a limit.
func TestGoMemLimitEnv(t *testing.T) {
	for _, tc := range []struct {
		limit string
		want  []corev1.EnvVar
	}{
		{"256Mi", []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: "241591860"}}},
		{"1Gi", []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: "966367620"}}},
		{"", nil},
	} {
		f := resFleet("ns", "f", func(f *v1alpha1.LimiterFleet) {
			f.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
			if tc.limit != "" {
				f.Spec.Resources.Limits[corev1.ResourceMemory] = resource.MustParse(tc.limit)
			}
		})
		c := resources.BuildLimiterDeployment(f, resources.LimiterDeploymentOptions{DefaultImage: "limiter:test", StoreURL: "memory"}).Spec.Template.Spec.Containers[0]
		if diff := cmp.Diff(tc.want, c.Env); diff != "" {
			t.Errorf("memory limit %q: env (-want +got):\n%s", tc.limit, diff)
		}
	}
}

func TestLimiterRedisCredentialsAndCA(t *testing.T) {
	fleet := resFleet("ns", "f", func(f *v1alpha1.LimiterFleet) {
		resExternal(nil, "redis.example.com:6380")(f)
		f.Spec.Redis.Auth = &v1alpha1.RedisAuth{SecretName: "redis-creds", Key: "pw", UsernameKey: ptr.To("user")}
		f.Spec.Redis.TLS = &v1alpha1.RedisTLS{CASecretName: ptr.To("redis-ca"), ServerName: ptr.To("redis.example.com")}
	})
	dep := resources.BuildLimiterDeployment(fleet, resources.LimiterDeploymentOptions{DefaultImage: "limiter:test", StoreURL: "rediss://redis.example.com:6380"})
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	want := []corev1.EnvVar{
		{Name: limiterwire.RedisPasswordEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "redis-creds"}, Key: "pw"}}},
		{Name: limiterwire.RedisUsernameEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "redis-creds"}, Key: "user"}}},
		{Name: "GOMEMLIMIT", Value: "241591860"}, // 90% of the default 256Mi limit
	}
	if diff := cmp.Diff(want, c.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	if len(pod.Volumes) != 2 || pod.Volumes[0].Secret == nil || pod.Volumes[0].Secret.SecretName != "redis-ca" ||
		!cmp.Equal(pod.Volumes[0].Secret.Items, []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}) {
		t.Errorf("volumes %+v: want the ca.crt of Secret redis-ca", pod.Volumes)
	}
	if len(c.VolumeMounts) != 2 || !c.VolumeMounts[0].ReadOnly || c.VolumeMounts[0].Name != pod.Volumes[0].Name {
		t.Errorf("mounts %+v: want the CA volume, read-only, and the admin TLS one", c.VolumeMounts)
	}
	args := strings.Join(c.Args, " ")
	for _, a := range []string{"--store=rediss://redis.example.com:6380", "--redis-ca-file=" + c.VolumeMounts[0].MountPath + "/ca.crt", "--redis-tls-server-name=redis.example.com"} {
		if !strings.Contains(args, a) {
			t.Errorf("args %q lack %s", args, a)
		}
	}

	plain := resources.BuildLimiterDeployment(resFleet("ns", "f", resExternal(nil, "r:6379")), resources.LimiterDeploymentOptions{DefaultImage: "limiter:test", StoreURL: "redis://r:6379"})
	pc := plain.Spec.Template.Spec.Containers[0]
	if len(pc.Env) != 1 || pc.Env[0].Name != "GOMEMLIMIT" || len(pc.VolumeMounts) != 1 || len(plain.Spec.Template.Spec.Volumes) != 1 || strings.Contains(strings.Join(pc.Args, " "), "--redis-") {
		t.Errorf("without auth and tls: env %v, mounts %v, args %q", pc.Env, pc.VolumeMounts, pc.Args)
	}
}
