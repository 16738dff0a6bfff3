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
	"fmt"
	"regexp"
	"slices"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// Messages of the CEL rules in the RateLimitPolicy CRD, repeated word for word.
const (
	policyDuplicateKeyMsg = "descriptor keys must be unique"
	policyBurstMsg        = "spec.burst applies only to TokenBucket and GCRA"
	policyLocalTierMsg    = "spec.localTier is not supported with SlidingLog, which stays exact"
	policyPeriodRangeMsg  = "period must be between 1s and 720h"
	policyTTLRangeMsg     = "ttl must be between 100ms and 1m"
	policyMaxOvershootMsg = "maxOvershoot must be a count from 0 to 1000000000 or a percentage from 0% to 100%"
	policyMaxCostMsg      = "spec.maxCost must not exceed the policy's capacity: spec.burst, or spec.rate.limit without it"
	policySlidingLogMsg   = "spec.rate.limit may be at most 10000 for SlidingLog, which keeps one entry per admitted request, so a counter's memory grows with the limit: use SlidingWindow (constant memory, close to exact) or TokenBucket/GCRA for larger limits"

	policyRateRequiredMsg      = "spec.rate is required, except with algorithm Concurrency"
	policyRateConcurrencyMsg   = "spec.rate does not apply to Concurrency, which limits requests in flight: set spec.concurrency.maxInFlight"
	policyConcurrencyMsg       = "spec.concurrency is required with algorithm Concurrency, and only with it"
	policyMaxCostConcMsg       = "spec.maxCost does not apply to Concurrency, which counts requests, not units"
	policyReserveMsg           = "spec.reserve is not supported with Concurrency, which holds its slots already, or SlidingLog, whose log can't be charged after the fact"
	policyLocalTierHoldMsg     = "spec.localTier is not supported with Concurrency or spec.reserve, which hold what they take in the store"
	policyConcLeaseEntryMsg    = "spec.concurrency.leaseEntry must not be one of the policy's descriptor keys"
	policyReserveLeaseEntryMsg = "spec.reserve.leaseEntry must not be one of the policy's descriptor keys"
	policyLeaseDurationMsg     = "leaseDuration must be above 0s and at most 24h"
	policyExpireAfterMsg       = "expireAfter must be between 1s and 24h"
)

var policyPercentRE = regexp.MustCompile(`^(100|[1-9]?[0-9])%$`)

// DefaultPolicy sets the fields the API server would default on admission:
// algorithm, failureMode, shadow, localTier's enabled and ttl, and
// penalty's after (3), among others. It also sets
// an empty namespace to "default", as kubectl does. burst stays nil; use
// Spec.EffectiveBurst.
func DefaultPolicy(p *v1alpha1.RateLimitPolicy) {
	if p.Namespace == "" {
		p.Namespace = metav1.NamespaceDefault
	}
	s := &p.Spec
	if s.Algorithm == nil {
		s.Algorithm = ptr.To(v1alpha1.DefaultAlgorithm)
	}
	if s.FailureMode == nil {
		s.FailureMode = ptr.To(v1alpha1.DefaultFailureMode)
	}
	if s.Shadow == nil {
		s.Shadow = ptr.To(false)
	}
	if t := s.LocalTier; t != nil {
		if t.Enabled == nil {
			t.Enabled = ptr.To(false)
		}
		if t.TTL == nil {
			t.TTL = &metav1.Duration{Duration: v1alpha1.DefaultLocalTierTTL}
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
}

// ValidatePolicy checks p against the rules the CRD enforces through its
// OpenAPI schema and CEL rules, so that a policy loaded from a file meets the
// same bar as one the API server admitted. Unset optional fields are read as
// their defaults; ValidatePolicy does not change p.
func ValidatePolicy(p *v1alpha1.RateLimitPolicy) field.ErrorList {
	errs := validatePolicyMeta(&p.ObjectMeta, field.NewPath("metadata"))
	errs = append(errs, validatePolicySpec(&p.Spec, field.NewPath("spec"))...)
	if scope := scopeOf(p); scope != nil && len(errs) == 0 {
		if err := validateScope(p, scope); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("spec", "limit", "rate", "scope"), *scope, err.Error()))
		}
	}
	if o := requestOverrideOf(p); o != nil && len(errs) == 0 {
		if err := validateRequestOverride(p, o, scopeOf(p)); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("spec", "limit", "rate", "requestOverride"), o.Maximum, err.Error()))
		}
	}
	return errs
}

