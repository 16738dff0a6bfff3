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
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// These tests run against the envtest API server with the conversion
// webhook (TestMain): RateLimitPolicy is stored as v1beta1, and every
// v1alpha1 read and write converts through the webhook.

// asAlpha returns the policies to create as v1alpha1: every sample and
// fuzzed specs, some of which v1beta1 can't say without the annotation.
func asAlpha(t *testing.T) []*v1alpha1.RateLimitPolicy {
	alpha, _ := samplePolicies(t)
	var out []*v1alpha1.RateLimitPolicy
	for i := range alpha {
		p := alpha[i].DeepCopy()
		p.Name = fmt.Sprintf("sample-%d-%s", i, p.Name)
		out = append(out, p)
	}
	rng := rand.New(rand.NewPCG(25, 2))
	for i := range 40 {
		out = append(out, randomAlphaPolicy(rng, i, i%2 == 0))
	}
	return out
}

// TestConversionWebhookV1alpha1 creates each policy as v1alpha1, reads it
// as v1beta1 (the storage version), and reads it back as v1alpha1,
// identical to what the API server admitted. Writing the v1alpha1 object
// back unchanged leaves the v1beta1 object as it was.
func TestConversionWebhookV1alpha1(t *testing.T) {
	ns := createNamespace(t, "conversion-alpha")
	for _, p := range asAlpha(t) {
		t.Run(p.Name, func(t *testing.T) {
			t.Parallel()
			p.Namespace, p.ResourceVersion = ns, ""
			created := p.DeepCopy()
			if err := k8sClient.Create(t.Context(), created); err != nil {
				t.Fatalf("creating the v1alpha1 policy: %v", err)
			}
			deleteAtCleanup(t, created)
			key := client.ObjectKeyFromObject(created)
			beta := &v1beta1.RateLimitPolicy{}
			if err := k8sClient.Get(t.Context(), key, beta); err != nil {
				t.Fatalf("reading it as v1beta1: %v", err)
			}
			if _, annotated := beta.Annotations[v1alpha1.V1alpha1SpecAnnotation]; annotated == sayableInV1beta1(&created.Spec) {
				t.Errorf("v1beta1 annotations %v: the %s annotation should be there only when v1beta1 can't say the spec", beta.Annotations, v1alpha1.V1alpha1SpecAnnotation)
			}
			wantType := v1beta1.LimitRate
			if created.Spec.EffectiveAlgorithm() == v1alpha1.Concurrency {
				wantType = v1beta1.LimitConcurrency
			}
			if beta.Spec.Limit.Type != wantType || beta.Spec.Domain != created.Spec.Domain {
				t.Errorf("as v1beta1: limit type %q, domain %q; want %q, %q", beta.Spec.Limit.Type, beta.Spec.Domain, wantType, created.Spec.Domain)
			}
			back := &v1alpha1.RateLimitPolicy{}
			if err := k8sClient.Get(t.Context(), key, back); err != nil {
				t.Fatalf("reading it back as v1alpha1: %v", err)
			}
			requireSameAlpha(t, created, back)

			if err := k8sClient.Update(t.Context(), back); err != nil {
				t.Fatalf("writing the v1alpha1 object back: %v", err)
			}
			again := &v1beta1.RateLimitPolicy{}
			if err := k8sClient.Get(t.Context(), key, again); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(beta.Spec, again.Spec); diff != "" || !cmp.Equal(beta.Annotations, again.Annotations) {
				t.Errorf("the v1beta1 object changed when its v1alpha1 form was written back unchanged (-before +after):\n%s\nannotations %v -> %v", diff, beta.Annotations, again.Annotations)
			}
		})
	}
}

