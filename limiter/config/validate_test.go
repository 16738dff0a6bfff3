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

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

func validPolicy() *v1beta1.RateLimitPolicy {
	return &v1beta1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "charges-per-user", Namespace: "payments"},
		Spec: v1beta1.RateLimitPolicySpec{
			Domain: "payments-api",
			Descriptors: []v1beta1.Descriptor{
				{Key: "user_id"},
				{Key: "path", Value: ptr.To("/v1/charges")},
			},
			Limit: v1beta1.Limit{Type: v1beta1.LimitRate, Rate: &v1beta1.RateLimit{Limit: 5, Period: ptr.To(v1beta1.Duration("1m")), Burst: ptr.To[int64](5)}},
		},
	}
}

// fieldErr is the part of a field.Error a test pins: where and what kind.
type fieldErr struct {
	Field string
	Type  field.ErrorType
}

type validateCase struct {
	name   string
	mutate func(p *v1beta1.RateLimitPolicy)
	want   []fieldErr
	detail string // a substring of the first error's detail, if set
}

func rate(p *v1beta1.RateLimitPolicy) *v1beta1.RateLimit { return p.Spec.Limit.Rate }

func algorithm(a v1beta1.Algorithm) func(p *v1beta1.RateLimitPolicy) {
	return func(p *v1beta1.RateLimitPolicy) { rate(p).Algorithm = &a }
}

func period(d string) func(p *v1beta1.RateLimitPolicy) {
	return func(p *v1beta1.RateLimitPolicy) { rate(p).Period = ptr.To(v1beta1.Duration(d)) }
}

func ttl(d string) func(p *v1beta1.RateLimitPolicy) {
	return func(p *v1beta1.RateLimitPolicy) {
		rate(p).LocalTier = &v1beta1.LocalTier{TTL: ptr.To(v1beta1.Duration(d))}
	}
}

func overshoot(v intstr.IntOrString) func(p *v1beta1.RateLimitPolicy) {
	return func(p *v1beta1.RateLimitPolicy) { rate(p).LocalTier = &v1beta1.LocalTier{MaxOvershoot: &v} }
}

func both(fs ...func(p *v1beta1.RateLimitPolicy)) func(p *v1beta1.RateLimitPolicy) {
	return func(p *v1beta1.RateLimitPolicy) {
		for _, f := range fs {
			f(p)
		}
	}
}

func fe(f string, t field.ErrorType) []fieldErr { return []fieldErr{{f, t}} }