func validatePolicyMeta(m *metav1.ObjectMeta, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m.Name == "" {
		errs = append(errs, field.Required(fld.Child("name"), ""))
	} else {
		for _, msg := range validation.IsDNS1123Subdomain(m.Name) {
			errs = append(errs, field.Invalid(fld.Child("name"), m.Name, msg))
		}
	}
	if m.Namespace != "" {
		for _, msg := range validation.IsDNS1123Label(m.Namespace) {
			errs = append(errs, field.Invalid(fld.Child("namespace"), m.Namespace, msg))
		}
	}
	return errs
}

func validatePolicySpec(s *v1alpha1.RateLimitPolicySpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validatePolicyString(s.Domain, true, v1alpha1.MaxDomainLength, fld.Child("domain"))...)
	errs = append(errs, validatePolicyDescriptors(s.Descriptors, fld.Child("descriptors"))...)

	algo := s.EffectiveAlgorithm()
	if s.Algorithm != nil && !slices.Contains(v1alpha1.Algorithms, *s.Algorithm) {
		errs = append(errs, field.NotSupported(fld.Child("algorithm"), *s.Algorithm, v1alpha1.Algorithms))
	}
	if s.FailureMode != nil && !slices.Contains(v1alpha1.FailureModes, *s.FailureMode) {
		errs = append(errs, field.NotSupported(fld.Child("failureMode"), *s.FailureMode, v1alpha1.FailureModes))
	}

	concurrency := algo == v1alpha1.Concurrency
	switch {
	case concurrency && s.Rate != v1alpha1.Rate{}:
		errs = append(errs, field.Forbidden(fld.Child("rate"), policyRateConcurrencyMsg))
	case !concurrency:
		errs = append(errs, validatePolicyRate(s.Rate, fld.Child("rate"))...)
	}
	errs = append(errs, validatePolicyCalendar(s, fld)...)
	if (s.Concurrency != nil) != concurrency {
		if concurrency {
			errs = append(errs, field.Required(fld.Child("concurrency"), policyConcurrencyMsg))
		} else {
			errs = append(errs, field.Forbidden(fld.Child("concurrency"), policyConcurrencyMsg))
		}
	}
	if c := s.Concurrency; c != nil {
		errs = append(errs, validateConcurrency(c, s.Descriptors, fld.Child("concurrency"))...)
	}
	if r := s.Reserve; r != nil {
		errs = append(errs, validateReserve(r, s.Descriptors, fld.Child("reserve"))...)
		if concurrency || algo == v1alpha1.SlidingLog {
			errs = append(errs, field.Forbidden(fld.Child("reserve"), policyReserveMsg))
		}
	}
	errs = append(errs, validatePolicyPriority(s, fld)...)
	errs = append(errs, validatePolicyPenalty(s, fld)...)
	if algo == v1alpha1.SlidingLog && s.Rate.Limit > v1alpha1.MaxSlidingLogLimit {
		errs = append(errs, field.Invalid(fld.Child("rate", "limit"), s.Rate.Limit, policySlidingLogMsg))
	}

	if s.Burst != nil {
		errs = append(errs, validatePolicyRange(*s.Burst, 1, v1alpha1.MaxBurst, fld.Child("burst"))...)
		if algo != v1alpha1.TokenBucket && algo != v1alpha1.GCRA {
			errs = append(errs, field.Forbidden(fld.Child("burst"), policyBurstMsg))
		}
	}

	if s.MaxCost != nil {
		errs = append(errs, validatePolicyRange(*s.MaxCost, 1, v1alpha1.MaxMaxCost, fld.Child("maxCost"))...)
		// As the CEL rule reads it: burst when set, whatever the algorithm.
		if capacity := s.EffectiveBurst(); s.Rate != (v1alpha1.Rate{}) && *s.MaxCost > capacity {
			errs = append(errs, field.Invalid(fld.Child("maxCost"), *s.MaxCost, policyMaxCostMsg))
		}
		if concurrency {
			errs = append(errs, field.Forbidden(fld.Child("maxCost"), policyMaxCostConcMsg))
		}
	}

	if t := s.LocalTier; t != nil {
		errs = append(errs, validatePolicyLocalTier(t, fld.Child("localTier"))...)
		if s.LocalTierEnabled() && algo == v1alpha1.SlidingLog {
			errs = append(errs, field.Forbidden(fld.Child("localTier"), policyLocalTierMsg))
		}
		if s.LocalTierEnabled() && (concurrency || s.Reserve != nil) {
			errs = append(errs, field.Forbidden(fld.Child("localTier"), policyLocalTierHoldMsg))
		}
	}
	return append(errs, validatePolicyResponse(s, fld)...)
}