// TestConversionWebhookV1beta1 creates every sample and fuzzed spec that
// v1beta1 can say as v1beta1 (which validates each against the v1beta1 schema and rules),
// reads it as v1alpha1, and reads it back as v1beta1, identical.
func TestConversionWebhookV1beta1(t *testing.T) {
	ns := createNamespace(t, "conversion-beta")
	var betas []*v1beta1.RateLimitPolicy
	_, samples := samplePolicies(t)
	for i := range samples {
		p := samples[i].DeepCopy()
		p.Name = fmt.Sprintf("beta-sample-%d-%s", i, p.Name)
		betas = append(betas, p)
	}
	for _, a := range asAlpha(t) {
		b := &v1beta1.RateLimitPolicy{}
		if err := a.ConvertTo(b); err != nil {
			t.Fatal(err)
		}
		if _, annotated := b.Annotations[v1alpha1.V1alpha1SpecAnnotation]; annotated {
			continue // not a spec in v1beta1's own terms (such as a nanosecond duration)
		}
		b.Name = "beta-" + a.Name
		betas = append(betas, b)
	}
	for _, p := range betas {
		t.Run(p.Name, func(t *testing.T) {
			t.Parallel()
			p.Namespace, p.ResourceVersion = ns, ""
			created := p.DeepCopy()
			if err := k8sClient.Create(t.Context(), created); err != nil {
				t.Fatalf("creating the v1beta1 policy: %v", err)
			}
			deleteAtCleanup(t, created)
			key := client.ObjectKeyFromObject(created)
			alpha := &v1alpha1.RateLimitPolicy{}
			if err := k8sClient.Get(t.Context(), key, alpha); err != nil {
				t.Fatalf("reading it as v1alpha1: %v", err)
			}
			if alpha.Spec.Domain != created.Spec.Domain || len(alpha.Spec.Descriptors) != len(created.Spec.Descriptors) {
				t.Errorf("as v1alpha1: domain %q, %d descriptors; want %q, %d", alpha.Spec.Domain, len(alpha.Spec.Descriptors), created.Spec.Domain, len(created.Spec.Descriptors))
			}
			if err := k8sClient.Update(t.Context(), alpha); err != nil {
				t.Fatalf("writing the v1alpha1 object back: %v", err)
			}
			back := &v1beta1.RateLimitPolicy{}
			if err := k8sClient.Get(t.Context(), key, back); err != nil {
				t.Fatalf("reading it back as v1beta1: %v", err)
			}
			if diff := cmp.Diff(created.Spec, back.Spec); diff != "" {
				t.Errorf("v1beta1 -> v1alpha1 -> v1beta1 through the API server is not identical (-created +read back):\n%s", diff)
			}
			if !cmp.Equal(created.Annotations, back.Annotations) {
				t.Errorf("annotations: created %v, read back %v", created.Annotations, back.Annotations)
			}
		})
	}
}

func requireSameAlpha(t *testing.T, want, got *v1alpha1.RateLimitPolicy) {
	t.Helper()
	if diff := cmp.Diff(want.Spec, got.Spec); diff != "" {
		t.Errorf("v1alpha1 -> v1beta1 -> v1alpha1 through the API server is not identical (-created +read back):\n%s", diff)
	}
	if !cmp.Equal(want.Annotations, got.Annotations) || !cmp.Equal(want.Labels, got.Labels) {
		t.Errorf("metadata: created annotations %v labels %v, read back %v %v", want.Annotations, want.Labels, got.Annotations, got.Labels)
	}
}

// betaBase is a valid v1beta1 policy that each bad case changes.
func betaBase() *v1beta1.RateLimitPolicy {
	return &v1beta1.RateLimitPolicy{Spec: v1beta1.RateLimitPolicySpec{
		Domain:      "payments",
		Descriptors: []v1beta1.Descriptor{{Key: "user_id"}},
		Limit: v1beta1.Limit{Type: v1beta1.LimitRate,
			Rate: &v1beta1.RateLimit{Limit: 100, Period: ptr.To(v1beta1.Duration("1m"))}},
	}}
}

func dur(s string) *v1beta1.Duration { return ptr.To(v1beta1.Duration(s)) }

func levels() *v1beta1.PriorityShedding {
	return &v1beta1.PriorityShedding{Default: "low",
		Levels: []v1beta1.PriorityLevel{{Value: "high", Share: 100}, {Value: "low", Share: 50}}}
}

