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

package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

func validPolicy() *v1alpha1.RateLimitPolicy {
	return &v1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "charges-per-user", Namespace: "payments"},
		Spec: v1alpha1.RateLimitPolicySpec{
			Domain: "payments-api",
			Descriptors: []v1alpha1.Descriptor{
				{Key: "user_id"},
				{Key: "path", Value: ptr.To("/v1/charges")},
			},
			Rate:  v1alpha1.Rate{Limit: 5, Period: metav1.Duration{Duration: time.Minute}},
			Burst: ptr.To[int64](5),
		},
	}
}

// fieldErr is the part of a field.Error a test pins: where and what kind.
type fieldErr struct {
	Field string
	Type  field.ErrorType
}

func TestValidatePolicy(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(p *v1alpha1.RateLimitPolicy)
		want   []fieldErr
		detail string // a substring of the first error's detail, if set
	}{
		{name: "valid", mutate: func(*v1alpha1.RateLimitPolicy) {}},
		{name: "no namespace", mutate: func(p *v1alpha1.RateLimitPolicy) { p.Namespace = "" }},
		{
			name: "every optional field set",
			mutate: func(p *v1alpha1.RateLimitPolicy) {
				p.Spec.Algorithm = ptr.To(v1alpha1.GCRA)
				p.Spec.Shadow = ptr.To(true)
				p.Spec.FailureMode = ptr.To(v1alpha1.FailLocal)
				p.Spec.LocalTier = &v1alpha1.LocalTier{
					Enabled:      ptr.To(true),
					TTL:          &metav1.Duration{Duration: 500 * time.Millisecond},
					MaxOvershoot: ptr.To(intstr.FromString("5%")),
				}
			},
		},
		{
			name: "burst without algorithm means TokenBucket",
			mutate: func(p *v1alpha1.RateLimitPolicy) {
				p.Spec.Algorithm = nil
				p.Spec.Burst = ptr.To[int64](100)
			},
		},
		{
			name: "SlidingLog with localTier whose enabled is unset",
			mutate: func(p *v1alpha1.RateLimitPolicy) {
				p.Spec.Algorithm = ptr.To(v1alpha1.SlidingLog)
				p.Spec.Burst = nil
				p.Spec.LocalTier = &v1alpha1.LocalTier{MaxOvershoot: ptr.To(intstr.FromInt32(0))}
			},
		},
		{
			name:   "name missing",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Name = "" },
			want:   []fieldErr{{"metadata.name", field.ErrorTypeRequired}},
		},
		{
			name:   "name too long",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Name = strings.Repeat("a", 254) },
			want:   []fieldErr{{"metadata.name", field.ErrorTypeInvalid}},
			detail: "no more than 253 characters",
		},
		{
			name:   "name with capitals",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Name = "Charges" },
			want:   []fieldErr{{"metadata.name", field.ErrorTypeInvalid}},
			detail: "RFC 1123 subdomain",
		},
		{
			name:   "namespace with dots",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Namespace = "pay.ments" },
			want:   []fieldErr{{"metadata.namespace", field.ErrorTypeInvalid}},
			detail: "must not contain dots",
		},
		{
			name:   "domain empty",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Domain = "" },
			want:   []fieldErr{{"spec.domain", field.ErrorTypeRequired}},
		},
		{
			name:   "domain too long",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Domain = strings.Repeat("d", 254) },
			want:   []fieldErr{{"spec.domain", field.ErrorTypeTooLong}},
			detail: "may not be more than 253 bytes",
		},
		{
			name:   "domain of 253 multi-byte characters",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Domain = strings.Repeat("é", 253) },
		},
		{
			name:   "no descriptors",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Descriptors = nil },
			want:   []fieldErr{{"spec.descriptors", field.ErrorTypeRequired}},
		},
		{
			name: "9 descriptors",
			mutate: func(p *v1alpha1.RateLimitPolicy) {
				p.Spec.Descriptors = make([]v1alpha1.Descriptor, 9)
				for i := range p.Spec.Descriptors {
					p.Spec.Descriptors[i].Key = string(rune('a' + i))
				}
			},
			want:   []fieldErr{{"spec.descriptors", field.ErrorTypeTooMany}},
			detail: "must have at most 8 items",
		},
		{
			name:   "empty key",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Descriptors[1].Key = "" },
			want:   []fieldErr{{"spec.descriptors[1].key", field.ErrorTypeRequired}},
		},
		{
			name:   "key too long",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Descriptors[0].Key = strings.Repeat("k", 254) },
			want:   []fieldErr{{"spec.descriptors[0].key", field.ErrorTypeTooLong}},
		},
		{
			name:   "empty value",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Descriptors[1].Value = ptr.To("") },
			want:   []fieldErr{{"spec.descriptors[1].value", field.ErrorTypeInvalid}},
			detail: "should be at least 1 chars long",
		},
		{
			name:   "value too long",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Descriptors[1].Value = ptr.To(strings.Repeat("v", 1025)) },
			want:   []fieldErr{{"spec.descriptors[1].value", field.ErrorTypeTooLong}},
		},
		{
			name: "duplicate key, reported once per repeat",
			mutate: func(p *v1alpha1.RateLimitPolicy) {
				p.Spec.Descriptors = append(p.Spec.Descriptors,
					v1alpha1.Descriptor{Key: "user_id"}, v1alpha1.Descriptor{Key: "user_id", Value: ptr.To("bob")})
			},
			want: []fieldErr{
				{"spec.descriptors[2].key", field.ErrorTypeInvalid},
				{"spec.descriptors[3].key", field.ErrorTypeInvalid},
			},
			detail: "descriptor keys must be unique",
		},
		{
			name:   "unknown algorithm",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Algorithm = ptr.To(v1alpha1.Algorithm("tokenbucket")) },
			// The burst rule reads the algorithm as the API server does: not a bucket.
			want: []fieldErr{{"spec.algorithm", field.ErrorTypeNotSupported}, {"spec.burst", field.ErrorTypeForbidden}},
		},
		{
			name: "empty algorithm",
			mutate: func(p *v1alpha1.RateLimitPolicy) {
				p.Spec.Algorithm = ptr.To(v1alpha1.Algorithm(""))
				p.Spec.Burst = nil
			},
			want: []fieldErr{{"spec.algorithm", field.ErrorTypeNotSupported}},
		},
		{
			name:   "unknown failureMode",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.FailureMode = ptr.To(v1alpha1.FailureMode("Fallback")) },
			want:   []fieldErr{{"spec.failureMode", field.ErrorTypeNotSupported}},
			detail: `supported values: "Open", "Closed", "Local"`,
		},
		{
			name:   "rate missing",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Rate = v1alpha1.Rate{} },
			want:   []fieldErr{{"spec.rate", field.ErrorTypeRequired}},
		},
		{
			name:   "period missing",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Rate.Period.Duration = 0 },
			want:   []fieldErr{{"spec.rate.period", field.ErrorTypeRequired}},
			detail: "spec.rate.period is required, unless spec.rate.calendar is set",
		},
		{
			name:   "limit 0",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Rate.Limit = 0 },
			want:   []fieldErr{{"spec.rate.limit", field.ErrorTypeInvalid}},
			detail: "should be greater than or equal to 1",
		},
		{
			name:   "limit above 1e9",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Rate.Limit = 1_000_000_001 },
			want:   []fieldErr{{"spec.rate.limit", field.ErrorTypeInvalid}},
			detail: "should be less than or equal to 1000000000",
		},
		{
			name:   "period 1s",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Rate.Period.Duration = time.Second },
		},
		{
			name:   "period 720h",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Rate.Period.Duration = 720 * time.Hour },
		},
		{
			name:   "period below 1s",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Rate.Period.Duration = time.Second - 1 },
			want:   []fieldErr{{"spec.rate.period", field.ErrorTypeInvalid}},
			detail: "period must be between 1s and 720h",
		},
		{
			name:   "period above 720h",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Rate.Period.Duration = 720*time.Hour + 1 },
			want:   []fieldErr{{"spec.rate.period", field.ErrorTypeInvalid}},
		},
		{
			name:   "negative period",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Rate.Period.Duration = -time.Second },
			want:   []fieldErr{{"spec.rate.period", field.ErrorTypeInvalid}},
		},
		{
			name:   "burst 0",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Burst = ptr.To[int64](0) },
			want:   []fieldErr{{"spec.burst", field.ErrorTypeInvalid}},
			detail: "should be greater than or equal to 1",
		},
		{
			name:   "burst above 1e9",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Burst = ptr.To[int64](1_000_000_001) },
			want:   []fieldErr{{"spec.burst", field.ErrorTypeInvalid}},
		},
		{
			name:   "burst with SlidingWindow",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Algorithm = ptr.To(v1alpha1.SlidingWindow) },
			want:   []fieldErr{{"spec.burst", field.ErrorTypeForbidden}},
			detail: "spec.burst applies only to TokenBucket and GCRA",
		},
		{
			name:   "burst with FixedWindow",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Algorithm = ptr.To(v1alpha1.FixedWindow) },
			want:   []fieldErr{{"spec.burst", field.ErrorTypeForbidden}},
		},
		{
			name:   "burst with SlidingLog",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Algorithm = ptr.To(v1alpha1.SlidingLog) },
			want:   []fieldErr{{"spec.burst", field.ErrorTypeForbidden}},
		},
		{
			name: "localTier with SlidingLog",
			mutate: func(p *v1alpha1.RateLimitPolicy) {
				p.Spec.Algorithm = ptr.To(v1alpha1.SlidingLog)
				p.Spec.Burst = nil
				p.Spec.LocalTier = &v1alpha1.LocalTier{Enabled: ptr.To(true)}
			},
			want:   []fieldErr{{"spec.localTier", field.ErrorTypeForbidden}},
			detail: "spec.localTier is not supported with SlidingLog, which stays exact",
		},
		{
			name: "localTier disabled with SlidingLog",
			mutate: func(p *v1alpha1.RateLimitPolicy) {
				p.Spec.Algorithm = ptr.To(v1alpha1.SlidingLog)
				p.Spec.Burst = nil
				p.Spec.LocalTier = &v1alpha1.LocalTier{Enabled: ptr.To(false)}
			},
		},
		{
			name: "ttl 100ms",
			mutate: func(p *v1alpha1.RateLimitPolicy) {
				p.Spec.LocalTier = &v1alpha1.LocalTier{TTL: dur(100 * time.Millisecond)}
			},
		},
		{
			name:   "ttl 1m",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.LocalTier = &v1alpha1.LocalTier{TTL: dur(time.Minute)} },
		},
		{
			name: "ttl below 100ms",
			mutate: func(p *v1alpha1.RateLimitPolicy) {
				p.Spec.LocalTier = &v1alpha1.LocalTier{TTL: dur(99 * time.Millisecond)}
			},
			want:   []fieldErr{{"spec.localTier.ttl", field.ErrorTypeInvalid}},
			detail: "ttl must be between 100ms and 1m",
		},
		{
			name:   "ttl above 1m",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.LocalTier = &v1alpha1.LocalTier{TTL: dur(61 * time.Second)} },
			want:   []fieldErr{{"spec.localTier.ttl", field.ErrorTypeInvalid}},
		},
		{
			name:   "ttl 0",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.LocalTier = &v1alpha1.LocalTier{TTL: dur(0)} },
			want:   []fieldErr{{"spec.localTier.ttl", field.ErrorTypeInvalid}},
		},
		{name: "maxOvershoot 0", mutate: overshoot(intstr.FromInt32(0))},
		{name: "maxOvershoot 1e9", mutate: overshoot(intstr.FromInt32(1_000_000_000))},
		{name: "maxOvershoot 0%", mutate: overshoot(intstr.FromString("0%"))},
		{name: "maxOvershoot 7%", mutate: overshoot(intstr.FromString("7%"))},
		{name: "maxOvershoot 100%", mutate: overshoot(intstr.FromString("100%"))},
		{
			name:   "maxOvershoot -1",
			mutate: overshoot(intstr.FromInt32(-1)),
			want:   []fieldErr{{"spec.localTier.maxOvershoot", field.ErrorTypeInvalid}},
			detail: "maxOvershoot must be a count from 0 to 1000000000 or a percentage from 0% to 100%",
		},
		{
			name:   "maxOvershoot above 1e9",
			mutate: overshoot(intstr.FromInt32(1_000_000_001)),
			want:   []fieldErr{{"spec.localTier.maxOvershoot", field.ErrorTypeInvalid}},
		},
		{
			name:   "maxOvershoot 101%",
			mutate: overshoot(intstr.FromString("101%")),
			want:   []fieldErr{{"spec.localTier.maxOvershoot", field.ErrorTypeInvalid}},
		},
		{
			name:   "maxOvershoot 07%",
			mutate: overshoot(intstr.FromString("07%")),
			want:   []fieldErr{{"spec.localTier.maxOvershoot", field.ErrorTypeInvalid}},
		},
		{
			name:   "maxOvershoot number as string",
			mutate: overshoot(intstr.FromString("10")),
			want:   []fieldErr{{"spec.localTier.maxOvershoot", field.ErrorTypeInvalid}},
		},
		{
			name:   "maxOvershoot empty string",
			mutate: overshoot(intstr.FromString("")),
			want:   []fieldErr{{"spec.localTier.maxOvershoot", field.ErrorTypeInvalid}},
		},
		{
			name: "every error at once",
			mutate: func(p *v1alpha1.RateLimitPolicy) {
				p.Name = ""
				p.Spec.Domain = ""
				p.Spec.Descriptors[0].Key = ""
				p.Spec.Rate.Limit = 0
				p.Spec.Algorithm = ptr.To(v1alpha1.FixedWindow)
			},
			want: []fieldErr{
				{"metadata.name", field.ErrorTypeRequired},
				{"spec.domain", field.ErrorTypeRequired},
				{"spec.descriptors[0].key", field.ErrorTypeRequired},
				{"spec.rate.limit", field.ErrorTypeInvalid},
				{"spec.burst", field.ErrorTypeForbidden},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := validPolicy()
			tt.mutate(p)
			before := p.DeepCopy()

			errs := ValidatePolicy(p)

			var got []fieldErr
			for _, e := range errs {
				got = append(got, fieldErr{e.Field, e.Type})
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("errors (-want +got):\n%s\nall: %v", diff, errs)
			}
			if tt.detail != "" && !strings.Contains(errs[0].Error(), tt.detail) {
				t.Errorf("error %q does not contain %q", errs[0].Error(), tt.detail)
			}
			if diff := cmp.Diff(before, p); diff != "" {
				t.Errorf("ValidatePolicy changed the policy:\n%s", diff)
			}
		})
	}
}

