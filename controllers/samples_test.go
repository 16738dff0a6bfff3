package controllers

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/convert"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// sampleSet is what one kubectl apply of sample files creates.
type sampleSet struct {
	namespaces []string
	fleets     []*v1beta1.LimiterFleet
	policies   []*v1beta1.RateLimitPolicy
}

// readSamples decodes every document of the files strictly (a misspelt
// field fails), as kubectl apply would send them.
func readSamples(t *testing.T, files ...string) sampleSet {
	t.Helper()
	var set sampleSet
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			var head struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal(doc, &head); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			switch head.Kind {
			case "":
				continue // comments only
			case "Namespace":
				ns := &corev1.Namespace{}
				if err := yaml.UnmarshalStrict(doc, ns); err != nil {
					t.Fatalf("%s: %v", file, err)
				}
				set.namespaces = append(set.namespaces, ns.Name)
			case "LimiterFleet":
				// As the API server serves it to the operator: in v1beta1,
				// a v1alpha1 sample converted.
				f := &v1beta1.LimiterFleet{}
				if head.APIVersion == v1beta1.GroupVersion.String() {
					if err := yaml.UnmarshalStrict(doc, f); err != nil {
						t.Fatalf("%s: %v", file, err)
					}
				} else {
					a := &v1alpha1.LimiterFleet{}
					if err := yaml.UnmarshalStrict(doc, a); err != nil {
						t.Fatalf("%s: %v", file, err)
					}
					b, err := convert.Fleet(a)
					if err != nil {
						t.Fatalf("%s: %v", file, err)
					}
					f = b
				}
				set.fleets = append(set.fleets, f)
			case "RateLimitPolicy":
				// As the API server stores it and serves it to the
				// operator: in v1beta1, a v1alpha1 sample converted.
				p := &v1beta1.RateLimitPolicy{}
				if head.APIVersion == v1beta1.GroupVersion.String() {
					if err := yaml.UnmarshalStrict(doc, p); err != nil {
						t.Fatalf("%s: %v", file, err)
					}
				} else {
					a := &v1alpha1.RateLimitPolicy{}
					if err := yaml.UnmarshalStrict(doc, a); err != nil {
						t.Fatalf("%s: %v", file, err)
					}
					p = storedOne(a)
				}
				set.policies = append(set.policies, p)
			default:
				t.Fatalf("%s: unexpected kind %s", file, head.Kind)
			}
		}
	}
	return set
}

// TestSamplesFitTogether: every fleet sample serves (allows the domain
// of, and selects) every policy of the
// samples it is documented with, so that `kubectl apply -f config/samples/`
// (the directory, as the README and each fleet's comments say) enforces
// every policy on whichever fleet runs: the one in config/samples/, the Redis
// Cluster one and the External Redis one. The gateways' fleet selects the
// gateways' policies. The namespaces the policies live in come with them.
func TestSamplesFitTogether(t *testing.T) {
	samples := filepath.Join("..", "config", "samples")
	top, err := filepath.Glob(filepath.Join(samples, "*.yaml"))
	if err != nil || len(top) == 0 {
		t.Fatalf("no samples in %s: %v", samples, err)
	}
	dir := readSamples(t, top...)
	if len(dir.policies) < 5 || len(dir.fleets) != 1 {
		t.Fatalf("config/samples/ holds %d policies and %d fleets", len(dir.policies), len(dir.fleets))
	}
	others := readSamples(t, filepath.Join(samples, "redis-cluster", "limiterfleet.yaml"), filepath.Join(samples, "external-redis", "limiterfleet.yaml"))
	gateways := readSamples(t, filepath.Join(samples, "gateways", "policies.yaml"))
	for _, tc := range []struct {
		name     string
		fleets   []*v1beta1.LimiterFleet
		policies []*v1beta1.RateLimitPolicy
	}{
		{"config/samples/", append(dir.fleets, others.fleets...), dir.policies},
		{"config/samples/gateways/", gateways.fleets, gateways.policies},
	} {
		if len(tc.fleets) == 0 || len(tc.policies) == 0 {
			t.Fatalf("%s: %d fleets, %d policies", tc.name, len(tc.fleets), len(tc.policies))
		}
		for _, f := range tc.fleets {
			for _, p := range tc.policies {
				// The sample namespaces carry no labels but the one the
				// API server gives every namespace.
				ok, err := fleetServes(f, p, map[string]string{corev1.LabelMetadataName: p.Namespace})
				if err != nil || !ok {
					t.Errorf("%s: fleet %s/%s does not serve policy %s/%s (labels %v): %v",
						tc.name, f.Namespace, f.Name, p.Namespace, p.Name, p.Labels, err)
				}
			}
		}
	}
	// kubectl apply -f config/samples/ creates the policies' namespaces
	// before the policies (files in name order).
	created := map[string]bool{"default": true}
	for _, ns := range dir.namespaces {
		created[ns] = true
	}
	for _, p := range dir.policies {
		if !created[p.Namespace] {
			t.Errorf("policy %s/%s: config/samples/ does not create namespace %s", p.Namespace, p.Name, p.Namespace)
		}
	}
	// The fleets a one-node cluster without a StorageClass can run: no
	// replica (required anti-affinity) and no volume claim.
	for _, f := range append(dir.fleets, others.fleets...) {
		if f.Spec.EffectiveStoreType() != v1beta1.StoreCluster {
			continue
		}
		if f.Spec.EffectiveReplicasPerShard() != 0 || f.Spec.Store.Cluster.Storage != nil {
			t.Errorf("fleet %s/%s asks for %d replicas per shard and storage %v: a one-node cluster without a StorageClass can't run it",
				f.Namespace, f.Name, f.Spec.EffectiveReplicasPerShard(), f.Spec.Store.Cluster.Storage)
		}
	}
}
