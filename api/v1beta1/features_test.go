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

package v1beta1_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// TestFeatureParityCRDRules requires the CRD's rules on spec, spec.limit
// and spec.limit.rate to be exactly those the table makes (CELRules), in
// the CRD that make manifests writes from them (hack/featurecel; the
// chart's copy is hack/chartgen's): a table changed without it fails here,
// with no API server.
func TestFeatureParityCRDRules(t *testing.T) {
	for _, file := range []string{
		filepath.Join("..", "..", "config", "crd", "bases", "ratelimit.sluice.dev_ratelimitpolicies.yaml"),
	} {
		spec := v1beta1Spec(t, file)
		for _, h := range v1beta1.CELHosts {
			schema := spec
			for _, name := range strings.Split(h.Path, ".") {
				if name != "" {
					schema = schema.Properties[name]
				}
			}
			var want, got []v1beta1.CELRule
			for _, r := range v1beta1.CELRules() {
				if r.Host == h.Path {
					want = append(want, r)
				}
			}
			for _, r := range schema.XValidations {
				got = append(got, v1beta1.CELRule{Host: h.Path, Rule: r.Rule, Message: r.Message, FieldPath: r.FieldPath})
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s: the rules of spec.%s are not the table's; run make manifests (-table +CRD):\n%s", file, h.Path, diff)
			}
		}
	}
}

// v1beta1Spec is the schema of spec in the v1beta1 version of the CRD in
// file.
func v1beta1Spec(t *testing.T, file string) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	i := slices.IndexFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == "v1beta1" })
	if i < 0 || crd.Spec.Versions[i].Schema == nil {
		t.Fatalf("%s: no v1beta1 schema", file)
	}
	return crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"]
}

// TestFeatureTable checks the table is whole: the parity test sets every
// feature, exclusions name features, and a refusal has its reason. It
// logs the table as the matrix of takers and features.
func TestFeatureTable(t *testing.T) {
	var lines []string
	for _, f := range v1beta1.Features {
		if !slices.ContainsFunc(settings, func(s setting) bool { return s.name == f.Name }) {
			t.Errorf("the parity test does not set %s", f.Name)
		}
		for _, x := range f.Exclusions {
			for _, n := range x.With {
				if v1beta1.FeatureByName(n) == nil || n == f.Name {
					t.Errorf("%s: exclusion names %q", f.Name, n)
				}
			}
			if x.Reason == "" {
				t.Errorf("%s: an exclusion without a reason", f.Name)
			}
		}
		row := []string{string(f.Name), "spec." + f.Path}
		for _, tk := range v1beta1.Takers {
			row = append(row, map[bool]string{true: string(tk), false: "-"}[f.Takes(tk)])
		}
		if len(f.TakenBy) > 0 && len(f.TakenBy) < len(v1beta1.Takers) && f.Refused == "" && !strings.HasPrefix(f.Path, "limit.") {
			t.Errorf("%s: refused by some takers, without a reason", f.Name)
		}
		lines = append(lines, strings.Join(row, " "))
	}
	t.Logf("feature, path, takers:\n%s", strings.Join(lines, "\n"))
}

// TestValidateFeaturesPaths shows, without an API server, the v1beta1
// path and reason ValidateFeatures gives a few refusals (the parity test
// holds every one to the API server's).
func TestValidateFeaturesPaths(t *testing.T) {
	by := func(n v1beta1.FeatureName) setting {
		i := slices.IndexFunc(settings, func(s setting) bool { return s.name == n })
		return settings[i]
	}
	cases := []struct {
		name   string
		spec   v1beta1.RateLimitPolicySpec
		want   []string
		reason string
	}{
		{"TokenBucket with burst", specFor("TokenBucket", by(v1beta1.FeatureBurst)), nil, ""},
		{"SlidingWindow with burst", specFor("SlidingWindow", by(v1beta1.FeatureBurst)),
			[]string{"spec.limit.rate.burst"}, "applies only to TokenBucket and GCRA"},
		{"SlidingLog with localTier", specFor("SlidingLog", by(v1beta1.FeatureLocalTier)),
			[]string{"spec.limit.rate.localTier"}, "not supported with SlidingLog"},
		{"penalty with reserve", specFor("GCRA", by(v1beta1.FeaturePenalty), by(v1beta1.FeatureReserve)),
			[]string{"spec.limit.rate.penalty"}, "not supported with cost.reserve"},
		{"Soft with penalty", specFor("FixedWindow", by(v1beta1.FeatureSoft), by(v1beta1.FeaturePenalty)),
			[]string{"spec.limit.rate.penalty"}, "does not apply to mode Soft"},
		{"Concurrency with scope Global", specFor(v1beta1.TakerConcurrency, by(v1beta1.FeatureGlobal)),
			[]string{"spec.limit.rate"}, "spec.limit must set the member its type names"},
		{"Global SlidingLog with priority", specFor("SlidingLog", by(v1beta1.FeatureGlobal), by(v1beta1.FeaturePriority)),
			[]string{"spec.limit.rate.scope", "spec.limit.rate.scope"}, "scope Global is not supported with"},
		{"Concurrency with priority", specFor(v1beta1.TakerConcurrency, by(v1beta1.FeatureConcurrencyPriority)), nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := v1beta1.ValidateFeatures(&tc.spec, field.NewPath("spec"))
			var got []string
			for _, e := range errs {
				got = append(got, e.Field)
				if !strings.Contains(e.Detail, tc.reason) {
					t.Errorf("%s: %q, want it to say %q", e.Field, e.Detail, tc.reason)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("ValidateFeatures refuses %v, want %v: %v", got, tc.want, errs)
			}
		})
	}
}
