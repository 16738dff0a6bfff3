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
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/conversiontest"
	"github.com/sluice-dev/sluice/internal/policytest"
	"github.com/sluice-dev/sluice/internal/testtier"
	"github.com/sluice-dev/sluice/limiter/config"
)

// k8sClient talks to the envtest API server that TestMain starts.
var k8sClient client.Client

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() { // the unit tier: no API server; createNamespace skips the tests that need one
		os.Exit(m.Run())
	}
	os.Exit(runWithAPIServer(m))
}

func runWithAPIServer(m *testing.M) int {
	logf.SetLogger(logr.Discard())
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		// KUBEBUILDER_ASSETS wins when set; hack/setup-envtest.sh builds these.
		BinaryAssetsDirectory: filepath.Join("..", "..", "bin", "k8s"),
	}
	// RateLimitPolicy is stored as v1beta1: every v1alpha1 read and write
	// goes through the conversion webhook.
	conversiontest.Prepare(env)
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest (run hack/setup-envtest.sh): %v\n", err)
		_ = env.Stop() // a failed start (e.g. installing CRDs) may leave the control plane running
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
		}
	}()

	stopWebhook, err := conversiontest.Serve(env)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stopWebhook()

	k8sClient, err = client.New(cfg, client.Options{Scheme: conversiontest.Scheme()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// TestCRDRejects shows the message of every schema and CEL rule the API server
// enforces, and that ValidatePolicy rejects the same policies on the same field.
func TestCRDRejects(t *testing.T) {
	ns := createNamespace(t, "crd-rejects")
	for i, tc := range badCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := basePolicy(fmt.Sprintf("bad-%d", i))
			p.Namespace = ns
			if tc.typed != nil {
				tc.typed(p)
			}
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
			if err != nil {
				t.Fatal(err)
			}
			if tc.raw != nil {
				tc.raw(obj["spec"].(map[string]any))
			}

			err = k8sClient.Create(t.Context(), &unstructured.Unstructured{Object: obj})
			requireCause(t, err, tc.field, tc.message)

			goMessage := tc.message
			if tc.goMessage != "" {
				goMessage = tc.goMessage
			}
			requireValidateRejects(t, obj, tc.field, goMessage)
		})
	}
}

// TestCRDAccepts shows that the API server and ValidatePolicy accept policies at
// the edge of each rule, and that the API server defaults what DefaultPolicy does.
func TestCRDAccepts(t *testing.T) {
	ns := createNamespace(t, "crd-accepts")
	for i, tc := range goodCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := basePolicy(fmt.Sprintf("good-%d", i))
			p.Namespace = ns
			tc.typed(p)
			requireAccepted(t, p)
		})
	}
}

// TestSamplesAccepted applies every sample manifest.
func TestSamplesAccepted(t *testing.T) {
	var policies []*v1alpha1.RateLimitPolicy
	for _, file := range []string{"policies.yaml", "ratelimit_v1alpha1_ratelimitpolicy.yaml", "ratelimit_v1beta1_ratelimitpolicy.yaml"} {
		policies = append(policies, readPolicies(t, filepath.Join("..", "..", "config", "samples", file))...)
	}
	algorithms := map[v1alpha1.Algorithm]bool{}
	for _, p := range policies {
		algorithms[p.Spec.EffectiveAlgorithm()] = true
		createNamespace(t, p.Namespace)
		t.Run(p.Namespace+"/"+p.Name, func(t *testing.T) {
			requireAccepted(t, p)
		})
	}
	for _, a := range v1alpha1.Algorithms {
		if !algorithms[a] {
			t.Errorf("no sample uses algorithm %s", a)
		}
	}
}

// TestStatusSubresource writes every status field through the status subresource.
func TestStatusSubresource(t *testing.T) {
	ctx := t.Context()
	p := basePolicy("with-status")
	p.Namespace = createNamespace(t, "crd-status")
	if err := k8sClient.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	deleteAtCleanup(t, p)

	now := metav1.NewTime(time.Now().Truncate(time.Second))
	p.Status = v1alpha1.RateLimitPolicyStatus{
		ObservedGeneration: p.Generation,
		Conditions: []metav1.Condition{{
			Type: v1beta1.AcceptedCondition, Status: metav1.ConditionTrue, Reason: v1beta1.AcceptedReason,
			ObservedGeneration: p.Generation, LastTransitionTime: now,
		}},
		Enforcement: &v1alpha1.EnforcementStatus{
			Allowed: ptr.To[int64](10), Limited: ptr.To[int64](2), ShadowLimited: ptr.To[int64](0),
			FailedOpen: ptr.To[int64](0), Penalized: ptr.To[int64](4), Window: &metav1.Duration{Duration: 5 * time.Minute}, UpdatedAt: &now,
		},
		Fleets: []v1alpha1.FleetStatus{{
			Namespace: "sluice-system", Name: "default", SnapshotVersion: "sha256-0123abcd",
			PodsSynced: ptr.To[int32](3), PodsReady: ptr.To[int32](3),
		}},
	}
	want := p.Status.DeepCopy()
	if err := k8sClient.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}

	got := &v1alpha1.RateLimitPolicy{}
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(*want, got.Status); diff != "" {
		t.Errorf("status after round trip (-want +got):\n%s", diff)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, v1beta1.AcceptedCondition) {
		t.Errorf("Accepted condition lost: %+v", got.Status.Conditions)
	}
}