func TestDefaultPolicy(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(p *v1alpha1.RateLimitPolicy)
		want   func(p *v1alpha1.RateLimitPolicy)
	}{
		{
			name:   "fills every default",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Namespace = "" },
			want: func(p *v1alpha1.RateLimitPolicy) {
				p.Namespace = "default"
				p.Spec.Algorithm = ptr.To(v1alpha1.TokenBucket)
				p.Spec.FailureMode = ptr.To(v1alpha1.FailOpen)
				p.Spec.Shadow = ptr.To(false)
			},
		},
		{
			name: "keeps what is set",
			mutate: func(p *v1alpha1.RateLimitPolicy) {
				p.Spec.Algorithm = ptr.To(v1alpha1.GCRA)
				p.Spec.FailureMode = ptr.To(v1alpha1.FailClosed)
				p.Spec.Shadow = ptr.To(true)
				p.Spec.LocalTier = &v1alpha1.LocalTier{Enabled: ptr.To(true), TTL: dur(time.Second)}
			},
			want: func(*v1alpha1.RateLimitPolicy) {},
		},
		{
			name:   "fills an empty localTier",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.LocalTier = &v1alpha1.LocalTier{} },
			want: func(p *v1alpha1.RateLimitPolicy) {
				p.Spec.Algorithm = ptr.To(v1alpha1.TokenBucket)
				p.Spec.FailureMode = ptr.To(v1alpha1.FailOpen)
				p.Spec.Shadow = ptr.To(false)
				p.Spec.LocalTier = &v1alpha1.LocalTier{Enabled: ptr.To(false), TTL: dur(2 * time.Second)}
			},
		},
		{
			name:   "leaves burst unset, as the API server does",
			mutate: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Burst = nil },
			want: func(p *v1alpha1.RateLimitPolicy) {
				p.Spec.Algorithm = ptr.To(v1alpha1.TokenBucket)
				p.Spec.FailureMode = ptr.To(v1alpha1.FailOpen)
				p.Spec.Shadow = ptr.To(false)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := validPolicy()
			tt.mutate(p)
			want := p.DeepCopy()
			tt.want(want)

			DefaultPolicy(p)
			if diff := cmp.Diff(want, p); diff != "" {
				t.Fatalf("DefaultPolicy (-want +got):\n%s", diff)
			}
			again := p.DeepCopy()
			DefaultPolicy(again)
			if diff := cmp.Diff(p, again); diff != "" {
				t.Errorf("DefaultPolicy is not idempotent:\n%s", diff)
			}
		})
	}
}

