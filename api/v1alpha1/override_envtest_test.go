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
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// TestRequestOverrideCRD shows the message of each rule of
// spec.limit.rate.requestOverride, that a policy with it is accepted for
// each algorithm that can honour it, and that it survives a v1alpha1
// write (which has no field for it) through the conversion annotation.
func TestRequestOverrideCRD(t *testing.T) {
	ns := createNamespace(t, "request-override-crd")
	opt := func(s *v1beta1.RateLimitPolicySpec) {
		s.Limit.Rate.RequestOverride = &v1beta1.RequestOverride{Maximum: 5000}
	}
	const msg = "spec.limit.rate.requestOverride needs a fixed period and is not supported with calendar, SlidingLog, burst, localTier, cost.reserve or scope Global"
	cases := []struct {
		name   string
		change func(s *v1beta1.RateLimitPolicySpec)
		msg    string
	}{
		{"maximum 0", func(s *v1beta1.RateLimitPolicySpec) { opt(s); s.Limit.Rate.RequestOverride.Maximum = 0 },
			"should be greater than or equal to 1"},
		{"maximum too large", func(s *v1beta1.RateLimitPolicySpec) { opt(s); s.Limit.Rate.RequestOverride.Maximum = 1_000_000_001 },
			"should be less than or equal to 1000000000"},
		{"calendar", func(s *v1beta1.RateLimitPolicySpec) {
			opt(s)
			s.Limit.Rate.Algorithm, s.Limit.Rate.Period = ptr.To(v1beta1.FixedWindow), nil
			s.Limit.Rate.Calendar = &v1beta1.Calendar{Period: v1beta1.CalendarDay}
		}, msg},
		{"SlidingLog", func(s *v1beta1.RateLimitPolicySpec) { opt(s); s.Limit.Rate.Algorithm = ptr.To(v1beta1.SlidingLog) }, msg},
		{"burst", func(s *v1beta1.RateLimitPolicySpec) { opt(s); s.Limit.Rate.Burst = ptr.To[int64](200) }, msg},
		{"localTier", func(s *v1beta1.RateLimitPolicySpec) { opt(s); s.Limit.Rate.LocalTier = &v1beta1.LocalTier{} }, msg},
		{"cost.reserve", func(s *v1beta1.RateLimitPolicySpec) {
			opt(s)
			s.Limit.Rate.Cost = &v1beta1.Cost{Reserve: &v1beta1.Reserve{}}
		}, msg},
		{"Global", func(s *v1beta1.RateLimitPolicySpec) { opt(s); s.Limit.Rate.Scope = ptr.To(v1beta1.ScopeGlobal) }, msg},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := betaBase()
			p.Name, p.Namespace = fmt.Sprintf("bad-override-%d", i), ns
			tc.change(&p.Spec)
			requireInvalid(t, p, tc.msg)
		})
	}
	t.Run("accepted and kept through v1alpha1", func(t *testing.T) {
		for _, alg := range []v1beta1.Algorithm{v1beta1.TokenBucket, v1beta1.GCRA, v1beta1.FixedWindow, v1beta1.SlidingWindow} {
			p := betaBase()
			p.Name, p.Namespace = "override-"+strings.ToLower(string(alg)), ns
			opt(&p.Spec)
			p.Spec.Limit.Rate.Algorithm = ptr.To(alg)
			if err := k8sClient.Create(t.Context(), p); err != nil {
				t.Fatalf("the API server refused a %s policy with requestOverride: %v", alg, err)
			}
			deleteAtCleanup(t, p)
			key := client.ObjectKeyFromObject(p)
			alpha := &v1alpha1.RateLimitPolicy{}
			if err := k8sClient.Get(t.Context(), key, alpha); err != nil {
				t.Fatal(err)
			}
			if err := k8sClient.Update(t.Context(), alpha); err != nil {
				t.Fatalf("writing %s back as v1alpha1: %v", key, err)
			}
			again := &v1beta1.RateLimitPolicy{}
			if err := k8sClient.Get(t.Context(), key, again); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(p.Spec, again.Spec); diff != "" {
				t.Errorf("%s lost its requestOverride through a v1alpha1 write (-before +after):\n%s", key, diff)
			}
		}
	})
}

// TestAttackRequestOverrideAnnotationCantLiftALimit: a tenant who writes
// v1alpha1 policies hand-writes the v1beta1 annotation with a
// requestOverride and a higher limit; the annotation is believed for the
// override only when it says the same limit as the spec, and never with a
// maximum the schema refuses.
func TestAttackRequestOverrideAnnotationCantLiftALimit(t *testing.T) {
	alpha := &v1alpha1.RateLimitPolicy{}
	if err := alpha.ConvertFrom(betaBase()); err != nil {
		t.Fatal(err)
	}
	raw := `{"domain":"payments","descriptors":[{"key":"user_id"}],"limit":{"type":"Rate","rate":{"limit":%d,"period":"1m","requestOverride":{"maximum":%d}}}}`
	convert := func(limit, maximum int64) *v1beta1.RateLimitPolicy {
		t.Helper()
		a := alpha.DeepCopy()
		a.Annotations = map[string]string{v1alpha1.V1beta1SpecAnnotation: fmt.Sprintf(raw, limit, maximum)}
		got := &v1beta1.RateLimitPolicy{}
		if err := a.ConvertTo(got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := convert(1000000, 5000); got.Spec.Limit.Rate.Limit != 100 || got.Spec.Limit.Rate.RequestOverride != nil {
		t.Fatalf("a forged annotation changed the policy: limit %d, requestOverride %+v; want 100 and none",
			got.Spec.Limit.Rate.Limit, got.Spec.Limit.Rate.RequestOverride)
	}
	for _, maximum := range []int64{0, -1, 1_000_000_001, 1 << 62} {
		if got := convert(100, maximum); got.Spec.Limit.Rate.RequestOverride != nil {
			t.Fatalf("maximum %d: requestOverride %+v came from a hand-written annotation", maximum, got.Spec.Limit.Rate.RequestOverride)
		}
	}
	// With the spec's own limit and a maximum the schema allows, it is
	// believed: it says nothing a v1beta1 writer could not say.
	if got := convert(100, 5000); got.Spec.Limit.Rate.RequestOverride == nil || got.Spec.Limit.Rate.RequestOverride.Maximum != 5000 {
		t.Fatalf("requestOverride %+v: an annotation matching the spec should carry it", got.Spec.Limit.Rate.RequestOverride)
	}
}