func validateConcurrency(c *v1alpha1.ConcurrencyLimit, ds []v1alpha1.Descriptor, fld *field.Path) field.ErrorList {
	errs := validatePolicyRange(c.MaxInFlight, 1, v1alpha1.MaxInFlight, fld.Child("maxInFlight"))
	if d := c.LeaseDuration; d != nil && (d.Duration <= 0 || d.Duration > v1alpha1.MaxLeaseDuration) {
		errs = append(errs, field.Invalid(fld.Child("leaseDuration"), d.Duration.String(), policyLeaseDurationMsg))
	}
	return append(errs, validateLeaseEntry(c.LeaseEntry, ds, policyConcLeaseEntryMsg, fld.Child("leaseEntry"))...)
}

func validateReserve(r *v1alpha1.Reserve, ds []v1alpha1.Descriptor, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if d := r.ExpireAfter; d != nil {
		errs = append(errs, validatePolicyDuration(d.Duration, v1alpha1.MinExpireAfter, v1alpha1.MaxExpireAfter,
			policyExpireAfterMsg, fld.Child("expireAfter"))...)
	}
	return append(errs, validateLeaseEntry(r.LeaseEntry, ds, policyReserveLeaseEntryMsg, fld.Child("leaseEntry"))...)
}

// validateLeaseEntry checks a lease entry key: a descriptor key that is
// none of the policy's own.
func validateLeaseEntry(e *string, ds []v1alpha1.Descriptor, msg string, fld *field.Path) field.ErrorList {
	if e == nil {
		return nil
	}
	if errs := validatePolicyString(*e, false, v1alpha1.MaxDescriptorKeyLength, fld); errs != nil {
		return errs
	}
	for _, d := range ds {
		if d.Key == *e {
			return field.ErrorList{field.Invalid(fld, *e, msg)}
		}
	}
	return nil
}

func validatePolicyDescriptors(ds []v1alpha1.Descriptor, fld *field.Path) field.ErrorList {
	if errs := validateDescriptorCount(len(ds), fld); errs != nil {
		return errs
	}
	var errs field.ErrorList
	seen := make(map[string]bool, len(ds))
	for i, d := range ds {
		idx := fld.Index(i)
		errs = append(errs, validatePolicyString(d.Key, true, v1alpha1.MaxDescriptorKeyLength, idx.Child("key"))...)
		if d.Value != nil {
			errs = append(errs, validatePolicyString(*d.Value, false, v1alpha1.MaxDescriptorValueLength, idx.Child("value"))...)
		}
		if seen[d.Key] {
			errs = append(errs, field.Invalid(idx.Child("key"), d.Key, policyDuplicateKeyMsg))
		}
		seen[d.Key] = true
	}
	return errs
}

