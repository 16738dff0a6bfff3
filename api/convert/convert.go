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

// Package convert reads v1alpha1 manifests for the limiter, which works
// on v1beta1 only: a v1alpha1 RateLimitPolicy or LimiterFleet in a policy
// file and a v1alpha1 spec in a snapshot document of format 1. Each is
// converted with the conversion the operator's webhook serves; what
// v1beta1 leaves to the fleet (a policy's lease entry and priority key) is
// returned beside it as entries, never in a conversion annotation, which
// nothing outside api/ reads. For the operator, which reads v1beta1 only,
// StoredPolicy returns those entries of a stored policy a v1alpha1 client
// wrote.
package convert

import (
	"errors"
	"fmt"

	kjson "sigs.k8s.io/json"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// V1alpha1 is the apiVersion of v1alpha1 manifests.
var V1alpha1 = v1alpha1.GroupVersion.String()

// StrictError lists the unknown or duplicate fields of a manifest that
// otherwise decoded, as the API server would refuse them.
type StrictError struct{ Errs []error }

func (e *StrictError) Error() string   { return errors.Join(e.Errs...).Error() }
func (e *StrictError) Unwrap() []error { return e.Errs }

// decodeStrict decodes js into obj, as the API server does: unknown and
// duplicate fields are a *StrictError, after obj is filled.
func decodeStrict(js []byte, obj any) error {
	strict, err := kjson.UnmarshalStrict(js, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		return &StrictError{Errs: strict}
	}
	return nil
}

// Policy converts a v1alpha1 RateLimitPolicy to v1beta1, and returns the
// lease entry and priority key it names where they are not the defaults.
// A spec whose fields the conversion would drop (spec.rate with algorithm
// Concurrency, say) is refused, as the v1alpha1 CRD refuses it.
func Policy(p *v1alpha1.RateLimitPolicy) (v1beta1.RateLimitPolicy, *v1beta1.FleetEntries, error) {
	var b v1beta1.RateLimitPolicy
	if err := dropped(&p.Spec); err != nil {
		return b, nil, err
	}
	if err := p.DeepCopy().ConvertTo(&b); err != nil {
		return b, nil, err
	}
	delete(b.Annotations, v1alpha1.V1alpha1SpecAnnotation)
	if len(b.Annotations) == 0 {
		b.Annotations = nil
	}
	b.APIVersion, b.Kind = v1beta1.GroupVersion.String(), "RateLimitPolicy"
	return b, v1alpha1.SpecEntries(&p.Spec), nil
}

// DecodePolicy decodes a v1alpha1 RateLimitPolicy manifest (JSON) strictly
// and converts it (Policy). On a *StrictError the returned policy's
// metadata is filled, to name it.
func DecodePolicy(js []byte) (v1beta1.RateLimitPolicy, *v1beta1.FleetEntries, error) {
	var p v1alpha1.RateLimitPolicy
	if err := decodeStrict(js, &p); err != nil {
		return v1beta1.RateLimitPolicy{ObjectMeta: p.ObjectMeta}, nil, err
	}
	b, e, err := Policy(&p)
	if err != nil {
		b.ObjectMeta = p.ObjectMeta
	}
	return b, e, err
}

// DecodeSpec decodes a v1alpha1 RateLimitPolicySpec (JSON) strictly and
// converts it, as Policy does.
func DecodeSpec(js []byte) (v1beta1.RateLimitPolicySpec, *v1beta1.FleetEntries, error) {
	var p v1alpha1.RateLimitPolicy
	if err := decodeStrict(js, &p.Spec); err != nil {
		return v1beta1.RateLimitPolicySpec{}, nil, err
	}
	b, e, err := Policy(&p)
	return b.Spec, e, err
}

// DecodeFleet decodes a v1alpha1 LimiterFleet manifest (JSON) strictly and
// converts it to v1beta1. On a *StrictError the returned fleet's metadata
// is filled, to name it.
func DecodeFleet(js []byte) (v1beta1.LimiterFleet, error) {
	var f v1alpha1.LimiterFleet
	var b v1beta1.LimiterFleet
	if err := decodeStrict(js, &f); err != nil {
		b.ObjectMeta = f.ObjectMeta
		return b, err
	}
	if err := f.ConvertTo(&b); err != nil {
		b.ObjectMeta = f.ObjectMeta
		return b, err
	}
	delete(b.Annotations, v1alpha1.V1alpha1SpecAnnotation)
	if len(b.Annotations) == 0 {
		b.Annotations = nil
	}
	b.APIVersion, b.Kind = v1beta1.GroupVersion.String(), "LimiterFleet"
	return b, nil
}

// Entries converts a v1alpha1 fleet's spec.entries to v1beta1's.
func Entries(e *v1alpha1.FleetEntries) *v1beta1.FleetEntries {
	if e == nil {
		return nil
	}
	return &v1beta1.FleetEntries{Lease: e.Lease, Idempotency: e.Idempotency, Priority: e.Priority, Accept: e.Accept}
}

// ForwardAuth converts v1alpha1 forward-auth mappings to v1beta1's, which
// say the same.
func ForwardAuth(in []v1alpha1.ForwardAuth) []v1beta1.ForwardAuth {
	if in == nil {
		return nil
	}
	out := make([]v1beta1.ForwardAuth, len(in))
	for i, m := range in {
		out[i] = v1beta1.ForwardAuth{Domain: m.Domain, OnMissing: (*v1beta1.ForwardAuthOnMissing)(m.OnMissing),
			DenyStatus: m.DenyStatus, PathCase: (*v1beta1.ForwardAuthPathCase)(m.PathCase)}
		for _, d := range m.Descriptors {
			out[i].Descriptors = append(out[i].Descriptors, v1beta1.ForwardAuthDescriptor{Key: d.Key, From: v1beta1.ForwardAuthSource(d.From), Header: d.Header})
		}
	}
	return out
}

// dropped refuses what the v1alpha1 CRD refuses and the conversion to
// v1beta1 would drop without a word: the members of another algorithm
// than the spec's.
func dropped(a *v1alpha1.RateLimitPolicySpec) error {
	conc := a.EffectiveAlgorithm() == v1alpha1.Concurrency
	switch {
	case conc && (a.Rate != v1alpha1.Rate{} || a.Burst != nil || a.MaxCost != nil || a.Reserve != nil || a.LocalTierEnabled() || a.Penalty != nil):
		return fmt.Errorf("spec.rate, spec.burst, spec.maxCost, spec.reserve, spec.localTier and spec.penalty do not apply to algorithm Concurrency, " +
			"which limits requests in flight (v1beta1: spec.limit.type Concurrency takes spec.limit.concurrency only)")
	case a.IsSoft() && a.IsShadow():
		return fmt.Errorf("spec.soft and spec.shadow are exclusive: a soft policy marks the requests over it, a shadow one tells no client anything (v1beta1: spec.mode is one of Enforce, Soft and Shadow)")
	case a.Rate.TimeZone != nil && a.Rate.Calendar == nil:
		return fmt.Errorf("spec.rate.timeZone applies only with spec.rate.calendar (v1beta1: spec.limit.rate.calendar.timeZone)")
	case !conc && a.Concurrency != nil:
		return fmt.Errorf("spec.concurrency is required with algorithm Concurrency, and only with it (v1beta1: spec.limit.concurrency, with spec.limit.type Concurrency)")
	}
	return nil
}

// Fleet converts a v1alpha1 LimiterFleet to v1beta1, as DecodeFleet does
// for a manifest: with its spec.regions, which the v1alpha1 object carries
// in its conversion annotation, and without the annotations the conversion
// writes.
func Fleet(f *v1alpha1.LimiterFleet) (*v1beta1.LimiterFleet, error) {
	var b v1beta1.LimiterFleet
	if err := f.DeepCopy().ConvertTo(&b); err != nil {
		return nil, err
	}
	delete(b.Annotations, v1alpha1.V1alpha1SpecAnnotation)
	if len(b.Annotations) == 0 {
		b.Annotations = nil
	}
	b.APIVersion, b.Kind = v1beta1.GroupVersion.String(), "LimiterFleet"
	return &b, nil
}

// StoredPolicy is a policy as the operator reads it, in v1beta1, the
// storage version: its spec as stored, and the lease entry and priority
// key it names where they are not the defaults, which a v1alpha1 client
// may have written and the v1beta1 object keeps in its conversion
// annotation (believed only as the webhook believes it). The conversion
// annotations are left out of the returned policy. No webhook is called.
func StoredPolicy(p *v1beta1.RateLimitPolicy) (v1beta1.RateLimitPolicy, *v1beta1.FleetEntries, error) {
	out := *p.DeepCopy()
	var entries *v1beta1.FleetEntries
	if _, ok := p.Annotations[v1alpha1.V1alpha1SpecAnnotation]; ok {
		var a v1alpha1.RateLimitPolicy
		if err := a.ConvertFrom(p.DeepCopy()); err != nil {
			return out, nil, err
		}
		entries = v1alpha1.SpecEntries(&a.Spec)
	}
	delete(out.Annotations, v1alpha1.V1alpha1SpecAnnotation)
	delete(out.Annotations, v1alpha1.V1beta1SpecAnnotation)
	if len(out.Annotations) == 0 {
		out.Annotations = nil
	}
	return out, entries, nil
}
