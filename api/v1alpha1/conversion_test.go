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
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/policytest"
)

// samplePolicies reads every RateLimitPolicy of config/samples and of the
// limiter's good test files, in either version.
func samplePolicies(t *testing.T) (alpha []v1alpha1.RateLimitPolicy, beta []v1beta1.RateLimitPolicy) {
	t.Helper()
	var files []string
	for _, root := range []string{"../../config/samples", "../../limiter/config/testdata"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && strings.HasPrefix(d.Name(), "bad") {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(path, ".yaml") {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for doc := 1; ; doc++ {
			raw, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: document %d: %v", path, doc, err)
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(raw, &tm); err != nil || tm.Kind != "RateLimitPolicy" {
				continue
			}
			switch tm.APIVersion {
			case v1alpha1.GroupVersion.String():
				var p v1alpha1.RateLimitPolicy
				if err := yaml.UnmarshalStrict(raw, &p); err != nil {
					t.Fatalf("%s: document %d: %v", path, doc, err)
				}
				alpha = append(alpha, p)
			case v1beta1.GroupVersion.String():
				var p v1beta1.RateLimitPolicy
				if err := yaml.UnmarshalStrict(raw, &p); err != nil {
					t.Fatalf("%s: document %d: %v", path, doc, err)
				}
				beta = append(beta, p)
			}
		}
	}
	if len(alpha)+len(beta) < 10 {
		t.Fatalf("found %d v1alpha1 and %d v1beta1 sample policies in %v: fewer than expected", len(alpha), len(beta), files)
	}
	return alpha, beta
}

// alphaRoundTrip converts p to v1beta1 and back, fails the test unless it
// comes back identical, and returns the v1beta1 object.
func alphaRoundTrip(t *testing.T, p *v1alpha1.RateLimitPolicy) *v1beta1.RateLimitPolicy {
	t.Helper()
	hub := &v1beta1.RateLimitPolicy{}
	if err := p.DeepCopy().ConvertTo(hub); err != nil {
		t.Fatalf("%s: ConvertTo: %v", p.Name, err)
	}
	back := &v1alpha1.RateLimitPolicy{}
	if err := back.ConvertFrom(hub.DeepCopy()); err != nil {
		t.Fatalf("%s: ConvertFrom: %v", p.Name, err)
	}
	back.TypeMeta = p.TypeMeta
	if !equality.Semantic.DeepEqual(back, p) {
		t.Fatalf("%s: v1alpha1 -> v1beta1 -> v1alpha1 is not identical (-want +got):\n%s", p.Name, cmp.Diff(p, back))
	}
	return hub
}

// betaRoundTrip converts p to v1alpha1 and back, fails the test unless it
// comes back identical, and returns the v1alpha1 object.
func betaRoundTrip(t *testing.T, p *v1beta1.RateLimitPolicy) *v1alpha1.RateLimitPolicy {
	t.Helper()
	spoke := &v1alpha1.RateLimitPolicy{}
	if err := spoke.ConvertFrom(p.DeepCopy()); err != nil {
		t.Fatalf("%s: ConvertFrom: %v", p.Name, err)
	}
	back := &v1beta1.RateLimitPolicy{}
	if err := spoke.DeepCopy().ConvertTo(back); err != nil {
		t.Fatalf("%s: ConvertTo: %v", p.Name, err)
	}
	back.TypeMeta = p.TypeMeta
	if !equality.Semantic.DeepEqual(back, p) {
		t.Fatalf("%s: v1beta1 -> v1alpha1 -> v1beta1 is not identical (-want +got):\n%s", p.Name, cmp.Diff(p, back))
	}
	return spoke
}

// TestConversionRoundTripsSamples converts every sample both ways: each
// comes back identical, a sample defaulted as the API server would needs no
// conversion annotation, and each converts to a v1alpha1 spec the limiter
// accepts.
func TestConversionRoundTripsSamples(t *testing.T) {
	alpha, beta := samplePolicies(t)
	for i := range alpha {
		p := &alpha[i]
		alphaRoundTrip(t, p)
		defaulted := defaultedAlpha(t, p)
		hub := alphaRoundTrip(t, defaulted)
		if _, ok := hub.Annotations[v1alpha1.V1alpha1SpecAnnotation]; ok && sayableInV1beta1(&defaulted.Spec) {
			t.Errorf("%s/%s: the defaulted sample needed the %s annotation to convert to v1beta1: %s", p.Namespace, p.Name,
				v1alpha1.V1alpha1SpecAnnotation, hub.Annotations[v1alpha1.V1alpha1SpecAnnotation])
		}
	}
	for i := range beta {
		p := &beta[i]
		spoke := betaRoundTrip(t, p)
		r := p.Spec.Limit.Rate
		onlyV1beta1 := r != nil && (r.Scope != nil || r.RequestOverride != nil) // v1alpha1 has no field for these
		if v, ok := spoke.Annotations[v1alpha1.V1beta1SpecAnnotation]; ok && !onlyV1beta1 {
			t.Errorf("%s/%s: the v1beta1 sample needed the %s annotation to convert to v1alpha1: %s", p.Namespace, p.Name, v1alpha1.V1beta1SpecAnnotation, v)
		}
		if _, err := policytest.Compile([]v1alpha1.RateLimitPolicy{*spoke}); err != nil {
			t.Errorf("%s/%s converts to a v1alpha1 spec the limiter refuses: %v", p.Namespace, p.Name, err)
		}
	}
	t.Logf("%d v1alpha1 and %d v1beta1 samples round-trip", len(alpha), len(beta))
}

// sayableInV1beta1 reports whether v1beta1 can say all of s: it names only
// the default lease entry and priority key (v1beta1 leaves them to the
// fleet), has no disabled localTier (v1beta1 omits it) and no soft: false,
// and its durations are whole milliseconds.
func sayableInV1beta1(s *v1alpha1.RateLimitPolicySpec) bool {
	if le, holds := s.LeaseEntry(); holds && le != v1alpha1.DefaultLeaseEntry {
		return false
	}
	if (s.LocalTier != nil && !s.LocalTierEnabled()) || (s.Soft != nil && !*s.Soft) {
		return false
	}
	ds := []*metav1.Duration{&s.Rate.Period}
	if s.Concurrency != nil {
		ds = append(ds, s.Concurrency.LeaseDuration)
	}
	if s.Reserve != nil {
		ds = append(ds, s.Reserve.ExpireAfter)
	}
	if s.LocalTier != nil {
		ds = append(ds, s.LocalTier.TTL)
	}
	if s.Penalty != nil {
		ds = append(ds, &s.Penalty.Duration, s.Penalty.Within)
	}
	for _, d := range ds {
		if d != nil && d.Duration%time.Millisecond != 0 {
			return false // the Gateway API format stops at milliseconds
		}
	}
	return s.Priority == nil || s.Priority.Key == v1alpha1.DefaultPriorityEntry
}

// TestConversionRoundTripsFuzzedSpecs converts thousands of random valid
// specs both ways. Specs defaulted as the API server would, with the
// default entries and durations in the Gateway API format, convert without
// an annotation; the others (an explicit soft: false, a disabled
// localTier, another lease entry, a duration in nanoseconds) round-trip
// through it.
func TestConversionRoundTripsFuzzedSpecs(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 1))
	annotated := 0
	for i := range 3000 {
		clean := i%3 != 0
		a := randomAlphaPolicy(rng, i, clean)
		if _, err := policytest.Compile([]v1alpha1.RateLimitPolicy{*a}); err != nil {
			t.Fatalf("the generator made an invalid policy %s: %v\n%+v", a.Name, err, a.Spec)
		}
		hub := alphaRoundTrip(t, a)
		if _, ok := hub.Annotations[v1alpha1.V1alpha1SpecAnnotation]; ok {
			annotated++
			if clean {
				t.Fatalf("%s: a clean spec needed the conversion annotation: %+v", a.Name, a.Spec)
			}
		}
		b := randomBetaPolicy(rng, i)
		spoke := betaRoundTrip(t, b)
		if v, ok := spoke.Annotations[v1alpha1.V1beta1SpecAnnotation]; ok {
			t.Fatalf("%s: a v1beta1 spec in canonical form needed the conversion annotation: %s", b.Name, v)
		}
		if _, err := policytest.Compile([]v1alpha1.RateLimitPolicy{*spoke}); err != nil {
			t.Fatalf("%s converts to a v1alpha1 spec the limiter refuses: %v\n%+v", b.Name, err, b.Spec)
		}
	}
	if annotated == 0 {
		t.Fatal("no fuzzed spec needed the conversion annotation: the generator does not reach what v1beta1 can't say")
	}
	t.Logf("3000 specs each way; %d v1alpha1 specs kept their spec in the annotation", annotated)
}