// TestV1beta1CRDRejects shows the message of each cross-field rule of the
// v1beta1 schema, and of its Duration pattern and bounds.
func TestV1beta1CRDRejects(t *testing.T) {
	ns := createNamespace(t, "v1beta1-rejects")
	cases := []struct {
		name   string
		change func(s *v1beta1.RateLimitPolicySpec)
		msg    string
	}{
		// 1. The limit union: the member its type names, and only it.
		{"type Concurrency with rate", func(s *v1beta1.RateLimitPolicySpec) { s.Limit.Type = v1beta1.LimitConcurrency },
			"spec.limit must set the member its type names, and only it"},
		{"type Rate with concurrency too", func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit.Concurrency = &v1beta1.ConcurrencyLimit{MaxInFlight: 1}
		}, "spec.limit must set the member its type names, and only it"},
		// 2. The window: period or calendar.
		{"period and calendar", func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit.Rate.Algorithm = ptr.To(v1beta1.FixedWindow)
			s.Limit.Rate.Calendar = &v1beta1.Calendar{Period: v1beta1.CalendarDay}
		}, "spec.limit.rate takes period, or calendar instead of it: set exactly one"},
		{"neither period nor calendar", func(s *v1beta1.RateLimitPolicySpec) { s.Limit.Rate.Period = nil },
			"spec.limit.rate takes period, or calendar instead of it: set exactly one"},
		// 3. What each algorithm takes.
		{"burst on SlidingWindow", func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit.Rate.Algorithm, s.Limit.Rate.Burst = ptr.To(v1beta1.SlidingWindow), ptr.To[int64](200)
		}, "spec.limit.rate.burst applies only to TokenBucket and GCRA"},
		{"calendar on TokenBucket", func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit.Rate.Period, s.Limit.Rate.Calendar = nil, &v1beta1.Calendar{Period: v1beta1.CalendarMonth}
		}, "spec.limit.rate.calendar applies only to FixedWindow"},
		{"SlidingLog over 10000", func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit.Rate.Algorithm, s.Limit.Rate.Limit = ptr.To(v1beta1.SlidingLog), 10001
		}, "spec.limit.rate.limit may be at most 10000 for SlidingLog"},
		{"SlidingLog with reserve", func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit.Rate.Algorithm = ptr.To(v1beta1.SlidingLog)
			s.Limit.Rate.Cost = &v1beta1.Cost{Reserve: &v1beta1.Reserve{}}
		}, "spec.limit.rate.cost.reserve is not supported with SlidingLog"},
		// 4. cost.max within the capacity.
		{"cost.max above burst", func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit.Rate.Burst, s.Limit.Rate.Cost = ptr.To[int64](150), &v1beta1.Cost{Max: ptr.To[int64](151)}
		}, "spec.limit.rate.cost.max must not exceed the capacity"},
		// 5. localTier, reserve and penalty exclude one another.
		{"localTier and penalty", func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit.Rate.LocalTier = &v1beta1.LocalTier{}
			s.Limit.Rate.Penalty = &v1beta1.Penalty{Duration: "10m"}
		}, "spec.limit.rate.localTier is not supported with calendar, priority, cost.reserve or penalty"},
		{"reserve and penalty", func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit.Rate.Cost = &v1beta1.Cost{Reserve: &v1beta1.Reserve{}}
			s.Limit.Rate.Penalty = &v1beta1.Penalty{Duration: "10m"}
		}, "spec.limit.rate.penalty is not supported with cost.reserve"},
		{"localTier and priority", func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit.Rate.LocalTier, s.Limit.Rate.Priority = &v1beta1.LocalTier{}, levels()
		}, "spec.limit.rate.localTier is not supported with calendar, priority, cost.reserve or penalty"},
		// 6. mode Soft.
		{"Soft and Hidden", func(s *v1beta1.RateLimitPolicySpec) {
			s.Mode = ptr.To(v1beta1.Soft)
			s.Response = &v1beta1.Response{Visibility: ptr.To(v1beta1.Hidden)}
		}, "spec.mode Soft is not supported with spec.response.visibility Hidden"},
		{"Soft with penalty", func(s *v1beta1.RateLimitPolicySpec) {
			s.Mode, s.Limit.Rate.Penalty = ptr.To(v1beta1.Soft), &v1beta1.Penalty{Duration: "10m"}
		}, "spec.limit.rate.penalty does not apply to mode Soft"},
		// 7. priority.default names a level.
		{"priority default names no level", func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit.Rate.Priority = levels()
			s.Limit.Rate.Priority.Default = "medium"
		}, "priority.default must be the value of one of priority.levels"},
		// Rules on one field, and list keys.
		{"shares increase", func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit.Rate.Priority = levels()
			s.Limit.Rate.Priority.Levels[1].Share = 100
			s.Limit.Rate.Priority.Levels[0].Share = 10
		}, "priority.levels' shares must not increase"},
		{"duplicate level", func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit.Rate.Priority = levels()
			s.Limit.Rate.Priority.Levels[1].Value = "high"
		}, "Duplicate value"},
		{"duplicate descriptor key", func(s *v1beta1.RateLimitPolicySpec) {
			s.Descriptors = append(s.Descriptors, v1beta1.Descriptor{Key: "user_id", Value: ptr.To("x")})
		}, "Duplicate value"},
		{"period in Go's format only", func(s *v1beta1.RateLimitPolicySpec) { s.Limit.Rate.Period = dur("1.5s") },
			"should match '^([0-9]{1,5}(h|m|s|ms)){1,4}$'"},
		{"period under 1s", func(s *v1beta1.RateLimitPolicySpec) { s.Limit.Rate.Period = dur("500ms") },
			"period must be between 1s and 720h"},
		{"expireAfter over a day", func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit.Rate.Cost = &v1beta1.Cost{Reserve: &v1beta1.Reserve{ExpireAfter: dur("25h")}}
		}, "expireAfter must be between 1s and 24h"},
		{"ttl over a minute", func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit.Rate.LocalTier = &v1beta1.LocalTier{TTL: dur("2m")}
		}, "ttl must be between 100ms and 1m"},
		{"leaseDuration 0", func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit = v1beta1.Limit{Type: v1beta1.LimitConcurrency, Concurrency: &v1beta1.ConcurrencyLimit{MaxInFlight: 5, LeaseDuration: dur("0s")}}
		}, "leaseDuration must be above 0s and at most 24h"},
		{"penalty over 30 days", func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit.Rate.Penalty = &v1beta1.Penalty{Duration: "721h"}
		}, "duration must be between 1s and 720h (30 days)"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := betaBase()
			p.Name, p.Namespace = fmt.Sprintf("bad-%d", i), ns
			tc.change(&p.Spec)
			err := k8sClient.Create(t.Context(), p)
			if err == nil {
				deleteAtCleanup(t, p)
				t.Fatalf("the API server accepted %+v", p.Spec)
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("API server: got %v, want Invalid with %q", err, tc.msg)
			}
			t.Log(err)
		})
	}
	// The base itself, and each rule's edge, are accepted.
	good := map[string]func(s *v1beta1.RateLimitPolicySpec){
		"base": func(*v1beta1.RateLimitPolicySpec) {},
		"calendar on FixedWindow": func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit.Rate.Algorithm, s.Limit.Rate.Period = ptr.To(v1beta1.FixedWindow), nil
			s.Limit.Rate.Calendar = &v1beta1.Calendar{Period: v1beta1.CalendarMonth, TimeZone: ptr.To("Europe/Paris")}
		},
		"SlidingLog at 10000": func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit.Rate.Algorithm, s.Limit.Rate.Limit = ptr.To(v1beta1.SlidingLog), 10000
		},
		"cost.max at burst, with reserve and priority": func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit.Rate.Burst = ptr.To[int64](150)
			s.Limit.Rate.Cost = &v1beta1.Cost{Max: ptr.To[int64](150), Reserve: &v1beta1.Reserve{ExpireAfter: dur("1h30m")}}
			s.Limit.Rate.Priority = levels()
		},
		"Soft and Visible": func(s *v1beta1.RateLimitPolicySpec) {
			s.Mode, s.Response = ptr.To(v1beta1.Soft), &v1beta1.Response{Visibility: ptr.To(v1beta1.Visible)}
		},
		"Shadow, Hidden, penalty": func(s *v1beta1.RateLimitPolicySpec) {
			s.Mode, s.Response = ptr.To(v1beta1.Shadow), &v1beta1.Response{Visibility: ptr.To(v1beta1.Hidden)}
			s.Limit.Rate.Penalty = &v1beta1.Penalty{Duration: "720h", Within: dur("1s")}
		},
		"concurrency with priority": func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit = v1beta1.Limit{Type: v1beta1.LimitConcurrency, Concurrency: &v1beta1.ConcurrencyLimit{MaxInFlight: 10000, LeaseDuration: dur("24h"), Priority: levels()}}
		},
	}
	for name, change := range good {
		t.Run("accepts "+name, func(t *testing.T) {
			t.Parallel()
			p := betaBase()
			p.Name, p.Namespace = "good-"+strings.ReplaceAll(strings.ToLower(strings.NewReplacer(",", "", ".", "-").Replace(name)), " ", "-"), ns
			change(&p.Spec)
			if err := k8sClient.Create(t.Context(), p); err != nil {
				t.Fatalf("API server rejected %+v: %v", p.Spec, err)
			}
			deleteAtCleanup(t, p)
			alpha := &v1alpha1.RateLimitPolicy{}
			if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(p), alpha); err != nil {
				t.Fatal(err)
			}
			if alpha.Spec.Domain != "payments" {
				t.Errorf("read as v1alpha1: %+v", alpha.Spec)
			}
		})
	}
}