// requireAccepted creates p and checks that the limiter accepts it too (in
// v1beta1, converted by api/convert), and that the API server's defaults,
// converted, are DefaultPolicy's.
func requireAccepted(t *testing.T, p *v1alpha1.RateLimitPolicy) {
	t.Helper()
	src := policytest.Sources(*p)[0]
	if errs := config.ValidateSource(&src); len(errs) > 0 {
		t.Errorf("ValidateSource: %v", errs.ToAggregate())
	}
	config.DefaultPolicy(&src.RateLimitPolicy)

	got := p.DeepCopy()
	if err := k8sClient.Create(t.Context(), got); err != nil {
		t.Fatalf("API server rejected the policy: %v", err)
	}
	deleteAtCleanup(t, got)
	stored := policytest.Sources(*got)[0]
	if diff := cmp.Diff(src.Spec, stored.Spec); diff != "" {
		t.Errorf("API server defaults differ from DefaultPolicy (-DefaultPolicy +API server), in v1beta1:\n%s", diff)
	}
}

// requireCause fails unless err is an Invalid error with a cause on field whose
// message contains msg.
func requireCause(t *testing.T, err error, field, msg string) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("API server: got error %v, want Invalid", err)
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Details != nil {
		for _, c := range status.Status().Details.Causes {
			if c.Field == field && strings.Contains(c.Message, msg) {
				t.Logf("%s: %s", c.Field, c.Message)
				return
			}
		}
	}
	t.Fatalf("API server: no error on %s containing %q in:\n%v", field, msg, err)
}

// requireValidateRejects loads obj as the limiter loads a policy file and
// fails unless it is refused. The limiter validates the v1beta1 form
// (api/convert converts a v1alpha1 manifest), so its error names v1beta1
// paths and the v1beta1 CRD's messages, not field and msg, the v1alpha1
// CRD's: those are logged beside it.
func requireValidateRejects(t *testing.T, obj map[string]any, field, msg string) {
	t.Helper()
	data, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	_, err = config.Parse("policy.yaml", data)
	if err == nil {
		t.Fatalf("the limiter loads a policy the v1alpha1 CRD refuses (%s: %s)", field, msg)
	}
	t.Logf("v1alpha1 %s: %s; the limiter: %v", field, msg, err)
}

// deleteAtCleanup deletes obj when the test ends, so that tests can run again
// (go test -count) against the same API server.
func deleteAtCleanup(t *testing.T, obj client.Object) {
	t.Cleanup(func() {
		if err := k8sClient.Delete(context.Background(), obj); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s: %v", obj.GetName(), err)
		}
	})
}

func createNamespace(t *testing.T, name string) string {
	t.Helper()
	testtier.Integration(t, "envtest")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k8sClient.Create(t.Context(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

// readPolicies decodes a multi-document manifest strictly, so that a misspelt
// field fails the test rather than vanishing; v1beta1 policies come back
// converted to v1alpha1.
func readPolicies(t *testing.T, path string) []*v1alpha1.RateLimitPolicy {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []*v1alpha1.RateLimitPolicy
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var anything any
		if err := yaml.Unmarshal(doc, &anything); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if anything == nil {
			continue // only comments
		}
		p := &v1alpha1.RateLimitPolicy{}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err == nil && tm.APIVersion == v1beta1.GroupVersion.String() && tm.Kind == "RateLimitPolicy" {
			// The samples are v1beta1: decode them so, and convert.
			b := &v1beta1.RateLimitPolicy{}
			if err := yaml.UnmarshalStrict(doc, b); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if err := p.ConvertFrom(b); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			p.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RateLimitPolicy"}
		} else if err := yaml.UnmarshalStrict(doc, p); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if p.APIVersion != v1alpha1.GroupVersion.String() || p.Kind != "RateLimitPolicy" {
			t.Fatalf("%s: unexpected %s %s", path, p.APIVersion, p.Kind)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no policies", path)
	}
	return out
}