// TestConversionAnnotationGoesStale shows that an annotation left by a
// conversion no longer applies once the object was edited in the other
// version: the edit wins, and the annotation is dropped.
func TestConversionAnnotationGoesStale(t *testing.T) {
	a := &v1alpha1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Name: "stale", Namespace: "default"},
		Spec: v1alpha1.RateLimitPolicySpec{Domain: "d", Descriptors: []v1alpha1.Descriptor{{Key: "k"}},
			Algorithm: ptr.To(v1alpha1.Concurrency), Concurrency: &v1alpha1.ConcurrencyLimit{MaxInFlight: 5,
				LeaseDuration: &metav1.Duration{Duration: time.Minute}, LeaseEntry: ptr.To("my_lease")},
			Shadow: ptr.To(false), FailureMode: ptr.To(v1alpha1.FailOpen)}}
	hub := alphaRoundTrip(t, a)
	if _, ok := hub.Annotations[v1alpha1.V1alpha1SpecAnnotation]; !ok {
		t.Fatal("a non-default lease entry converted to v1beta1 without the annotation that keeps it")
	}
	hub.Spec.Limit.Concurrency.MaxInFlight = 7 // an edit made in v1beta1
	back := &v1alpha1.RateLimitPolicy{}
	if err := back.ConvertFrom(hub); err != nil {
		t.Fatal(err)
	}
	if got := back.Spec.Concurrency.MaxInFlight; got != 7 {
		t.Errorf("maxInFlight after the v1beta1 edit = %d, want 7: the stale annotation won", got)
	}
	if got := *back.Spec.Concurrency.LeaseEntry; got != v1alpha1.DefaultLeaseEntry {
		t.Errorf("leaseEntry after the v1beta1 edit = %q, want the default %q", got, v1alpha1.DefaultLeaseEntry)
	}
	if len(back.Annotations) != 0 {
		t.Errorf("annotations after the v1beta1 edit = %v, want none", back.Annotations)
	}
}