// The checks of one field each, with v1beta1 field paths.
var fieldCases = []validateCase{
	{name: "valid", mutate: func(*v1beta1.RateLimitPolicy) {}},
	{name: "no namespace", mutate: func(p *v1beta1.RateLimitPolicy) { p.Namespace = "" }},
	{name: "name missing", mutate: func(p *v1beta1.RateLimitPolicy) { p.Name = "" }, want: fe("metadata.name", field.ErrorTypeRequired)},
	{name: "name too long", mutate: func(p *v1beta1.RateLimitPolicy) { p.Name = strings.Repeat("a", 254) },
		want: fe("metadata.name", field.ErrorTypeInvalid), detail: "no more than 253 characters"},
	{name: "name with capitals", mutate: func(p *v1beta1.RateLimitPolicy) { p.Name = "Charges" },
		want: fe("metadata.name", field.ErrorTypeInvalid), detail: "RFC 1123 subdomain"},
	{name: "namespace with dots", mutate: func(p *v1beta1.RateLimitPolicy) { p.Namespace = "pay.ments" },
		want: fe("metadata.namespace", field.ErrorTypeInvalid), detail: "must not contain dots"},
	{name: "domain empty", mutate: func(p *v1beta1.RateLimitPolicy) { p.Spec.Domain = "" }, want: fe("spec.domain", field.ErrorTypeRequired)},
	{name: "domain too long", mutate: func(p *v1beta1.RateLimitPolicy) { p.Spec.Domain = strings.Repeat("d", 254) },
		want: fe("spec.domain", field.ErrorTypeTooLong), detail: "may not be more than 253 bytes"},
	{name: "domain of 253 multi-byte characters", mutate: func(p *v1beta1.RateLimitPolicy) { p.Spec.Domain = strings.Repeat("é", 253) }},
	{name: "no descriptors", mutate: func(p *v1beta1.RateLimitPolicy) { p.Spec.Descriptors = nil }, want: fe("spec.descriptors", field.ErrorTypeRequired)},
	{name: "9 descriptors", mutate: func(p *v1beta1.RateLimitPolicy) {
		p.Spec.Descriptors = nil
		for _, k := range "abcdefghi" {
			p.Spec.Descriptors = append(p.Spec.Descriptors, v1beta1.Descriptor{Key: string(k)})
		}
	}, want: fe("spec.descriptors", field.ErrorTypeTooMany), detail: "must have at most 8 items"},
	{name: "empty key", mutate: func(p *v1beta1.RateLimitPolicy) { p.Spec.Descriptors[0].Key = "" }, want: fe("spec.descriptors[0].key", field.ErrorTypeRequired)},
	{name: "empty value", mutate: func(p *v1beta1.RateLimitPolicy) { p.Spec.Descriptors[1].Value = ptr.To("") },
		want: fe("spec.descriptors[1].value", field.ErrorTypeInvalid), detail: "should be at least 1 chars long"},
	{name: "duplicate key", mutate: func(p *v1beta1.RateLimitPolicy) { p.Spec.Descriptors[1].Key = "user_id" },
		want: fe("spec.descriptors[1].key", field.ErrorTypeInvalid), detail: "descriptor keys must be unique"},
	{name: "unknown limit type", mutate: func(p *v1beta1.RateLimitPolicy) { p.Spec.Limit.Type = "Bogus" }, want: fe("spec.limit.type", field.ErrorTypeNotSupported)},
	{name: "type Concurrency with a rate", mutate: func(p *v1beta1.RateLimitPolicy) { p.Spec.Limit.Type = v1beta1.LimitConcurrency },
		want: fe("spec.limit.concurrency", field.ErrorTypeRequired), detail: "spec.limit must set the member its type names"},
	{name: "unknown algorithm", mutate: algorithm("Bogus"), want: fe("spec.limit.rate.algorithm", field.ErrorTypeNotSupported)},
	{name: "unknown failureMode", mutate: func(p *v1beta1.RateLimitPolicy) { p.Spec.FailureMode = ptr.To(v1beta1.FailureMode("Sometimes")) },
		want: fe("spec.failureMode", field.ErrorTypeNotSupported), detail: `supported values: "Open", "Closed", "Local"`},
	{name: "unknown mode", mutate: func(p *v1beta1.RateLimitPolicy) { p.Spec.Mode = ptr.To(v1beta1.Mode("Loud")) }, want: fe("spec.mode", field.ErrorTypeNotSupported)},
	{name: "period missing", mutate: func(p *v1beta1.RateLimitPolicy) { rate(p).Period = nil },
		want: fe("spec.limit.rate.period", field.ErrorTypeInvalid), detail: "spec.limit.rate takes period, or calendar instead of it"},
	{name: "limit 0", mutate: func(p *v1beta1.RateLimitPolicy) { rate(p).Limit = 0; rate(p).Burst = nil },
		want: fe("spec.limit.rate.limit", field.ErrorTypeInvalid), detail: "should be greater than or equal to 1"},
	{name: "limit above 1e9", mutate: func(p *v1beta1.RateLimitPolicy) { rate(p).Limit = 1_000_000_001 },
		want: fe("spec.limit.rate.limit", field.ErrorTypeInvalid), detail: "should be less than or equal to 1000000000"},
	{name: "period 1s", mutate: period("1s")},
	{name: "period 720h", mutate: period("720h")},
	{name: "period below 1s", mutate: period("999ms"), want: fe("spec.limit.rate.period", field.ErrorTypeInvalid), detail: "period must be between 1s and 720h"},
	{name: "period above 720h", mutate: period("721h"), want: fe("spec.limit.rate.period", field.ErrorTypeInvalid)},
	{name: "period not the Gateway API's format", mutate: period("1.5s"), want: fe("spec.limit.rate.period", field.ErrorTypeInvalid), detail: "is not a duration of the form"},
	{name: "burst 0", mutate: func(p *v1beta1.RateLimitPolicy) { rate(p).Burst = ptr.To[int64](0) },
		want: fe("spec.limit.rate.burst", field.ErrorTypeInvalid), detail: "should be greater than or equal to 1"},
	{name: "ttl 100ms", mutate: ttl("100ms")},
	{name: "ttl 1m", mutate: ttl("1m")},
	{name: "ttl below 100ms", mutate: ttl("99ms"), want: fe("spec.limit.rate.localTier.ttl", field.ErrorTypeInvalid), detail: "ttl must be between 100ms and 1m"},
	{name: "ttl above 1m", mutate: ttl("61s"), want: fe("spec.limit.rate.localTier.ttl", field.ErrorTypeInvalid)},
	{name: "maxOvershoot 0", mutate: overshoot(intstr.FromInt32(0))},
	{name: "maxOvershoot 1e9", mutate: overshoot(intstr.FromInt32(1_000_000_000))},
	{name: "maxOvershoot 100%", mutate: overshoot(intstr.FromString("100%"))},
	{name: "maxOvershoot -1", mutate: overshoot(intstr.FromInt32(-1)), want: fe("spec.limit.rate.localTier.maxOvershoot", field.ErrorTypeInvalid),
		detail: "maxOvershoot must be a count from 0 to 1000000000 or a percentage from 0% to 100%"},
	{name: "maxOvershoot 101%", mutate: overshoot(intstr.FromString("101%")), want: fe("spec.limit.rate.localTier.maxOvershoot", field.ErrorTypeInvalid)},
	{name: "maxOvershoot 07%", mutate: overshoot(intstr.FromString("07%")), want: fe("spec.limit.rate.localTier.maxOvershoot", field.ErrorTypeInvalid)},
	{name: "cost.max 0", mutate: func(p *v1beta1.RateLimitPolicy) { rate(p).Cost = &v1beta1.Cost{Max: ptr.To[int64](0)} },
		want: fe("spec.limit.rate.cost.max", field.ErrorTypeInvalid)},
	{name: "expireAfter above 24h", mutate: func(p *v1beta1.RateLimitPolicy) {
		rate(p).Cost = &v1beta1.Cost{Reserve: &v1beta1.Reserve{ExpireAfter: ptr.To(v1beta1.Duration("25h"))}}
	}, want: fe("spec.limit.rate.cost.reserve.expireAfter", field.ErrorTypeInvalid), detail: "expireAfter must be between 1s and 24h"},
	{name: "requestOverride 0", mutate: func(p *v1beta1.RateLimitPolicy) {
		rate(p).Burst = nil
		rate(p).RequestOverride = &v1beta1.RequestOverride{}
	},
		want: fe("spec.limit.rate.requestOverride.maximum", field.ErrorTypeInvalid)},
	{name: "unknown scope", mutate: func(p *v1beta1.RateLimitPolicy) { rate(p).Scope = ptr.To(v1beta1.RegionScope("Planet")) },
		want: fe("spec.limit.rate.scope", field.ErrorTypeNotSupported)},
	{name: "every error at once", mutate: func(p *v1beta1.RateLimitPolicy) {
		p.Name, p.Spec.Domain, p.Spec.Descriptors[0].Key, rate(p).Limit = "", "", "", 0
	}, want: []fieldErr{
		{"metadata.name", field.ErrorTypeRequired},
		{"spec.domain", field.ErrorTypeRequired},
		{"spec.descriptors[0].key", field.ErrorTypeRequired},
		{"spec.limit.rate.limit", field.ErrorTypeInvalid},
	}},
}

