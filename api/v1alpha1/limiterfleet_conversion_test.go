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
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// sampleFleets reads every LimiterFleet of config/samples, in either
// version, strictly.
func sampleFleets(t *testing.T) (alpha []v1alpha1.LimiterFleet, beta []v1beta1.LimiterFleet) {
	t.Helper()
	err := filepath.WalkDir("../../config/samples", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for doc := 1; ; doc++ {
			raw, err := r.Read()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("%s: document %d: %w", path, doc, err)
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(raw, &tm); err != nil || tm.Kind != "LimiterFleet" {
				continue
			}
			switch tm.APIVersion {
			case v1alpha1.GroupVersion.String():
				var f v1alpha1.LimiterFleet
				if err := yaml.UnmarshalStrict(raw, &f); err != nil {
					return fmt.Errorf("%s: document %d: %w", path, doc, err)
				}
				alpha = append(alpha, f)
			case v1beta1.GroupVersion.String():
				var f v1beta1.LimiterFleet
				if err := yaml.UnmarshalStrict(raw, &f); err != nil {
					return fmt.Errorf("%s: document %d: %w", path, doc, err)
				}
				beta = append(beta, f)
			default:
				return fmt.Errorf("%s: document %d: apiVersion %q", path, doc, tm.APIVersion)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(alpha) == 0 || len(beta) < 3 {
		t.Fatalf("found %d v1alpha1 and %d v1beta1 sample fleets: fewer than expected", len(alpha), len(beta))
	}
	return alpha, beta
}

// fleetAlphaRoundTrip converts f to v1beta1 and back, fails the test
// unless it comes back identical, and returns the v1beta1 object.
func fleetAlphaRoundTrip(t *testing.T, f *v1alpha1.LimiterFleet) *v1beta1.LimiterFleet {
	t.Helper()
	hub := &v1beta1.LimiterFleet{}
	if err := f.DeepCopy().ConvertTo(hub); err != nil {
		t.Fatalf("%s: ConvertTo: %v", f.Name, err)
	}
	back := &v1alpha1.LimiterFleet{}
	if err := back.ConvertFrom(hub.DeepCopy()); err != nil {
		t.Fatalf("%s: ConvertFrom: %v", f.Name, err)
	}
	back.TypeMeta = f.TypeMeta
	if !equality.Semantic.DeepEqual(back, f) {
		t.Fatalf("%s: v1alpha1 -> v1beta1 -> v1alpha1 is not identical (-want +got):\n%s", f.Name, cmp.Diff(f, back))
	}
	return hub
}

// fleetBetaRoundTrip converts f to v1alpha1 and back, fails the test
// unless it comes back identical, and returns the v1alpha1 object.
func fleetBetaRoundTrip(t *testing.T, f *v1beta1.LimiterFleet) *v1alpha1.LimiterFleet {
	t.Helper()
	spoke := &v1alpha1.LimiterFleet{}
	if err := spoke.ConvertFrom(f.DeepCopy()); err != nil {
		t.Fatalf("%s: ConvertFrom: %v", f.Name, err)
	}
	back := &v1beta1.LimiterFleet{}
	if err := spoke.DeepCopy().ConvertTo(back); err != nil {
		t.Fatalf("%s: ConvertTo: %v", f.Name, err)
	}
	back.TypeMeta = f.TypeMeta
	if !equality.Semantic.DeepEqual(back, f) {
		t.Fatalf("%s: v1beta1 -> v1alpha1 -> v1beta1 is not identical (-want +got):\n%s", f.Name, cmp.Diff(f, back))
	}
	return spoke
}

// TestFleetConversionRoundTripsSamples converts every sample fleet both
// ways: each comes back identical, without a conversion annotation, and
// the v1beta1 samples say the same as the v1alpha1 one where they overlap.
func TestFleetConversionRoundTripsSamples(t *testing.T) {
	alpha, beta := sampleFleets(t)
	for i := range alpha {
		hub := fleetAlphaRoundTrip(t, &alpha[i])
		if v, ok := hub.Annotations[v1alpha1.V1alpha1SpecAnnotation]; ok {
			t.Errorf("%s: the v1alpha1 sample needed the conversion annotation: %s", alpha[i].Name, v)
		}
	}
	same := 0
	for i := range alpha {
		for j := range beta {
			if alpha[i].Name != beta[j].Name || alpha[i].Namespace != beta[j].Namespace {
				continue
			}
			hub := &v1beta1.LimiterFleet{}
			if err := alpha[i].DeepCopy().ConvertTo(hub); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(beta[j].Spec, hub.Spec); diff != "" {
				t.Errorf("the v1alpha1 sample %s says another fleet than the v1beta1 one (-v1beta1 +v1alpha1 converted):\n%s", alpha[i].Name, diff)
			}
			same++
		}
	}
	if same == 0 {
		t.Error("no v1alpha1 sample fleet has a v1beta1 counterpart of the same name")
	}
	for i := range beta {
		if beta[i].Spec.Store.Type == "" {
			beta[i].Spec.Store.Type = v1beta1.StoreMemory // as the API server defaults it
		}
		spoke := fleetBetaRoundTrip(t, &beta[i])
		if v, ok := spoke.Annotations[v1alpha1.V1beta1SpecAnnotation]; ok {
			t.Errorf("%s: the v1beta1 sample needed the conversion annotation: %s", beta[i].Name, v)
		}
	}
}

// TestFleetConversionRoundTripsFuzzedSpecs converts thousands of random
// valid fleet specs of every store both ways. Clean specs (redis.mode
// set, as the API server defaults it, and whole-millisecond durations)
// convert without an annotation; the others round-trip through it.
func TestFleetConversionRoundTripsFuzzedSpecs(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 1))
	annotated := 0
	for i := range 3000 {
		clean := i%3 != 0
		a := randomAlphaFleet(rng, i, clean)
		hub := fleetAlphaRoundTrip(t, a)
		if _, ok := hub.Annotations[v1alpha1.V1alpha1SpecAnnotation]; ok {
			annotated++
			if clean {
				t.Fatalf("%s: a clean spec needed the conversion annotation: %+v", a.Name, a.Spec)
			}
		}
		b := &v1beta1.LimiterFleet{}
		if err := randomAlphaFleet(rng, i, true).ConvertTo(b); err != nil {
			t.Fatal(err)
		}
		if b.Spec.Store.Type == v1beta1.StoreCluster && b.Spec.Store.Cluster != nil && b.Spec.Store.Cluster.NodeTimeout != nil && rng.IntN(2) == 0 {
			d, _ := time.ParseDuration(string(*b.Spec.Store.Cluster.NodeTimeout))
			b.Spec.Store.Cluster.NodeTimeout = ptr.To(v1beta1.Duration(fmt.Sprintf("%dms", d.Milliseconds()))) // another spelling
		}
		spoke := fleetBetaRoundTrip(t, b)
		if v, ok := spoke.Annotations[v1alpha1.V1beta1SpecAnnotation]; ok && !strings.Contains(v, "ms\"") {
			t.Fatalf("%s: a v1beta1 spec in canonical form needed the conversion annotation: %s", b.Name, v)
		}
	}
	if annotated == 0 {
		t.Fatal("no fuzzed spec needed the conversion annotation: the generator does not reach what v1beta1 can't say")
	}
	t.Logf("3000 specs each way; %d v1alpha1 specs kept their spec in the annotation", annotated)
}

// randomAlphaFleet returns a valid v1alpha1 fleet: every block sometimes,
// and one of the three redis modes with the fields it allows. Unless
// clean, redis.mode is sometimes left unset and nodeTimeout has
// microseconds, which v1beta1 can't say.
func randomAlphaFleet(rng *rand.Rand, i int, clean bool) *v1alpha1.LimiterFleet {
	f := baseFleet(fmt.Sprintf("fuzz-%d", i))
	f.Namespace = "ns"
	s := &f.Spec
	maybe := func() bool { return rng.IntN(2) == 0 }
	sel := func() *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"team": pick(rng, "a", "b")}}
	}
	if maybe() {
		s.Replicas = ptr.To(rng.Int32N(101))
	}
	if maybe() {
		s.Image = ptr.To("ghcr.io/sluice-dev/sluice-limiter:v0.1." + fmt.Sprint(rng.IntN(9)))
	}
	if maybe() {
		s.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}}
	}
	if maybe() {
		s.Enforcement = ptr.To(pick(rng, v1alpha1.EnforcementModes...))
	}
	if maybe() {
		s.PolicySelector = pick(rng, sel(), &metav1.LabelSelector{})
	}
	if maybe() {
		s.NamespaceSelector = sel()
	}
	if maybe() {
		s.Domains = []v1alpha1.FleetDomain{{Name: "payments-api", AllowedNamespaces: &v1alpha1.AllowedNamespaces{From: ptr.To(v1alpha1.NamespacesFromSelector), Selector: sel()}}, {Name: "own"}}
	}
	if maybe() {
		s.Entries = &v1alpha1.FleetEntries{Lease: ptr.To("sluice_lease"), Priority: pick(rng, nil, ptr.To("priority"))}
	}
	if maybe() {
		s.TenantBudget = &v1alpha1.TenantBudgets{TenantBudget: v1alpha1.TenantBudget{MaxPoliciesPerNamespace: ptr.To(rng.Int32N(100) + 1)}}
		if maybe() {
			s.TenantBudget.Overrides = []v1alpha1.TenantBudgetOverride{{Namespace: "big", TenantBudget: v1alpha1.TenantBudget{MaxPoliciesPerRequest: ptr.To[int32](64)}}}
		}
	}
	if maybe() {
		s.Stats = &v1alpha1.FleetStats{TopDescriptors: ptr.To(rng.Int32N(21))}
		if maybe() {
			s.Stats.DescriptorValues, s.Stats.TruncateTo = ptr.To(v1alpha1.DescriptorValuesTruncate), ptr.To(rng.Int32N(16)+1)
		}
	}
	if maybe() {
		s.Tracing = &v1alpha1.FleetTracing{Endpoint: "http://otel-collector.observability:4317", SamplesPerMillion: ptr.To(rng.Int32N(1000001))}
	}
	if maybe() {
		s.Clients = []v1alpha1.FleetClient{{NamespaceSelector: sel()}, {PodSelector: sel()}}
	}
	if maybe() {
		s.TrustedProxies = []string{"10.0.0.0/8", "192.168.1.1"}
	}
	if maybe() {
		s.ForwardAuth = []v1alpha1.ForwardAuth{{Domain: "payments-api", DenyStatus: ptr.To[int32](403),
			Descriptors: []v1alpha1.ForwardAuthDescriptor{{Key: "path", From: v1alpha1.FromPath}, {Key: "api_key", From: v1alpha1.FromHeader, Header: ptr.To("X-Api-Key")}}}}
	}
	r := &s.Redis
	switch rng.IntN(3) {
	case 0:
		if clean || maybe() {
			r.Mode = ptr.To(v1alpha1.RedisNone)
		}
	case 1:
		r.Mode = ptr.To(v1alpha1.RedisCluster)
		if maybe() {
			r.Shards, r.ReplicasPerShard = ptr.To(rng.Int32N(98)+3), ptr.To(rng.Int32N(6))
		}
		if maybe() {
			d := time.Duration(rng.IntN(59)+1) * time.Second
			if !clean {
				d += time.Duration(rng.IntN(999)+1) * time.Microsecond
			}
			r.NodeTimeout = &metav1.Duration{Duration: d}
		}
		if maybe() {
			r.Storage = &v1alpha1.RedisStorage{Size: resource.MustParse("1Gi"), StorageClassName: pick(rng, nil, ptr.To("fast"))}
		}
		if maybe() {
			r.Auth = &v1alpha1.RedisAuth{SecretName: "redis-auth", Key: pick(rng, "", "pw")}
		}
		if maybe() {
			r.TLS = &v1alpha1.RedisTLS{CASecretName: pick(rng, nil, ptr.To("my-ca"))}
		}
		if maybe() {
			r.MaxMemory, r.Image = ptr.To(resource.MustParse("400Mi")), ptr.To("redis:7.4")
			r.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}}
		}
	default:
		r.Mode = ptr.To(v1alpha1.RedisExternal)
		r.Addresses = []string{"redis.cache.svc:6379", "[fd00::1]:6379", "10.0.0.7:7000"}[:rng.IntN(3)+1]
		if len(r.Addresses) > 1 {
			r.Cluster = pick(rng, nil, ptr.To(true))
		} else {
			r.Cluster = pick(rng, nil, ptr.To(true), ptr.To(false))
		}
		if maybe() {
			r.Auth = &v1alpha1.RedisAuth{SecretName: "redis-auth", Key: "password", UsernameKey: pick(rng, nil, ptr.To("user"))}
		}
		if maybe() {
			r.TLS = &v1alpha1.RedisTLS{CASecretName: ptr.To("ca"), CAKey: pick(rng, nil, ptr.To("ca.pem")), ServerName: pick(rng, nil, ptr.To("redis.example.com"))}
		}
	}
	return f
}
