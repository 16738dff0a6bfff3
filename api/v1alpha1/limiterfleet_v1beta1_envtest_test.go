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

package v1alpha1_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// These tests run against the envtest API server with the conversion
// webhook (TestMain): LimiterFleet is stored as v1beta1, and every
// v1alpha1 read and write converts through the webhook.

// TestFleetConversionWebhook creates fuzzed fleets of every store as
// v1alpha1, reads them as v1beta1 and back as v1alpha1, identical to what
// the API server admitted; and creates every v1beta1 sample as v1beta1,
// reads it as v1alpha1, writes that back, and reads the v1beta1 object
// unchanged.
func TestFleetConversionWebhook(t *testing.T) {
	ns := createNamespace(t, "fleet-conversion")
	rng := rand.New(rand.NewPCG(26, 2))
	for i := range 24 {
		f := randomAlphaFleet(rng, i, i%2 == 0)
		t.Run("alpha-"+f.Name, func(t *testing.T) {
			t.Parallel()
			f.Namespace = ns
			if err := k8sClient.Create(t.Context(), f); err != nil {
				t.Fatalf("creating the v1alpha1 fleet: %v", err)
			}
			deleteAtCleanup(t, f)
			key := client.ObjectKeyFromObject(f)
			beta := &v1beta1.LimiterFleet{}
			if err := k8sClient.Get(t.Context(), key, beta); err != nil {
				t.Fatalf("reading it as v1beta1: %v", err)
			}
			want := map[v1alpha1.RedisMode]v1beta1.StoreType{v1alpha1.RedisNone: v1beta1.StoreMemory, v1alpha1.RedisCluster: v1beta1.StoreCluster, v1alpha1.RedisExternal: v1beta1.StoreExternal}
			if got := beta.Spec.Store.Type; got != want[f.Spec.EffectiveRedisMode()] {
				t.Errorf("as v1beta1: store type %q, want %q", got, want[f.Spec.EffectiveRedisMode()])
			}
			back := &v1alpha1.LimiterFleet{}
			if err := k8sClient.Get(t.Context(), key, back); err != nil {
				t.Fatalf("reading it back as v1alpha1: %v", err)
			}
			if diff := cmp.Diff(f.Spec, back.Spec); diff != "" {
				t.Errorf("v1alpha1 -> v1beta1 -> v1alpha1 through the API server is not identical (-created +read back):\n%s", diff)
			}
		})
	}
	_, samples := sampleFleets(t)
	for i := range samples {
		b := samples[i].DeepCopy()
		t.Run("beta-sample-"+b.Name, func(t *testing.T) {
			t.Parallel()
			b.Name, b.Namespace = fmt.Sprintf("sample-%d", i), ns
			if err := k8sClient.Create(t.Context(), b); err != nil {
				t.Fatalf("creating the v1beta1 sample: %v", err)
			}
			deleteAtCleanup(t, b)
			key := client.ObjectKeyFromObject(b)
			alpha := &v1alpha1.LimiterFleet{}
			if err := k8sClient.Get(t.Context(), key, alpha); err != nil {
				t.Fatalf("reading it as v1alpha1: %v", err)
			}
			if err := k8sClient.Update(t.Context(), alpha); err != nil {
				t.Fatalf("writing the v1alpha1 object back: %v", err)
			}
			back := &v1beta1.LimiterFleet{}
			if err := k8sClient.Get(t.Context(), key, back); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(b.Spec, back.Spec); diff != "" || len(back.Annotations) != 0 {
				t.Errorf("v1beta1 -> v1alpha1 -> v1beta1 is not identical (-created +read back):\n%s\nannotations %v", diff, back.Annotations)
			}
		})
	}
}

