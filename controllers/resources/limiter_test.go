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

package resources_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
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

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
	"github.com/sluice-dev/sluice/internal/policytest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/config/kube"
)

// resBuildAll builds every object of fleet, with document as its snapshot.
func resBuildAll(t *testing.T, fleet *v1beta1.LimiterFleet, document []byte) []client.Object {
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
	crb := resources.BuildLimiterAuthDelegation([]v1beta1.LimiterFleet{
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
