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

package v1alpha1

import (
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/conversion"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// This file converts RateLimitPolicy between v1alpha1 (this package, a
// spoke) and v1beta1 (the hub, the storage version). Both directions are
// lossless. Most specs map field for field; what one version can't say
// (v1alpha1's per-policy lease entries and priority key, which v1beta1
// leaves to the fleet; an explicit soft: false; a disabled localTier; a
// duration off the Gateway API format; a v1beta1 duration in another
// spelling, such as 60s for 1m) rides along in an annotation holding the
// other version's spec, the way Cluster API keeps conversion data. An
// annotation is used only when the plain mapping would lose something,
// and only while it still matches: one left behind by an edit made in the
// other version is dropped, and a hand-written one is believed only when
// it says what the spec does (conversion_annotation.go).

const (
	// V1alpha1SpecAnnotation, on a v1beta1 object, holds the v1alpha1 spec
	// it was converted from, when v1beta1 can't say all of it.
	V1alpha1SpecAnnotation = "ratelimit.sluice.dev/v1alpha1-spec"
	// V1beta1SpecAnnotation, on a v1alpha1 object, holds the v1beta1 spec
	// it was converted from, when v1alpha1 can't say all of it.
	V1beta1SpecAnnotation = "ratelimit.sluice.dev/v1beta1-spec"

	// DefaultPriorityEntry is the priority key a v1beta1 policy converts
	// to: v1beta1 leaves it to the fleet (spec.entries.priority).
	DefaultPriorityEntry = "priority"
)

var _ conversion.Convertible = &RateLimitPolicy{}

// ConvertTo converts this RateLimitPolicy to the hub version, v1beta1.
func (src *RateLimitPolicy) ConvertTo(dstRaw conversion.Hub) error {
	dst, ok := dstRaw.(*v1beta1.RateLimitPolicy)
	if !ok {
		return fmt.Errorf("converting a v1alpha1 RateLimitPolicy to %T: only v1beta1 is the hub", dstRaw)
	}
	dst.ObjectMeta = *src.ObjectMeta.DeepCopy()
	spec, err := specToHub(&dst.ObjectMeta, &src.Spec, SpecToV1beta1, SpecFromV1beta1, policyHubOnly)
	if err != nil {
		return err
	}
	dst.Spec = spec
	return convertStatus(&src.Status, &dst.Status)
}

// ConvertFrom converts the hub version, v1beta1, to this RateLimitPolicy.
func (dst *RateLimitPolicy) ConvertFrom(srcRaw conversion.Hub) error {
	src, ok := srcRaw.(*v1beta1.RateLimitPolicy)
	if !ok {
		return fmt.Errorf("converting %T to a v1alpha1 RateLimitPolicy: only v1beta1 is the hub", srcRaw)
	}
	dst.ObjectMeta = *src.ObjectMeta.DeepCopy()
	spec, err := specFromHub(&dst.ObjectMeta, &src.Spec, SpecFromV1beta1, SpecToV1beta1, policyLeftToFleet)
	if err != nil {
		return err
	}
	dst.Spec = spec
	return convertStatus(&src.Status, &dst.Status)
}

// specToHub converts spoke spec a to the hub's spec for an object whose
// metadata is meta. A v1beta1 spec kept in meta's annotation is taken
// instead only when it says the same as the plain conversion in another
// spelling (or adds what only v1beta1 can say, which hubOnly copies from
// the stored spec onto the plain one) and converts back to exactly a; when
// the hub spec can't say all of a, a itself is kept in an annotation (and
// a v1alpha1-spec annotation written on a by hand is dropped). Both kinds
// convert this way.
func specToHub[A, B any](meta *metav1.ObjectMeta, a *A, to func(*A) (B, error), from func(*B) (A, error), hubOnly func(plain, stored *B)) (B, error) {
	stored, hasStored := takeAnnotation(meta, V1beta1SpecAnnotation)
	takeAnnotation(meta, V1alpha1SpecAnnotation) // hand-written on a spoke: the hub's is written below, or none
	spec, err := to(a)
	if err != nil {
		return spec, err
	}
	var b B
	if hasStored && decodeStored(stored, &b) && sameSpelledV1beta1.DeepEqual(b, withHubOnly(spec, &b, hubOnly)) {
		if back, err := from(&b); err == nil && equality.Semantic.DeepEqual(back, *a) {
			spec = b
		}
	}
	if back, err := from(&spec); err != nil || !equality.Semantic.DeepEqual(back, *a) {
		if err := putAnnotation(meta, V1alpha1SpecAnnotation, a); err != nil {
			return spec, err
		}
	}
	return spec, nil
}

// withHubOnly returns plain with what only v1beta1 can say copied from
// stored (the fields v1alpha1 has no place for, such as a rate's scope).
func withHubOnly[B any](plain B, stored *B, hubOnly func(plain, stored *B)) B {
	hubOnly(&plain, stored)
	return plain
}

// policyHubOnly copies what only a v1beta1 policy says: a rate's scope,
// when it is one the schema allows, and its requestOverride, when its
// maximum is within the schema's bounds (the limiter checks the rest of
// the CRD's rule on it, limiter/config validate_features.go).
func policyHubOnly(plain, stored *v1beta1.RateLimitPolicySpec) {
	if plain.Limit.Rate == nil || stored.Limit.Rate == nil {
		return
	}
	r := *plain.Limit.Rate
	if s := stored.Limit.Rate.Scope; s != nil && (*s == v1beta1.ScopeRegion || *s == v1beta1.ScopeGlobal) {
		r.Scope = ptrCopy(s)
	}
	if o := stored.Limit.Rate.RequestOverride; o != nil && o.Maximum >= 1 && o.Maximum <= 1_000_000_000 {
		r.RequestOverride = &v1beta1.RequestOverride{Maximum: o.Maximum}
	}
	plain.Limit.Rate = &r
}

// specFromHub is specToHub's reverse: a v1alpha1 spec kept in meta's
// annotation is taken only when, with what v1beta1 leaves out reset by
// leftOut, it equals the plain conversion and converts back to exactly b.
// A v1beta1-spec annotation on the hub object is never passed on: the
// spoke gets one only when b needs it, holding b itself, so a hand-written
// one can't give the spoke's readers (the operator, and through api/convert
// the limiter) a scope or requestOverride the spec does not have.
func specFromHub[A, B any](meta *metav1.ObjectMeta, b *B, from func(*B) (A, error), to func(*A) (B, error), leftOut func(*A) A) (A, error) {
	stored, hasStored := takeAnnotation(meta, V1alpha1SpecAnnotation)
	takeAnnotation(meta, V1beta1SpecAnnotation) // hand-written on the hub: the spoke's is written below, or none
	spec, err := from(b)
	if err != nil {
		return spec, err
	}
	var a A
	if hasStored && decodeStored(stored, &a) && subMillisecond.DeepEqual(leftOut(&a), leftOut(&spec)) {
		if back, err := to(&a); err == nil && equality.Semantic.DeepEqual(back, *b) {
			spec = a
		}
	}
	if back, err := to(&spec); err != nil || !equality.Semantic.DeepEqual(back, *b) {
		if err := putAnnotation(meta, V1beta1SpecAnnotation, b); err != nil {
			return spec, err
		}
	}
	return spec, nil
}

// takeAnnotation removes the annotation key from meta and returns its value.
func takeAnnotation(meta *metav1.ObjectMeta, key string) (string, bool) {
	v, ok := meta.Annotations[key]
	if !ok {
		return "", false
	}
	delete(meta.Annotations, key)
	if len(meta.Annotations) == 0 {
		meta.Annotations = nil
	}
	return v, true
}

// putAnnotation sets the annotation key of meta to spec as JSON.
func putAnnotation(meta *metav1.ObjectMeta, key string, spec any) error {
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	meta.Annotations[key] = string(data)
	return nil
}

// convertStatus copies a status between the versions, whose status types
// have the same fields.
func convertStatus(src, dst any) error {
	data, err := json.Marshal(src)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, dst)
}

