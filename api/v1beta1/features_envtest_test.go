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
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/conversiontest"
	"github.com/sluice-dev/sluice/internal/testtier"
)

// k8sClient talks to the envtest API server that TestMain starts, with the
// CRDs of config/crd/bases, as api/v1alpha1's suite does.
var k8sClient client.Client

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() { // the unit tier: no API server; the envtest tests skip themselves
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
	conversiontest.Prepare(env)
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest (run hack/setup-envtest.sh): %v\n", err)
		_ = env.Stop()
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
	if k8sClient, err = client.New(cfg, client.Options{Scheme: conversiontest.Scheme()}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// setting is one way the parity test sets a feature on a spec.
type setting struct {
	name v1beta1.FeatureName
	set  func(s *v1beta1.RateLimitPolicySpec)
}

func rate(s *v1beta1.RateLimitPolicySpec) *v1beta1.RateLimit {
	if s.Limit.Rate == nil {
		s.Limit.Rate = &v1beta1.RateLimit{Limit: 100}
	}
	return s.Limit.Rate
}

func cost(s *v1beta1.RateLimitPolicySpec) *v1beta1.Cost {
	r := rate(s)
	if r.Cost == nil {
		r.Cost = &v1beta1.Cost{}
	}
	return r.Cost
}

func concurrency(s *v1beta1.RateLimitPolicySpec) *v1beta1.ConcurrencyLimit {
	if s.Limit.Concurrency == nil {
		s.Limit.Concurrency = &v1beta1.ConcurrencyLimit{MaxInFlight: 10}
	}
	return s.Limit.Concurrency
}

func levels() *v1beta1.PriorityShedding {
	return &v1beta1.PriorityShedding{Default: "low",
		Levels: []v1beta1.PriorityLevel{{Value: "high", Share: 100}, {Value: "low", Share: 50}}}
}

// costMaxAboveLimit is no row of the table but a value its cost.max rule
// judges: 150 units fit a burst of 200, not a limit of 100.
const costMaxAboveLimit v1beta1.FeatureName = "cost.max above limit"

// settings set each feature of the table, and a cost.max above the limit.
var settings = []setting{
	{v1beta1.FeatureRate, func(s *v1beta1.RateLimitPolicySpec) { rate(s) }},
	{v1beta1.FeatureConcurrency, func(s *v1beta1.RateLimitPolicySpec) { concurrency(s) }},
	{v1beta1.FeaturePeriod, func(s *v1beta1.RateLimitPolicySpec) { rate(s).Period = ptr.To[v1beta1.Duration]("1m") }},
	{v1beta1.FeatureCalendar, func(s *v1beta1.RateLimitPolicySpec) {
		rate(s).Calendar = &v1beta1.Calendar{Period: v1beta1.CalendarDay}
	}},
	{v1beta1.FeatureBurst, func(s *v1beta1.RateLimitPolicySpec) { rate(s).Burst = ptr.To[int64](200) }},
	{v1beta1.FeatureLimitAbove10000, func(s *v1beta1.RateLimitPolicySpec) { rate(s).Limit = 20000 }},
	{v1beta1.FeatureCostMax, func(s *v1beta1.RateLimitPolicySpec) { cost(s).Max = ptr.To[int64](1) }},
	{costMaxAboveLimit, func(s *v1beta1.RateLimitPolicySpec) { cost(s).Max = ptr.To[int64](150) }},
	{v1beta1.FeatureReserve, func(s *v1beta1.RateLimitPolicySpec) { cost(s).Reserve = &v1beta1.Reserve{} }},
	{v1beta1.FeatureLocalTier, func(s *v1beta1.RateLimitPolicySpec) { rate(s).LocalTier = &v1beta1.LocalTier{} }},
	{v1beta1.FeaturePriority, func(s *v1beta1.RateLimitPolicySpec) { rate(s).Priority = levels() }},
	{v1beta1.FeaturePenalty, func(s *v1beta1.RateLimitPolicySpec) { rate(s).Penalty = &v1beta1.Penalty{Duration: "10m"} }},
	{v1beta1.FeatureGlobal, func(s *v1beta1.RateLimitPolicySpec) { rate(s).Scope = ptr.To(v1beta1.ScopeGlobal) }},
	{v1beta1.FeatureRequestOverride, func(s *v1beta1.RateLimitPolicySpec) {
		rate(s).RequestOverride = &v1beta1.RequestOverride{Maximum: 5000}
	}},
	{v1beta1.FeatureLeaseDuration, func(s *v1beta1.RateLimitPolicySpec) { concurrency(s).LeaseDuration = ptr.To[v1beta1.Duration]("1m") }},
	{v1beta1.FeatureConcurrencyPriority, func(s *v1beta1.RateLimitPolicySpec) { concurrency(s).Priority = levels() }},
	{v1beta1.FeatureSoft, func(s *v1beta1.RateLimitPolicySpec) { s.Mode = ptr.To(v1beta1.Soft) }},
	{v1beta1.FeatureHidden, func(s *v1beta1.RateLimitPolicySpec) {
		s.Response = &v1beta1.Response{Visibility: ptr.To(v1beta1.Hidden)}
	}},
}

// specFor is the least spec of taker t (with its algorithm, or its
// concurrency member) that sets the given features: the window a rate
// needs is a period, unless a feature set one.
func specFor(t v1beta1.Taker, set ...setting) v1beta1.RateLimitPolicySpec {
	s := v1beta1.RateLimitPolicySpec{Domain: "parity", Descriptors: []v1beta1.Descriptor{{Key: "user_id"}}}
	if t == v1beta1.TakerConcurrency {
		s.Limit.Type = v1beta1.LimitConcurrency
		concurrency(&s)
	} else {
		s.Limit.Type = v1beta1.LimitRate
		rate(&s).Algorithm = ptr.To(v1beta1.Algorithm(t))
	}
	for _, x := range set {
		x.set(&s)
	}
	if r := s.Limit.Rate; r != nil && r.Period == nil && r.Calendar == nil {
		r.Period = ptr.To[v1beta1.Duration]("1m")
	}
	return s
}

// parityCase is one policy of the parity test.
type parityCase struct {
	name string
	spec v1beta1.RateLimitPolicySpec
}

// parityCases are every taker with no feature, each feature and each pair
// of features, and the specs that leave out a member the type or the rate
// needs.
func parityCases() []parityCase {
	var cases []parityCase
	for _, t := range v1beta1.Takers {
		cases = append(cases, parityCase{string(t), specFor(t)})
		for i, a := range settings {
			cases = append(cases, parityCase{fmt.Sprintf("%s x %s", t, a.name), specFor(t, a)})
			for _, b := range settings[i+1:] {
				cases = append(cases, parityCase{fmt.Sprintf("%s x %s x %s", t, a.name, b.name), specFor(t, a, b)})
			}
		}
	}
	noWindow := specFor(v1beta1.Taker(v1beta1.GCRA))
	noWindow.Limit.Rate.Period = nil
	noRate := specFor(v1beta1.TakerConcurrency)
	noRate.Limit.Type = v1beta1.LimitRate
	noConcurrency := specFor(v1beta1.Taker(v1beta1.FixedWindow))
	noConcurrency.Limit.Type = v1beta1.LimitConcurrency
	return append(cases, parityCase{"rate without period or calendar", noWindow},
		parityCase{"type Rate without rate", noRate}, parityCase{"type Concurrency without concurrency", noConcurrency})
}

// TestFeatureParity creates (dry run) every taker x feature and feature x
// feature policy on the API server, with the CRD's CEL rules, and runs
// ValidateFeatures on it: both must accept it, or both refuse it on the
// same field paths, the API server's message on each path holding the Go
// error's reason.
func TestFeatureParity(t *testing.T) {
	testtier.Integration(t, "envtest")
	ns := createNamespace(t, "feature-parity")
	cases := parityCases()
	var refused atomic.Int64
	t.Run("pairs", func(t *testing.T) {
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				p := &v1beta1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("parity-%d", i), Namespace: ns}, Spec: tc.spec}
				goErrs := v1beta1.ValidateFeatures(&p.Spec, field.NewPath("spec"))
				causes, err := apiCauses(t, k8sClient.Create(t.Context(), p, client.DryRunAll))
				if err != nil {
					t.Fatal(err)
				}
				if len(goErrs) > 0 {
					refused.Add(1)
				}
				requireSameRefusals(t, goErrs, causes)
			})
		}
	})
	t.Logf("%d policies (%d takers x (none, %d features, %d feature pairs), and 3 without a member): %d refused by both, %d accepted by both",
		len(cases), len(v1beta1.Takers), len(settings), len(settings)*(len(settings)-1)/2, refused.Load(), int64(len(cases))-refused.Load())
}