func pick[T any](rng *rand.Rand, vs ...T) T { return vs[rng.IntN(len(vs))] }

// randomDuration returns a duration from lo to hi in whole milliseconds
// (or, unless clean, sometimes with nanoseconds).
func randomDuration(rng *rand.Rand, lo, hi time.Duration, clean bool) time.Duration {
	step := pick(rng, time.Millisecond, time.Second, time.Minute, time.Hour)
	if !clean && rng.IntN(4) == 0 {
		step = time.Nanosecond
	}
	n := int64((hi - lo) / step)
	if n <= 0 {
		return lo
	}
	return lo + time.Duration(rng.Int64N(n+1))*step
}

func randomDescriptors(rng *rand.Rand) (ds []v1alpha1.Descriptor) {
	for j := range 1 + rng.IntN(4) {
		d := v1alpha1.Descriptor{Key: fmt.Sprintf("k%d", j)}
		if rng.IntN(2) == 0 {
			d.Value = ptr.To(fmt.Sprintf("v%d", rng.IntN(100)))
		}
		ds = append(ds, d)
	}
	return ds
}

func randomPriority(rng *rand.Rand, key string) *v1alpha1.PriorityShedding {
	p := &v1alpha1.PriorityShedding{Key: key}
	share := int32(100)
	for j := range 1 + rng.IntN(4) {
		share -= int32(rng.IntN(int(share) + 1))
		p.Levels = append(p.Levels, v1alpha1.PriorityLevel{Value: fmt.Sprintf("p%d", j), Share: share})
	}
	p.Default = p.Levels[rng.IntN(len(p.Levels))].Value
	return p
}