// SpecToV1beta1 maps a v1alpha1 spec to v1beta1 field for field. It drops
// what v1beta1 does not say (the lease entries and priority key, which
// v1beta1 leaves to the fleet); ConvertTo keeps it in an annotation.
func SpecToV1beta1(a *RateLimitPolicySpec) (v1beta1.RateLimitPolicySpec, error) {
	b := v1beta1.RateLimitPolicySpec{
		Domain:      a.Domain,
		FailureMode: (*v1beta1.FailureMode)(ptrCopy(a.FailureMode)),
	}
	for _, d := range a.Descriptors {
		b.Descriptors = append(b.Descriptors, v1beta1.Descriptor{Key: d.Key, Value: ptrCopy(d.Value)})
	}
	switch {
	case a.IsShadow():
		b.Mode = ptr.To(v1beta1.Shadow)
	case a.IsSoft():
		b.Mode = ptr.To(v1beta1.Soft)
	case a.Shadow != nil:
		b.Mode = ptr.To(v1beta1.Enforce)
	}
	if a.Visibility != nil || a.Problem != nil {
		b.Response = &v1beta1.Response{Visibility: (*v1beta1.Visibility)(ptrCopy(a.Visibility))}
		if a.Problem != nil {
			b.Response.Problem = &v1beta1.Problem{Type: (*v1beta1.ProblemType)(ptrCopy(a.Problem.Type)), Detail: ptrCopy(a.Problem.Detail)}
		}
	}
	if a.Algorithm != nil && *a.Algorithm == Concurrency {
		c := &v1beta1.ConcurrencyLimit{Priority: priorityToV1beta1(a.Priority)}
		if a.Concurrency != nil {
			c.MaxInFlight = a.Concurrency.MaxInFlight
			c.LeaseDuration = durationPtrToV1beta1(a.Concurrency.LeaseDuration)
		}
		b.Limit = v1beta1.Limit{Type: v1beta1.LimitConcurrency, Concurrency: c}
		return b, nil
	}
	r := &v1beta1.RateLimit{
		Algorithm: (*v1beta1.Algorithm)(ptrCopy(a.Algorithm)),
		Limit:     a.Rate.Limit,
		Burst:     ptrCopy(a.Burst),
		Priority:  priorityToV1beta1(a.Priority),
	}
	if a.Rate.Period.Duration != 0 {
		r.Period = ptr.To(durationToV1beta1(a.Rate.Period.Duration))
	}
	if a.Rate.Calendar != nil {
		r.Calendar = &v1beta1.Calendar{Period: v1beta1.CalendarPeriod(*a.Rate.Calendar), TimeZone: ptrCopy(a.Rate.TimeZone)}
	}
	if a.MaxCost != nil || a.Reserve != nil {
		r.Cost = &v1beta1.Cost{Max: ptrCopy(a.MaxCost)}
		if a.Reserve != nil {
			r.Cost.Reserve = &v1beta1.Reserve{ExpireAfter: durationPtrToV1beta1(a.Reserve.ExpireAfter)}
		}
	}
	if a.LocalTierEnabled() {
		r.LocalTier = &v1beta1.LocalTier{TTL: durationPtrToV1beta1(a.LocalTier.TTL)}
		if a.LocalTier.MaxOvershoot != nil {
			r.LocalTier.MaxOvershoot = ptr.To(*a.LocalTier.MaxOvershoot)
		}
	}
	if p := a.Penalty; p != nil {
		r.Penalty = &v1beta1.Penalty{
			Duration: durationToV1beta1(p.Duration.Duration),
			After:    ptrCopy(p.After),
			Within:   durationPtrToV1beta1(p.Within),
			Status:   ptrCopy(p.Status),
			Reason:   ptrCopy(p.Reason),
		}
	}
	b.Limit = v1beta1.Limit{Type: v1beta1.LimitRate, Rate: r}
	return b, nil
}