func validatePolicyRate(r v1alpha1.Rate, fld *field.Path) field.ErrorList {
	switch {
	case r == v1alpha1.Rate{}:
		return field.ErrorList{field.Required(fld, policyRateRequiredMsg)}
	case r.Calendar != nil:
		// validatePolicyCalendar checks the rest.
		return validatePolicyRange(r.Limit, 1, v1alpha1.MaxLimit, fld.Child("limit"))
	case r.Period.Duration == 0:
		// Missing, as far as a decoded manifest can tell.
		errs := validatePolicyRange(r.Limit, 1, v1alpha1.MaxLimit, fld.Child("limit"))
		return append(errs, field.Required(fld.Child("period"), policyPeriodMissingMsg))
	}
	errs := validatePolicyRange(r.Limit, 1, v1alpha1.MaxLimit, fld.Child("limit"))
	return append(errs, validatePolicyDuration(r.Period.Duration, v1alpha1.MinPeriod, v1alpha1.MaxPeriod,
		policyPeriodRangeMsg, fld.Child("period"))...)
}

func validatePolicyLocalTier(t *v1alpha1.LocalTier, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if t.TTL != nil {
		errs = append(errs, validatePolicyDuration(t.TTL.Duration, v1alpha1.MinLocalTierTTL, v1alpha1.MaxLocalTierTTL,
			policyTTLRangeMsg, fld.Child("ttl"))...)
	}
	if o := t.MaxOvershoot; o != nil {
		ok := false
		if o.Type == intstr.Int {
			ok = o.IntVal >= 0 && o.IntVal <= v1alpha1.MaxOvershootCount
		} else {
			ok = policyPercentRE.MatchString(o.StrVal)
		}
		if !ok {
			errs = append(errs, field.Invalid(fld.Child("maxOvershoot"), o.String(), policyMaxOvershootMsg))
		}
	}
	return errs
}

// validatePolicyString checks a string's length in characters, as OpenAPI's
// minLength and maxLength do.
func validatePolicyString(v string, required bool, maxLen int, fld *field.Path) field.ErrorList {
	switch n := utf8.RuneCountInString(v); {
	case n == 0 && required:
		return field.ErrorList{field.Required(fld, "")}
	case n == 0:
		return field.ErrorList{field.Invalid(fld, v, "should be at least 1 chars long")}
	case n > maxLen:
		return field.ErrorList{field.TooLong(fld, v, maxLen)}
	}
	return nil
}

func validatePolicyRange(v, minV, maxV int64, fld *field.Path) field.ErrorList {
	switch {
	case v < minV:
		return field.ErrorList{field.Invalid(fld, v, fmt.Sprintf("should be greater than or equal to %d", minV))}
	case v > maxV:
		return field.ErrorList{field.Invalid(fld, v, fmt.Sprintf("should be less than or equal to %d", maxV))}
	}
	return nil
}

func validatePolicyDuration(d, minD, maxD time.Duration, msg string, fld *field.Path) field.ErrorList {
	if d < minD || d > maxD {
		return field.ErrorList{field.Invalid(fld, d.String(), msg)}
	}
	return nil
}

// validateDescriptorCount checks that a list of descriptors holds 1 to
// MaxDescriptors entries.
func validateDescriptorCount(n int, fld *field.Path) field.ErrorList {
	switch {
	case n == 0:
		return field.ErrorList{field.Required(fld, fmt.Sprintf("must have 1 to %d entries", v1alpha1.MaxDescriptors))}
	case n > v1alpha1.MaxDescriptors:
		return field.ErrorList{field.TooMany(fld, n, v1alpha1.MaxDescriptors)}
	}
	return nil
}