// TestEffectiveValues checks that the spec helpers the limiter uses agree with
// DefaultPolicy, so an undefaulted spec behaves as a defaulted one.
func TestEffectiveValues(t *testing.T) {
	raw := validPolicy()
	raw.Spec.Burst = nil
	raw.Spec.LocalTier = &v1alpha1.LocalTier{}
	defaulted := raw.DeepCopy()
	DefaultPolicy(defaulted)

	for _, s := range []*v1alpha1.RateLimitPolicySpec{&raw.Spec, &defaulted.Spec} {
		if got := s.EffectiveAlgorithm(); got != v1alpha1.TokenBucket {
			t.Errorf("EffectiveAlgorithm() = %s, want TokenBucket", got)
		}
		if got := s.EffectiveFailureMode(); got != v1alpha1.FailOpen {
			t.Errorf("EffectiveFailureMode() = %s, want Open", got)
		}
		if got := s.EffectiveBurst(); got != s.Rate.Limit {
			t.Errorf("EffectiveBurst() = %d, want rate.limit %d", got, s.Rate.Limit)
		}
		if s.IsShadow() || s.LocalTierEnabled() {
			t.Errorf("IsShadow() = %v, LocalTierEnabled() = %v, want false, false", s.IsShadow(), s.LocalTierEnabled())
		}
		if got := s.LocalTier.EffectiveTTL(); got != 2*time.Second {
			t.Errorf("EffectiveTTL() = %v, want 2s", got)
		}
	}
}