// SpecFromV1beta1 maps a v1beta1 spec to v1alpha1 field for field. The
// lease entries and the priority key, which v1beta1 leaves to the fleet,
// take their v1alpha1 defaults (sluice_lease, priority). It fails only on
// a duration that does not parse, which the v1beta1 schema refuses.
func SpecFromV1beta1(b *v1beta1.RateLimitPolicySpec) (RateLimitPolicySpec, error) {
	a := RateLimitPolicySpec{
		Domain:      b.Domain,
		FailureMode: (*FailureMode)(ptrCopy(b.FailureMode)),
	}
	for _, d := range b.Descriptors {
		a.Descriptors = append(a.Descriptors, Descriptor{Key: d.Key, Value: ptrCopy(d.Value)})
	}
	if b.Mode != nil {
		switch *b.Mode {
		case v1beta1.Shadow:
			a.Shadow = ptr.To(true)
		case v1beta1.Soft:
			a.Shadow, a.Soft = ptr.To(false), ptr.To(true)
		default:
			a.Shadow = ptr.To(false)
		}
	}
	if r := b.Response; r != nil {
		a.Visibility = (*Visibility)(ptrCopy(r.Visibility))
		if r.Problem != nil {
			a.Problem = &Problem{Type: (*ProblemType)(ptrCopy(r.Problem.Type)), Detail: ptrCopy(r.Problem.Detail)}
		}
	}
	var errs []error
	dur := func(field string, d *v1beta1.Duration) *metav1.Duration {
		if d == nil {
			return nil
		}
		v, err := time.ParseDuration(string(*d))
		if err != nil {
			errs = append(errs, fmt.Errorf("spec.%s: %w", field, err))
		}
		return &metav1.Duration{Duration: v}
	}
	if c := b.Limit.Concurrency; b.Limit.Type == v1beta1.LimitConcurrency && c != nil {
		a.Algorithm = ptr.To(Concurrency)
		a.Concurrency = &ConcurrencyLimit{
			MaxInFlight:   c.MaxInFlight,
			LeaseDuration: dur("limit.concurrency.leaseDuration", c.LeaseDuration),
			LeaseEntry:    ptr.To(DefaultLeaseEntry),
		}
		a.Priority = priorityFromV1beta1(c.Priority)
	} else if r := b.Limit.Rate; r != nil {
		a.Algorithm = (*Algorithm)(ptrCopy(r.Algorithm))
		a.Rate.Limit = r.Limit
		if r.Period != nil {
			a.Rate.Period = *dur("limit.rate.period", r.Period)
		}
		if r.Calendar != nil {
			a.Rate.Calendar = ptr.To(CalendarPeriod(r.Calendar.Period))
			a.Rate.TimeZone = ptrCopy(r.Calendar.TimeZone)
		}
		a.Burst = ptrCopy(r.Burst)
		if r.Cost != nil {
			a.MaxCost = ptrCopy(r.Cost.Max)
			if r.Cost.Reserve != nil {
				a.Reserve = &Reserve{
					ExpireAfter: dur("limit.rate.cost.reserve.expireAfter", r.Cost.Reserve.ExpireAfter),
					LeaseEntry:  ptr.To(DefaultLeaseEntry),
				}
			}
		}
		if r.LocalTier != nil {
			a.LocalTier = &LocalTier{Enabled: ptr.To(true), TTL: dur("limit.rate.localTier.ttl", r.LocalTier.TTL)}
			if r.LocalTier.MaxOvershoot != nil {
				a.LocalTier.MaxOvershoot = ptr.To(*r.LocalTier.MaxOvershoot)
			}
		}
		a.Priority = priorityFromV1beta1(r.Priority)
		if p := r.Penalty; p != nil {
			a.Penalty = &Penalty{
				Duration: *dur("limit.rate.penalty.duration", &p.Duration),
				After:    ptrCopy(p.After),
				Within:   dur("limit.rate.penalty.within", p.Within),
				Status:   ptrCopy(p.Status),
				Reason:   ptrCopy(p.Reason),
			}
		}
	}
	if len(errs) > 0 {
		return a, fmt.Errorf("converting a v1beta1 RateLimitPolicy spec: %v", errs)
	}
	return a, nil
}

