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
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/policytest"
	"github.com/sluice-dev/sluice/limiter/config"
)

// A tenant who may write v1alpha1 RateLimitPolicies may also write the
// conversion annotations by hand. These tests, on envtest with the real
// conversion webhook, write hostile annotations and check that the stored
// object says what the spec written says, and nothing else: a hand-written
// annotation that does not say the same thing is ignored and dropped (not
// refused: a denial would let a stale annotation block every later write),
// and no annotation, however large or malformed, makes the webhook fail.

// hostile returns annotation values that must never change what is stored:
// each is a mutation of good (the annotation's honest value, JSON).
func hostile(t *testing.T, good any, mutations map[string]func(m map[string]any)) map[string]string {
	t.Helper()
	data, err := json.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{
		"huge":      `{"domain":"` + strings.Repeat("x", 200<<10) + `"}`,
		"malformed": `{"domain": "payments-api", "limit": {`,
		"deep":      strings.Repeat("[", 100<<10),
		"trailing":  string(data) + `{"x":1}`,
		"unknown":   strings.TrimSuffix(string(data), "}") + `,"bypass":true}`,
	}
	for name, mutate := range mutations {
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		mutate(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = string(b)
	}
	return out
}

func sub(m map[string]any, path ...string) map[string]any {
	for _, p := range path {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	return m
}

// TestAttackPolicyConversionAnnotation writes v1alpha1 policies carrying a
// hand-written v1beta1-spec annotation that would lift the limit, change
// the mode, or store a limit type or mode the v1beta1 schema refuses; and
// v1beta1 policies carrying a v1alpha1-spec annotation that would give the
// operator (which reads v1alpha1) a higher limit or fields the written
// policy does not have. Each is stored, and read in both versions, as
// written.
func TestAttackPolicyConversionAnnotation(t *testing.T) {
	ns := createNamespace(t, "attack-policy-annotation")
	written := basePolicy("x").Spec
	written.Shadow = ptr.To(false) // v1beta1 mode Enforce
	written.Algorithm, written.FailureMode = ptr.To(v1alpha1.TokenBucket), ptr.To(v1alpha1.FailOpen)
	honest, err := v1alpha1.SpecToV1beta1(&written)
	if err != nil {
		t.Fatal(err)
	}
	alphaCases := hostile(t, honest, map[string]func(m map[string]any){
		"lift the limit":              func(m map[string]any) { sub(m, "limit", "rate")["limit"] = 1000000 },
		"shadow mode":                 func(m map[string]any) { m["mode"] = "Shadow" },
		"a mode v1beta1 refuses":      func(m map[string]any) { m["mode"] = "Disabled" },
		"type Concurrency, no member": func(m map[string]any) { sub(m, "limit")["type"] = "Concurrency" },
		"another domain":              func(m map[string]any) { m["domain"] = "identity-api" },
		"a period v1beta1 refuses":    func(m map[string]any) { sub(m, "limit", "rate")["period"] = "60.0s" },
	})
	// The control: the same spec written with no annotation, as stored.
	control := basePolicy("alpha-control")
	control.Namespace, control.Spec = ns, *written.DeepCopy()
	if err := k8sClient.Create(t.Context(), control); err != nil {
		t.Fatal(err)
	}
	deleteAtCleanup(t, control)
	controlBeta := &v1beta1.RateLimitPolicy{}
	if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(control), controlBeta); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(honest, controlBeta.Spec); diff != "" {
		t.Fatalf("the control is stored as another policy (-written +stored):\n%s", diff)
	}
	i := 0
	for name, value := range alphaCases {
		i++
		objName := fmt.Sprintf("alpha-%d", i)
		t.Run("v1alpha1 with "+name, func(t *testing.T) {
			t.Parallel()
			p := basePolicy(objName)
			p.Namespace, p.Spec = ns, *written.DeepCopy()
			p.Annotations = map[string]string{v1alpha1.V1beta1SpecAnnotation: value}
			if err := k8sClient.Create(t.Context(), p); err != nil {
				t.Fatalf("the API server refused the policy (the webhook failed?): %v", err)
			}
			deleteAtCleanup(t, p)
			beta := &v1beta1.RateLimitPolicy{}
			if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(p), beta); err != nil {
				t.Fatalf("reading it as v1beta1: %v", err)
			}
			if diff := cmp.Diff(controlBeta.Spec, beta.Spec); diff != "" {
				t.Errorf("the stored object says another policy than the one written (-written +stored):\n%s", diff)
			}
			if len(beta.Annotations) != 0 {
				t.Errorf("the stored object keeps annotations %v", beta.Annotations)
			}
			alpha := &v1alpha1.RateLimitPolicy{}
			if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(p), alpha); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(control.Spec, alpha.Spec); diff != "" {
				t.Errorf("read as v1alpha1 (-written +read):\n%s", diff)
			}
		})
	}

	// Written as v1beta1: a concurrency limit, whose v1alpha1 form the
	// operator reads.
	betaWritten := v1beta1.RateLimitPolicySpec{Domain: "payments-api", Descriptors: []v1beta1.Descriptor{{Key: "user_id"}},
		Limit: v1beta1.Limit{Type: v1beta1.LimitConcurrency, Concurrency: &v1beta1.ConcurrencyLimit{MaxInFlight: 2}}}
	betaControl := &v1beta1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Name: "beta-control", Namespace: ns}, Spec: *betaWritten.DeepCopy()}
	if err := k8sClient.Create(t.Context(), betaControl); err != nil {
		t.Fatal(err)
	}
	deleteAtCleanup(t, betaControl)
	controlAlpha := &v1alpha1.RateLimitPolicy{}
	if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(betaControl), controlAlpha); err != nil {
		t.Fatal(err)
	}
	if controlAlpha.Spec.Concurrency == nil || controlAlpha.Spec.Concurrency.MaxInFlight != 2 {
		t.Fatalf("the control reads as v1alpha1 %+v", controlAlpha.Spec)
	}
	// The honest annotation is the v1alpha1 spec the API server serves.
	betaCases := hostile(t, controlAlpha.Spec, map[string]func(m map[string]any){
		"more in flight": func(m map[string]any) { sub(m, "concurrency")["maxInFlight"] = 1000 },
		"a rate beside the slots": func(m map[string]any) {
			m["rate"] = map[string]any{"limit": 1000000, "period": "1s"}
			m["burst"] = 1000000
		},
		"shadow":           func(m map[string]any) { m["shadow"] = true },
		"a lease duration": func(m map[string]any) { sub(m, "concurrency")["leaseDuration"] = "1ns" },
	})
	for name, value := range betaCases {
		i++
		objName := fmt.Sprintf("beta-%d", i)
		t.Run("v1beta1 with "+name, func(t *testing.T) {
			t.Parallel()
			p := &v1beta1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Name: objName, Namespace: ns,
				Annotations: map[string]string{v1alpha1.V1alpha1SpecAnnotation: value}}, Spec: *betaWritten.DeepCopy()}
			if err := k8sClient.Create(t.Context(), p); err != nil {
				t.Fatalf("the API server refused the policy: %v", err)
			}
			deleteAtCleanup(t, p)
			alpha := &v1alpha1.RateLimitPolicy{}
			if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(p), alpha); err != nil {
				t.Fatalf("reading it as v1alpha1 (the webhook failed?): %v", err)
			}
			if diff := cmp.Diff(controlAlpha.Spec, alpha.Spec); diff != "" {
				t.Errorf("the operator's v1alpha1 view says another policy than the one written (-written +read):\n%s", diff)
			}
		})
	}
}