// apiCauses is the causes of the API server's answer err: none when it
// accepted the policy, an error when it answered anything but Invalid.
func apiCauses(t *testing.T, err error) ([]metav1.StatusCause, error) {
	t.Helper()
	if err == nil {
		return nil, nil
	}
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return nil, fmt.Errorf("API server: got %v, want Invalid with causes", err)
	}
	return status.Status().Details.Causes, nil
}

// requireSameRefusals fails unless the Go errors and the API server's
// causes name the same field paths, as many times each, and the cause on
// each path holds the Go error's reason.
func requireSameRefusals(t *testing.T, goErrs field.ErrorList, causes []metav1.StatusCause) {
	t.Helper()
	var goPaths, apiPaths []string
	for _, e := range goErrs {
		goPaths = append(goPaths, e.Field)
	}
	for _, c := range causes {
		apiPaths = append(apiPaths, c.Field)
	}
	slices.Sort(goPaths)
	slices.Sort(apiPaths)
	if !slices.Equal(goPaths, apiPaths) {
		t.Fatalf("ValidateFeatures refuses %v, the API server %v\nGo: %v\nAPI server: %v", goPaths, apiPaths, goErrs, causes)
	}
	for _, e := range goErrs {
		if !slices.ContainsFunc(causes, func(c metav1.StatusCause) bool {
			return c.Field == e.Field && strings.Contains(c.Message, e.Detail)
		}) {
			t.Errorf("no API server cause on %s says %q: %v", e.Field, e.Detail, causes)
		}
	}
}

func createNamespace(t *testing.T, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k8sClient.Create(t.Context(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}