// randomAlphaPolicy returns a valid v1alpha1 policy. A clean one is
// defaulted as the API server would and uses the default entries and
// millisecond durations; another may leave fields unset, say soft: false,
// disable its localTier or name its own lease entry.
func randomAlphaPolicy(rng *rand.Rand, i int, clean bool) *v1alpha1.RateLimitPolicy {
	p := &v1alpha1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fuzz-%d", i), Namespace: "ns",
		Labels: map[string]string{"i": fmt.Sprint(i)}}}
	s := &p.Spec
	s.Domain = pick(rng, "payments", "search", "llm")
	s.Descriptors = randomDescriptors(rng)
	s.FailureMode = ptr.To(pick(rng, v1alpha1.FailureModes...))
	s.Algorithm = ptr.To(pick(rng, v1alpha1.Algorithms...))
	leaseEntry := v1alpha1.DefaultLeaseEntry
	prioKey := v1alpha1.DefaultPriorityEntry
	if !clean && rng.IntN(3) == 0 {
		leaseEntry, prioKey = "my_lease", "my_priority"
	}
	mode := rng.IntN(3) // enforce, soft, shadow
	hidden := rng.IntN(4) == 0
	if mode == 1 && hidden {
		hidden = false
	}
	if hidden {
		s.Visibility = ptr.To(v1alpha1.Hidden)
	} else if rng.IntN(4) == 0 {
		s.Visibility = ptr.To(v1alpha1.Visible)
	}
	if rng.IntN(3) == 0 {
		s.Problem = &v1alpha1.Problem{Type: ptr.To(pick(rng, v1alpha1.ProblemTypes...))}
		if rng.IntN(2) == 0 {
			s.Problem.Detail = ptr.To("ask for more")
		}
	}
	if *s.Algorithm == v1alpha1.Concurrency {
		s.Concurrency = &v1alpha1.ConcurrencyLimit{MaxInFlight: 1 + rng.Int64N(10000),
			LeaseDuration: &metav1.Duration{Duration: randomDuration(rng, time.Millisecond, 24*time.Hour, clean)},
			LeaseEntry:    ptr.To(leaseEntry)}
		if rng.IntN(3) == 0 {
			s.Priority = randomPriority(rng, prioKey)
		}
	} else {
		alg := *s.Algorithm
		limitMax := int64(1_000_000_000)
		if alg == v1alpha1.SlidingLog {
			limitMax = 10000
		}
		s.Rate.Limit = 1 + rng.Int64N(limitMax)
		if alg == v1alpha1.FixedWindow && rng.IntN(3) == 0 {
			s.Rate.Calendar = ptr.To(pick(rng, v1alpha1.CalendarPeriods...))
			if rng.IntN(2) == 0 {
				s.Rate.TimeZone = ptr.To(pick(rng, "UTC", "Europe/Paris", "America/New_York"))
			}
		} else {
			s.Rate.Period = metav1.Duration{Duration: randomDuration(rng, time.Second, 720*time.Hour, clean)}
		}
		capacity := s.Rate.Limit
		if (alg == v1alpha1.TokenBucket || alg == v1alpha1.GCRA) && rng.IntN(2) == 0 {
			s.Burst = ptr.To(1 + rng.Int64N(1_000_000_000))
			capacity = *s.Burst
		}
		if rng.IntN(3) == 0 {
			s.MaxCost = ptr.To(1 + rng.Int64N(capacity))
		}
		// At most one of localTier, reserve and penalty; localTier only
		// without SlidingLog, calendar and priority.
		switch rng.IntN(4) {
		case 0:
			if alg != v1alpha1.SlidingLog && s.Rate.Calendar == nil {
				s.LocalTier = &v1alpha1.LocalTier{Enabled: ptr.To(true),
					TTL: &metav1.Duration{Duration: randomDuration(rng, 100*time.Millisecond, time.Minute, clean)}}
				if !clean && rng.IntN(3) == 0 {
					s.LocalTier.Enabled = ptr.To(false)
				}
				if rng.IntN(2) == 0 {
					s.LocalTier.MaxOvershoot = ptr.To(pick(rng, intstr.FromInt32(rng.Int32N(1000)), intstr.FromString(fmt.Sprintf("%d%%", rng.IntN(101)))))
				}
			}
		case 1:
			if alg != v1alpha1.SlidingLog {
				s.Reserve = &v1alpha1.Reserve{LeaseEntry: ptr.To(leaseEntry),
					ExpireAfter: &metav1.Duration{Duration: randomDuration(rng, time.Second, 24*time.Hour, clean)}}
			}
		case 2:
			if mode != 1 {
				s.Penalty = &v1alpha1.Penalty{Duration: metav1.Duration{Duration: randomDuration(rng, time.Second, 720*time.Hour, clean)},
					After: ptr.To(1 + rng.Int32N(1000))}
				if rng.IntN(2) == 0 {
					s.Penalty.Within = &metav1.Duration{Duration: randomDuration(rng, time.Second, 720*time.Hour, clean)}
				}
				if rng.IntN(2) == 0 {
					s.Penalty.Status = ptr.To(400 + rng.Int32N(200))
					s.Penalty.Reason = ptr.To("go away")
				}
			}
		}
		if !s.LocalTierEnabled() && rng.IntN(3) == 0 {
			s.Priority = randomPriority(rng, prioKey)
		}
	}
	switch mode {
	case 0:
		s.Shadow = ptr.To(false)
	case 1:
		s.Shadow, s.Soft = ptr.To(false), ptr.To(true)
	case 2:
		s.Shadow = ptr.To(true)
	}
	if !clean {
		switch rng.IntN(4) {
		case 0:
			s.Soft = ptr.To(false)
		case 1:
			s.Shadow = nil
			if mode == 2 {
				s.Shadow = ptr.To(true)
			}
		case 2:
			s.FailureMode = nil
		}
	}
	return p
}