// TestAttackFleetConversionAnnotation does the same for LimiterFleet,
// whose writers are trusted more, but whose stored object must still say
// what its spec does: a hand-written v1beta1-spec annotation can't store
// another store, more replicas, or a union the v1beta1 schema refuses.
func TestAttackFleetConversionAnnotation(t *testing.T) {
	ns := createNamespace(t, "attack-fleet-annotation")
	written := v1alpha1.LimiterFleetSpec{Replicas: ptr.To[int32](1), Enforcement: ptr.To(v1alpha1.EnforcementEnabled),
		Redis: v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisNone)}}
	honest, err := v1alpha1.FleetSpecToV1beta1(&written)
	if err != nil {
		t.Fatal(err)
	}
	cases := hostile(t, honest, map[string]func(m map[string]any){
		"more replicas":   func(m map[string]any) { sub(m, "limiters")["replicas"] = 100 },
		"enforcement off": func(m map[string]any) { m["enforcement"] = "Disabled" },
		"Memory with external": func(m map[string]any) {
			sub(m, "store")["external"] = map[string]any{"addresses": []string{"evil:6379"}}
		},
		"Memory with a cluster":        func(m map[string]any) { sub(m, "store")["cluster"] = map[string]any{"shards": 100} },
		"a store type v1beta1 refuses": func(m map[string]any) { sub(m, "store")["type"] = "Sideways" },
	})
	control := baseFleet("attack-control")
	control.Namespace, control.Spec = ns, *written.DeepCopy()
	if err := k8sClient.Create(t.Context(), control); err != nil {
		t.Fatal(err)
	}
	deleteAtCleanup(t, control)
	controlBeta := &v1beta1.LimiterFleet{}
	if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(control), controlBeta); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(honest, controlBeta.Spec); diff != "" {
		t.Fatalf("the control is stored as another fleet (-written +stored):\n%s", diff)
	}
	i := 0
	for name, value := range cases {
		i++
		objName := fmt.Sprintf("attack-%d", i)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := baseFleet(objName)
			f.Namespace, f.Spec = ns, *written.DeepCopy()
			f.Annotations = map[string]string{v1alpha1.V1beta1SpecAnnotation: value}
			if err := k8sClient.Create(t.Context(), f); err != nil {
				t.Fatalf("the API server refused the fleet (the webhook failed?): %v", err)
			}
			deleteAtCleanup(t, f)
			beta := &v1beta1.LimiterFleet{}
			if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(f), beta); err != nil {
				t.Fatalf("reading it as v1beta1: %v", err)
			}
			if diff := cmp.Diff(controlBeta.Spec, beta.Spec); diff != "" || len(beta.Annotations) != 0 {
				t.Errorf("the stored object says another fleet than the one written (-written +stored):\n%s\nannotations %v", diff, beta.Annotations)
			}
		})
	}
}