func TestValidatePolicy(t *testing.T) {
	for _, tt := range append(append([]validateCase{}, fieldCases...), featureCases...) {
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
	p := validPolicy()
	p.Namespace = ""
	rate(p).Period = ptr.To(v1beta1.Duration("60s"))
	rate(p).LocalTier = &v1beta1.LocalTier{}
	DefaultPolicy(p)
	want := validPolicy()
	want.Namespace = "default"
	want.Spec.Mode, want.Spec.FailureMode = ptr.To(v1beta1.Enforce), ptr.To(v1beta1.FailOpen)
	rate(want).Algorithm = ptr.To(v1beta1.TokenBucket)
	rate(want).LocalTier = &v1beta1.LocalTier{TTL: ptr.To(v1beta1.Duration("2s"))}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Fatalf("DefaultPolicy (-want +got):\n%s", diff)
	}
	again := p.DeepCopy()
	DefaultPolicy(again)
	if diff := cmp.Diff(p, again); diff != "" {
		t.Errorf("DefaultPolicy is not idempotent:\n%s", diff)
	}
}

func TestOvershootBound(t *testing.T) {
	for _, tt := range []struct {
		o      *intstr.IntOrString
		limit  int64
		want   int64
		wantOK bool
	}{
		{o: nil, limit: 100},
		{o: ptr.To(intstr.FromInt32(7)), limit: 100, want: 7, wantOK: true},
		{o: ptr.To(intstr.FromString("5%")), limit: 1000, want: 50, wantOK: true},
		{o: ptr.To(intstr.FromString("5%")), limit: 30, want: 1, wantOK: true},
		{o: ptr.To(intstr.FromString("0%")), limit: 30, want: 0, wantOK: true},
	} {
		if got, ok := overshootBound(tt.o, tt.limit); got != tt.want || ok != tt.wantOK {
			t.Errorf("overshootBound(%v, %d) = %d, %v; want %d, %v", tt.o, tt.limit, got, ok, tt.want, tt.wantOK)
		}
	}
}