// randomBetaPolicy returns a valid v1beta1 policy, defaulted as the API
// server would, with its durations in canonical form (1m, not 60s).
func randomBetaPolicy(rng *rand.Rand, i int) *v1beta1.RateLimitPolicy {
	a := randomAlphaPolicy(rng, i, true)
	b := &v1beta1.RateLimitPolicy{}
	if err := a.ConvertTo(b); err != nil {
		panic(err)
	}
	b.Name = fmt.Sprintf("fuzz-beta-%d", i)
	return b
}

// defaultedAlpha is a copy of p with the defaults the v1alpha1 CRD sets
// on admission (as limiter/config's v1alpha1 defaulting did, before the
// limiter worked on v1beta1 only).
func defaultedAlpha(t *testing.T, p *v1alpha1.RateLimitPolicy) *v1alpha1.RateLimitPolicy {
	t.Helper()
	out := p.DeepCopy()
	if out.Namespace == "" {
		out.Namespace = "default"
	}
	s := &out.Spec
	if s.Algorithm == nil {
		s.Algorithm = ptr.To(v1alpha1.DefaultAlgorithm)
	}
	if s.FailureMode == nil {
		s.FailureMode = ptr.To(v1alpha1.DefaultFailureMode)
	}
	if s.Shadow == nil {
		s.Shadow = ptr.To(false)
	}
	if lt := s.LocalTier; lt != nil {
		if lt.Enabled == nil {
			lt.Enabled = ptr.To(false)
		}
		if lt.TTL == nil {
			lt.TTL = &metav1.Duration{Duration: v1alpha1.DefaultLocalTierTTL}
		}
	}
	if c := s.Concurrency; c != nil {
		if c.LeaseDuration == nil {
			c.LeaseDuration = &metav1.Duration{Duration: v1alpha1.DefaultLeaseDuration}
		}
		if c.LeaseEntry == nil {
			c.LeaseEntry = ptr.To(v1alpha1.DefaultLeaseEntry)
		}
	}
	if r := s.Reserve; r != nil {
		if r.ExpireAfter == nil {
			r.ExpireAfter = &metav1.Duration{Duration: v1alpha1.DefaultExpireAfter}
		}
		if r.LeaseEntry == nil {
			r.LeaseEntry = ptr.To(v1alpha1.DefaultLeaseEntry)
		}
	}
	if pen := s.Penalty; pen != nil && pen.After == nil {
		pen.After = ptr.To(v1alpha1.DefaultPenaltyAfter)
	}
	return out
}