// TestV1beta1FleetCRDRejects shows the message of each CEL rule of the
// v1beta1 LimiterFleet, and that each rule's edge is accepted.
func TestV1beta1FleetCRDRejects(t *testing.T) {
	ns := createNamespace(t, "v1beta1-fleet-rejects")
	cluster := func(s *v1beta1.LimiterFleetSpec) *v1beta1.ClusterStore {
		s.Store = v1beta1.Store{Type: v1beta1.StoreCluster, Cluster: &v1beta1.ClusterStore{}}
		return s.Store.Cluster
	}
	cases := []struct {
		name   string
		change func(f *v1beta1.LimiterFleet)
		msg    string
	}{
		{"External without external", func(f *v1beta1.LimiterFleet) { f.Spec.Store.Type = v1beta1.StoreExternal },
			"spec.store.external is required when spec.store.type is External, and only allowed then"},
		{"external on Memory", func(f *v1beta1.LimiterFleet) {
			f.Spec.Store.External = &v1beta1.ExternalStore{Addresses: []string{"redis:6379"}}
		}, "spec.store.external is required when spec.store.type is External, and only allowed then"},
		{"cluster on External", func(f *v1beta1.LimiterFleet) {
			f.Spec.Store = v1beta1.Store{Type: v1beta1.StoreExternal, External: &v1beta1.ExternalStore{Addresses: []string{"redis:6379"}}, Cluster: &v1beta1.ClusterStore{}}
		}, "spec.store.cluster applies only when spec.store.type is Cluster"},
		{"two addresses, cluster false", func(f *v1beta1.LimiterFleet) {
			f.Spec.Store = v1beta1.Store{Type: v1beta1.StoreExternal, External: &v1beta1.ExternalStore{Addresses: []string{"a:6379", "b:6379"}, Cluster: ptr.To(false)}}
		}, "spec.store.external.addresses must hold one address when spec.store.external.cluster is false"},
		{"bad address", func(f *v1beta1.LimiterFleet) {
			f.Spec.Store = v1beta1.Store{Type: v1beta1.StoreExternal, External: &v1beta1.ExternalStore{Addresses: []string{"redis:99999"}}}
		}, "each address must be host:port with a port from 1 to 65535"},
		{"2 shards", func(f *v1beta1.LimiterFleet) { cluster(&f.Spec).Shards = ptr.To[int32](2) },
			"spec.store.cluster.shards must be at least 3"},
		{"nodeTimeout 61s", func(f *v1beta1.LimiterFleet) { cluster(&f.Spec).NodeTimeout = dur("61s") },
			"spec.store.cluster.nodeTimeout must be between 1s and 60s"},
		{"nodeTimeout in Go's format only", func(f *v1beta1.LimiterFleet) { cluster(&f.Spec).NodeTimeout = dur("1.5s") },
			"should match '^([0-9]{1,5}(h|m|s|ms)){1,4}$'"},
		{"maxMemory under 1Mi", func(f *v1beta1.LimiterFleet) { cluster(&f.Spec).MaxMemory = ptr.To(resource.MustParse("1Ki")) },
			"spec.store.cluster.maxMemory must be at least 1Mi"},
		{"name over 43 for Cluster", func(f *v1beta1.LimiterFleet) {
			f.Name = "a" + strings.Repeat("b", 43)
			cluster(&f.Spec)
		}, "metadata.name must be at most 43 characters when spec.store.type is Cluster"},
		{"name over 46", func(f *v1beta1.LimiterFleet) { f.Name = "a" + strings.Repeat("b", 46) },
			"metadata.name must be a DNS label of at most 46 characters"},
		{"bad secret name", func(f *v1beta1.LimiterFleet) {
			cluster(&f.Spec).Auth = &v1beta1.SecretKeyRef{SecretName: "Bad_Name"}
		}, "secretName must be a Secret name"},
		{"bad trusted proxy", func(f *v1beta1.LimiterFleet) {
			f.Spec.DataPlane = &v1beta1.DataPlane{TrustedProxies: []string{"10.0.0.0/33"}}
		}, "each trusted proxy must be a CIDR"},
		{"client with no selector", func(f *v1beta1.LimiterFleet) {
			f.Spec.DataPlane = &v1beta1.DataPlane{Clients: []v1beta1.FleetClient{{}}}
		}, "a client needs a namespaceSelector, a podSelector or both"},
		{"header mapping without header", func(f *v1beta1.LimiterFleet) {
			f.Spec.DataPlane = &v1beta1.DataPlane{ForwardAuth: []v1beta1.ForwardAuth{{Domain: "d", Descriptors: []v1beta1.ForwardAuthDescriptor{{Key: "k", From: v1beta1.FromHeader}}}}}
		}, "header is required when from is Header"},
		{"header on Path", func(f *v1beta1.LimiterFleet) {
			f.Spec.DataPlane = &v1beta1.DataPlane{ForwardAuth: []v1beta1.ForwardAuth{{Domain: "d", Descriptors: []v1beta1.ForwardAuthDescriptor{{Key: "k", From: v1beta1.FromPath, Header: ptr.To("X-A")}}}}}
		}, "header applies only when from is Header"},
		{"Selector without selector", func(f *v1beta1.LimiterFleet) {
			f.Spec.Domains = []v1beta1.FleetDomain{{Name: "d", AllowedNamespaces: &v1beta1.AllowedNamespaces{From: ptr.To(v1beta1.NamespacesFromSelector)}}}
		}, "allowedNamespaces.selector is required when from is Selector, and only allowed then"},
		{"lease is idempotency", func(f *v1beta1.LimiterFleet) {
			f.Spec.Entries = &v1beta1.FleetEntries{Lease: ptr.To("x"), Idempotency: ptr.To("x")}
		}, "spec.entries.lease and spec.entries.idempotency must differ"},
		{"priority is lease", func(f *v1beta1.LimiterFleet) {
			f.Spec.Entries = &v1beta1.FleetEntries{Lease: ptr.To("x"), Priority: ptr.To("x")}
		}, "spec.entries.priority must differ from spec.entries.lease and spec.entries.idempotency"},
		{"accept is the default idempotency", func(f *v1beta1.LimiterFleet) {
			f.Spec.Entries = &v1beta1.FleetEntries{Accept: ptr.To("idempotency_key")}
		}, "spec.entries.accept must differ"},
		{"truncateTo with Hash", func(f *v1beta1.LimiterFleet) {
			f.Spec.Stats = &v1beta1.FleetStats{TruncateTo: ptr.To[int32](4)}
		}, "spec.stats.truncateTo applies only when spec.stats.descriptorValues is Truncate"},
		{"tracing endpoint with a path", func(f *v1beta1.LimiterFleet) {
			f.Spec.Tracing = &v1beta1.FleetTracing{Endpoint: "http://otel:4317/v1/traces"}
		}, "spec.tracing.endpoint must be http:// or https:// then host:port"},
		{"bad override namespace", func(f *v1beta1.LimiterFleet) {
			f.Spec.TenantBudget = &v1beta1.TenantBudgets{Overrides: []v1beta1.TenantBudgetOverride{{Namespace: "Team_A"}}}
		}, "spec.tenantBudget.overrides[].namespace must be a namespace name"},
		{"denyStatus 500", func(f *v1beta1.LimiterFleet) {
			f.Spec.DataPlane = &v1beta1.DataPlane{ForwardAuth: []v1beta1.ForwardAuth{{Domain: "d", DenyStatus: ptr.To[int32](500), Descriptors: []v1beta1.ForwardAuthDescriptor{{Key: "k", From: v1beta1.FromPath}}}}}
		}, "denyStatus must be a 4xx status, from 400 to 499"},
		{"bad secret key", func(f *v1beta1.LimiterFleet) {
			cluster(&f.Spec).Auth = &v1beta1.SecretKeyRef{SecretName: "s", Key: "a/b"}
		}, "key must be a Secret key"},
		{"bad username key", func(f *v1beta1.LimiterFleet) {
			f.Spec.Store = v1beta1.Store{Type: v1beta1.StoreExternal, External: &v1beta1.ExternalStore{Addresses: []string{"redis:6379"},
				Auth: &v1beta1.ExternalAuth{SecretKeyRef: v1beta1.SecretKeyRef{SecretName: "s"}, UsernameKey: ptr.To("a b")}}}
		}, "usernameKey must be a Secret key"},
		{"bad cluster CA Secret", func(f *v1beta1.LimiterFleet) {
			cluster(&f.Spec).TLS = &v1beta1.ClusterTLS{CASecretName: ptr.To("CA")}
		}, "caSecretName must be a Secret name"},
		{"bad external CA Secret", func(f *v1beta1.LimiterFleet) {
			f.Spec.Store = v1beta1.Store{Type: v1beta1.StoreExternal, External: &v1beta1.ExternalStore{Addresses: []string{"redis:6379"},
				TLS: &v1beta1.ExternalTLS{CASecretName: ptr.To("CA")}}}
		}, "caSecretName must be a Secret name"},
		{"bad CA key", func(f *v1beta1.LimiterFleet) {
			f.Spec.Store = v1beta1.Store{Type: v1beta1.StoreExternal, External: &v1beta1.ExternalStore{Addresses: []string{"redis:6379"},
				TLS: &v1beta1.ExternalTLS{CAKey: ptr.To("ca/crt")}}}
		}, "caKey must be a Secret key"},
		{"bad server name", func(f *v1beta1.LimiterFleet) {
			f.Spec.Store = v1beta1.Store{Type: v1beta1.StoreExternal, External: &v1beta1.ExternalStore{Addresses: []string{"redis:6379"},
				TLS: &v1beta1.ExternalTLS{ServerName: ptr.To("-redis")}}}
		}, "serverName must be a DNS name"},
		{"storage of 0", func(f *v1beta1.LimiterFleet) {
			cluster(&f.Spec).Storage = &v1beta1.RedisStorage{Size: resource.MustParse("0")}
		}, "spec.store.cluster.storage.size must be greater than zero"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bad-%d", i), Namespace: ns}}
			tc.change(f)
			err := k8sClient.Create(t.Context(), f)
			if err == nil {
				deleteAtCleanup(t, f)
				t.Fatalf("the API server accepted %+v", f.Spec)
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("API server: got %v, want Invalid with %q", err, tc.msg)
			}
		})
	}
	// Values the Go types can't hold.
	for i, tc := range []struct {
		name    string
		cluster map[string]any
		msg     string
	}{
		{"maxMemory not a quantity", map[string]any{"maxMemory": "lots"}, "spec.store.cluster.maxMemory must be a quantity such as 400Mi"},
		{"storage size not a quantity", map[string]any{"storage": map[string]any{"size": "big"}}, "spec.store.cluster.storage.size must be a quantity such as 1Gi or 500Mi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1beta1.GroupVersion.String(), "kind": "LimiterFleet",
				"metadata": map[string]any{"name": fmt.Sprintf("raw-%d", i), "namespace": ns},
				"spec":     map[string]any{"store": map[string]any{"type": "Cluster", "cluster": tc.cluster}},
			}}
			err := k8sClient.Create(t.Context(), u)
			if err == nil {
				deleteAtCleanup(t, u)
				t.Fatalf("the API server accepted %v", u.Object["spec"])
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("API server: got %v, want Invalid with %q", err, tc.msg)
			}
		})
	}
	t.Run("transitions", func(t *testing.T) {
		f := &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Name: "grows", Namespace: ns}}
		c := cluster(&f.Spec)
		c.Shards, c.Storage = ptr.To[int32](4), &v1beta1.RedisStorage{Size: resource.MustParse("1Gi")}
		if err := k8sClient.Create(t.Context(), f); err != nil {
			t.Fatalf("API server rejected a Cluster fleet: %v", err)
		}
		deleteAtCleanup(t, f)
		for _, tc := range []struct {
			name   string
			change func(c *v1beta1.ClusterStore)
			msg    string
		}{
			{"shards lowered", func(c *v1beta1.ClusterStore) { c.Shards = ptr.To[int32](3) }, "spec.store.cluster.shards cannot be lowered"},
			{"shards reset to the default", func(c *v1beta1.ClusterStore) { c.Shards = nil }, "spec.store.cluster.shards cannot be lowered"},
			{"storage changed", func(c *v1beta1.ClusterStore) { c.Storage.Size = resource.MustParse("2Gi") }, "spec.store.cluster.storage cannot change while spec.store.type is Cluster"},
			{"storage removed", func(c *v1beta1.ClusterStore) { c.Storage = nil }, "spec.store.cluster.storage cannot change while spec.store.type is Cluster"},
			{"tls added", func(c *v1beta1.ClusterStore) { c.TLS = &v1beta1.ClusterTLS{} }, "spec.store.cluster.tls cannot be added or removed"},
		} {
			edit := f.DeepCopy()
			tc.change(edit.Spec.Store.Cluster)
			err := k8sClient.Update(t.Context(), edit)
			if err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("%s: got %v, want Invalid with %q", tc.name, err, tc.msg)
			}
		}
		grown := f.DeepCopy()
		grown.Spec.Store.Cluster.Shards = ptr.To[int32](6)
		if err := k8sClient.Update(t.Context(), grown); err != nil {
			t.Errorf("adding shards: %v", err)
		}
	})
}