// TestConversionAnnotationHonestSpellings shows the annotations still do
// their job: a v1beta1 duration in another spelling, and a v1alpha1
// policy's own lease entry and sub-millisecond duration, survive the round
// trip through the other version.
func TestConversionAnnotationHonestSpellings(t *testing.T) {
	b := betaBase()
	b.Name = "spelled"
	b.Spec.Limit.Rate.Period = ptr.To(v1beta1.Duration("60s"))
	fleetBack := &v1alpha1.RateLimitPolicy{}
	if err := fleetBack.ConvertFrom(b.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	again := &v1beta1.RateLimitPolicy{}
	if err := fleetBack.ConvertTo(again); err != nil {
		t.Fatal(err)
	}
	if *again.Spec.Limit.Rate.Period != "60s" {
		t.Errorf("the period 60s came back as %q", *again.Spec.Limit.Rate.Period)
	}
	a := basePolicy("lease")
	a.Spec.Algorithm = ptr.To(v1alpha1.Concurrency)
	a.Spec.Rate, a.Spec.Burst = v1alpha1.Rate{}, nil
	a.Spec.Concurrency = &v1alpha1.ConcurrencyLimit{MaxInFlight: 3, LeaseEntry: ptr.To("my_lease"), LeaseDuration: &metav1.Duration{Duration: time.Second + time.Microsecond}}
	alphaRoundTrip(t, a)
}

// TestAttackHandWrittenSpecAnnotation writes plain v1beta1 policies (a
// Region-scoped rate, no requestOverride) carrying a hand-written
// v1beta1-spec annotation that says scope Global, or a requestOverride of
// 1,000,000,000: the v1alpha1 view the operator reads must not pass it on,
// and the policy must compile (limiter/config, directly and through a
// snapshot document, as the operator's snapshot does) with no override and
// not Global. And the reverse: a v1alpha1 policy carrying a hand-written
// v1alpha1-spec annotation is stored without it.
func TestAttackHandWrittenSpecAnnotation(t *testing.T) {
	ns := createNamespace(t, "attack-handwritten-annotation")
	spec := v1beta1.RateLimitPolicySpec{Domain: "payments-api", Descriptors: []v1beta1.Descriptor{{Key: "user_id"}},
		Limit: v1beta1.Limit{Type: v1beta1.LimitRate, Rate: &v1beta1.RateLimit{Limit: 10, Period: ptr.To(v1beta1.Duration("1m"))}}}
	forgeries := map[string]func(r *v1beta1.RateLimit){
		"global":   func(r *v1beta1.RateLimit) { r.Scope = ptr.To(v1beta1.ScopeGlobal) },
		"override": func(r *v1beta1.RateLimit) { r.RequestOverride = &v1beta1.RequestOverride{Maximum: 1_000_000_000} },
	}
	for name, forge := range forgeries {
		t.Run(name, func(t *testing.T) {
			forged := *spec.DeepCopy()
			forge(forged.Limit.Rate)
			value, err := json.Marshal(forged)
			if err != nil {
				t.Fatal(err)
			}
			p := &v1beta1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Name: "forged-" + name, Namespace: ns,
				Annotations: map[string]string{v1alpha1.V1beta1SpecAnnotation: string(value)}}, Spec: *spec.DeepCopy()}
			if err := k8sClient.Create(t.Context(), p); err != nil {
				t.Fatalf("the API server refused the policy: %v", err)
			}
			deleteAtCleanup(t, p)
			alpha := &v1alpha1.RateLimitPolicy{}
			if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(p), alpha); err != nil {
				t.Fatalf("reading it as v1alpha1 (the webhook failed?): %v", err)
			}
			if got, ok := alpha.Annotations[v1alpha1.V1beta1SpecAnnotation]; ok {
				t.Errorf("the v1alpha1 view passes on the hand-written annotation %s", got)
			}
			assertPlainCompile(t, alpha)
		})
	}

	// The reverse: a hand-written v1alpha1-spec annotation that would
	// give a v1beta1 reader a higher limit is not stored.
	a := basePolicy("forged-alpha")
	a.Namespace = ns
	lifted := *a.Spec.DeepCopy()
	lifted.Rate.Limit = 1_000_000
	alphaValue, err := json.Marshal(lifted)
	if err != nil {
		t.Fatal(err)
	}
	a.Annotations = map[string]string{v1alpha1.V1alpha1SpecAnnotation: string(alphaValue)}
	if err := k8sClient.Create(t.Context(), a); err != nil {
		t.Fatalf("the API server refused the policy: %v", err)
	}
	deleteAtCleanup(t, a)
	beta := &v1beta1.RateLimitPolicy{}
	if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(a), beta); err != nil {
		t.Fatal(err)
	}
	if got, ok := beta.Annotations[v1alpha1.V1alpha1SpecAnnotation]; ok && got == string(alphaValue) {
		t.Errorf("the stored object keeps the hand-written v1alpha1-spec annotation %s", got)
	}
}

// assertPlainCompile compiles alpha as the operator's snapshot does and
// fails unless it is Region-scoped with no requestOverride.
func assertPlainCompile(t *testing.T, alpha *v1alpha1.RateLimitPolicy) {
	t.Helper()
	snap, err := policytest.Compile([]v1alpha1.RateLimitPolicy{*alpha})
	if err != nil {
		t.Fatalf("compiling the v1alpha1 view: %v", err)
	}
	data, _ := config.EncodeDocument(config.DocumentFor(policytest.Sources([]v1alpha1.RateLimitPolicy{*alpha}...), config.EnforcementEnabled))
	fromDoc, err := config.ParseDocument(data)
	if err != nil {
		t.Fatalf("compiling the snapshot document: %v", err)
	}
	for _, s := range []*config.Snapshot{snap, fromDoc} {
		for _, c := range s.Policies {
			if c.Global || c.RequestOverrideMax != 0 {
				t.Errorf("%s compiles Global=%v with requestOverride maximum %d; want Region and none", c.ID(), c.Global, c.RequestOverrideMax)
			}
		}
	}
}