func TestOvershootBound(t *testing.T) {
	tests := []struct {
		tier   *v1alpha1.LocalTier
		limit  int64
		want   int64
		wantOK bool
	}{
		{tier: nil, limit: 100},
		{tier: &v1alpha1.LocalTier{}, limit: 100},
		{tier: &v1alpha1.LocalTier{MaxOvershoot: ptr.To(intstr.FromInt32(7))}, limit: 100, want: 7, wantOK: true},
		{tier: &v1alpha1.LocalTier{MaxOvershoot: ptr.To(intstr.FromString("5%"))}, limit: 1000, want: 50, wantOK: true},
		{tier: &v1alpha1.LocalTier{MaxOvershoot: ptr.To(intstr.FromString("5%"))}, limit: 30, want: 1, wantOK: true},
		{tier: &v1alpha1.LocalTier{MaxOvershoot: ptr.To(intstr.FromString("0%"))}, limit: 30, want: 0, wantOK: true},
	}
	for _, tt := range tests {
		got, ok := tt.tier.OvershootBound(tt.limit)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("%+v.OvershootBound(%d) = %d, %v; want %d, %v", tt.tier, tt.limit, got, ok, tt.want, tt.wantOK)
		}
	}
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func overshoot(v intstr.IntOrString) func(p *v1alpha1.RateLimitPolicy) {
	return func(p *v1alpha1.RateLimitPolicy) {
		p.Spec.LocalTier = &v1alpha1.LocalTier{Enabled: ptr.To(true), MaxOvershoot: &v}
	}
}