func priorityToV1beta1(p *PriorityShedding) *v1beta1.PriorityShedding {
	if p == nil {
		return nil
	}
	out := &v1beta1.PriorityShedding{Default: p.Default}
	for _, l := range p.Levels {
		out.Levels = append(out.Levels, v1beta1.PriorityLevel{Value: l.Value, Share: l.Share})
	}
	return out
}

func priorityFromV1beta1(p *v1beta1.PriorityShedding) *PriorityShedding {
	if p == nil {
		return nil
	}
	out := &PriorityShedding{Key: DefaultPriorityEntry, Default: p.Default}
	for _, l := range p.Levels {
		out.Levels = append(out.Levels, PriorityLevel{Value: l.Value, Share: l.Share})
	}
	return out
}

func durationPtrToV1beta1(d *metav1.Duration) *v1beta1.Duration {
	if d == nil {
		return nil
	}
	return ptr.To(durationToV1beta1(d.Duration))
}

// durationToV1beta1 spells d in the Gateway API's duration format (hours,
// minutes, seconds and milliseconds, each left out when 0). A part of a
// millisecond, which that format can't hold, is dropped: the conversion
// then keeps the exact v1alpha1 spec in its annotation.
func durationToV1beta1(d time.Duration) v1beta1.Duration {
	d = d.Truncate(time.Millisecond)
	if d <= 0 {
		return "0s"
	}
	var s string
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if n := d / u.unit; n > 0 {
			s += fmt.Sprintf("%d%s", n, u.name)
			d -= n * u.unit
		}
	}
	return v1beta1.Duration(s)
}

func ptrCopy[T any](p *T) *T {
	if p == nil {
		return nil
	}
	return ptr.To(*p)
}
