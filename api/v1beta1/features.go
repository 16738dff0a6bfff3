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

package v1beta1

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// This file is the one table of what each limit type and rate algorithm
// takes (Features), and ValidateFeatures, which applies it with v1beta1
// field paths. The CRD's rules on RateLimitPolicySpec, Limit and RateLimit
// are written from it (CELRules in features_cel.go; hack/featurecel, run
// by make manifests), rule for rule and message for message; the parity
// test (features_envtest_test.go) creates every taker x feature and
// feature x feature policy on a real API server and requires the same
// verdict on the same field paths from both.

// Taker is what takes, or refuses, a feature: a rate algorithm (a limit of
// type Rate), or the limit type Concurrency.
type Taker string

// TakerConcurrency is the limit type Concurrency as a taker.
const TakerConcurrency = Taker(LimitConcurrency)

// RateTakers are the rate algorithms, in declaration order.
var RateTakers = []Taker{Taker(TokenBucket), Taker(GCRA), Taker(SlidingWindow), Taker(FixedWindow), Taker(SlidingLog)}

// Takers are the rate algorithms and Concurrency: every column of the table.
var Takers = append(slices.Clone(RateTakers), TakerConcurrency)

// FeatureName names a row of the table.
type FeatureName string

// The features: every optional member of a RateLimitPolicy's spec (or value
// of one) whose taking depends on the limit's type, its algorithm or
// another feature.
const (
	FeatureRate                FeatureName = "rate"
	FeatureConcurrency         FeatureName = "concurrency"
	FeaturePeriod              FeatureName = "period"
	FeatureCalendar            FeatureName = "calendar"
	FeatureBurst               FeatureName = "burst"
	FeatureLimitAbove10000     FeatureName = "limit above 10000"
	FeatureCostMax             FeatureName = "cost.max"
	FeatureReserve             FeatureName = "cost.reserve"
	FeatureLocalTier           FeatureName = "localTier"
	FeaturePriority            FeatureName = "priority"
	FeaturePenalty             FeatureName = "penalty"
	FeatureGlobal              FeatureName = "scope Global"
	FeatureRequestOverride     FeatureName = "requestOverride"
	FeatureLeaseDuration       FeatureName = "concurrency.leaseDuration"
	FeatureConcurrencyPriority FeatureName = "concurrency.priority"
	FeatureSoft                FeatureName = "mode Soft"
	FeatureHidden              FeatureName = "visibility Hidden"
)

// Feature is one row of the table: a member of the spec, which takers take
// it, and which other features it can't be set with.
// +kubebuilder:object:generate=false
type Feature struct {
	// Name names the feature.
	Name FeatureName
	// Path is the member's path below spec, such as "limit.rate.burst":
	// where a refusal of the feature is reported.
	Path string
	// TakenBy are the takers that take the feature; nil is every taker. A
	// member of spec.limit.rate is judged by spec.limit.rate.algorithm, a
	// member of spec.limit.concurrency is Concurrency's, and any other by
	// the spec's own taker (its type, or its rate's algorithm).
	TakenBy []Taker
	// Refused is the reason a taker outside TakenBy refuses the feature.
	Refused string
	// Exclusions are the features it can't be set with, each with its
	// reason.
	Exclusions []Exclusion

	// is is the CEL condition on the member's value that sets the
	// feature, such as "== 'Global'"; empty, its presence sets it.
	is  string
	set func(s *RateLimitPolicySpec) bool
}

// Exclusion is a set of features that another can't be set with: the
// other is refused, on its own path, when any of them is set.
// +kubebuilder:object:generate=false
type Exclusion struct {
	// With are the features that exclude it.
	With []FeatureName
	// Reason is the refusal's message.
	Reason string
}

// Takes reports whether t takes f.
func (f *Feature) Takes(t Taker) bool { return f.TakenBy == nil || slices.Contains(f.TakenBy, t) }

// Set reports whether s sets f.
func (f *Feature) Set(s *RateLimitPolicySpec) bool { return f.set(s) }

// The reasons of the table, word for word the messages of the CRD's rules.
const (
	unionMsg           = "spec.limit must set the member its type names, and only it: rate with type Rate, concurrency with type Concurrency"
	windowMsg          = "spec.limit.rate takes period, or calendar instead of it: set exactly one"
	burstMsg           = "spec.limit.rate.burst applies only to TokenBucket and GCRA"
	calendarMsg        = "spec.limit.rate.calendar applies only to FixedWindow"
	slidingLogLimitMsg = "spec.limit.rate.limit may be at most 10000 for SlidingLog, which keeps one entry per admitted request: use SlidingWindow or TokenBucket/GCRA for larger limits"
	costMaxMsg         = "spec.limit.rate.cost.max must not exceed the capacity: burst, or limit without it"
	reserveLogMsg      = "spec.limit.rate.cost.reserve is not supported with SlidingLog, whose log cannot be charged after the fact"
	localTierLogMsg    = "spec.limit.rate.localTier is not supported with SlidingLog, which stays exact"
	localTierExactMsg  = "spec.limit.rate.localTier is not supported with calendar, priority, cost.reserve or penalty, which need the store's exact count"
	penaltyReserveMsg  = "spec.limit.rate.penalty is not supported with cost.reserve: a reservation holds what it takes apart from the exact decision that counts a penalty's denials"
	penaltySoftMsg     = "spec.limit.rate.penalty does not apply to mode Soft, which never denies: use it on the hard limit"
	globalLogMsg       = "spec.limit.rate.scope Global is not supported with SlidingLog, which stays exact: use SlidingWindow, FixedWindow, TokenBucket or GCRA"
	globalExactMsg     = "spec.limit.rate.scope Global is not supported with localTier, cost.reserve, penalty, priority or calendar: a region spends grants taken from the key's home region, which these would need counted exactly there"
	requestOverrideMsg = "spec.limit.rate.requestOverride needs a fixed period and is not supported with calendar, SlidingLog, burst, localTier, cost.reserve or scope Global: a request's own limit replaces limit (and the bucket size) for that request only, which these can't honour"
	softHiddenMsg      = "spec.mode Soft is not supported with spec.response.visibility Hidden: the mark on the requests over a soft limit would show its threshold; use mode Shadow for a limit that only operators see"
	slidingLogMaxLimit = 10000
)

// exact are the rate algorithms that may lease or hold what they take:
// every one but SlidingLog, which stays exact.
var exact = []Taker{Taker(TokenBucket), Taker(GCRA), Taker(SlidingWindow), Taker(FixedWindow)}

// Features is the table, one row per feature.
var Features = []Feature{
	{Name: FeatureRate, Path: "limit.rate", TakenBy: RateTakers, Refused: unionMsg,
		set: func(s *RateLimitPolicySpec) bool { return s.Limit.Rate != nil }},
	{Name: FeatureConcurrency, Path: "limit.concurrency", TakenBy: []Taker{TakerConcurrency}, Refused: unionMsg,
		set: func(s *RateLimitPolicySpec) bool { return s.Limit.Concurrency != nil }},
	{Name: FeaturePeriod, Path: "limit.rate.period", TakenBy: RateTakers,
		Exclusions: []Exclusion{{With: []FeatureName{FeatureCalendar}, Reason: windowMsg}},
		set:        rateSets(func(r *RateLimit) bool { return r.Period != nil })},
	{Name: FeatureCalendar, Path: "limit.rate.calendar", TakenBy: []Taker{Taker(FixedWindow)}, Refused: calendarMsg,
		set: rateSets(func(r *RateLimit) bool { return r.Calendar != nil })},
	{Name: FeatureBurst, Path: "limit.rate.burst", TakenBy: []Taker{Taker(TokenBucket), Taker(GCRA)}, Refused: burstMsg,
		set: rateSets(func(r *RateLimit) bool { return r.Burst != nil })},
	{Name: FeatureLimitAbove10000, Path: "limit.rate.limit", TakenBy: exact, Refused: slidingLogLimitMsg, is: "> 10000",
		set: rateSets(func(r *RateLimit) bool { return r.Limit > slidingLogMaxLimit })},
	{Name: FeatureCostMax, Path: "limit.rate.cost.max", TakenBy: RateTakers,
		set: rateSets(func(r *RateLimit) bool { return r.Cost != nil && r.Cost.Max != nil })},
	{Name: FeatureReserve, Path: "limit.rate.cost.reserve", TakenBy: exact, Refused: reserveLogMsg,
		set: rateSets(func(r *RateLimit) bool { return r.Cost != nil && r.Cost.Reserve != nil })},
	{Name: FeatureLocalTier, Path: "limit.rate.localTier", TakenBy: exact, Refused: localTierLogMsg,
		Exclusions: []Exclusion{{With: []FeatureName{FeatureCalendar, FeaturePriority, FeatureReserve, FeaturePenalty}, Reason: localTierExactMsg}},
		set:        rateSets(func(r *RateLimit) bool { return r.LocalTier != nil })},
	{Name: FeaturePriority, Path: "limit.rate.priority", TakenBy: RateTakers,
		set: rateSets(func(r *RateLimit) bool { return r.Priority != nil })},
	{Name: FeaturePenalty, Path: "limit.rate.penalty", TakenBy: RateTakers,
		Exclusions: []Exclusion{
			{With: []FeatureName{FeatureReserve}, Reason: penaltyReserveMsg},
			{With: []FeatureName{FeatureSoft}, Reason: penaltySoftMsg},
		},
		set: rateSets(func(r *RateLimit) bool { return r.Penalty != nil })},
	{Name: FeatureGlobal, Path: "limit.rate.scope", TakenBy: exact, Refused: globalLogMsg,
		Exclusions: []Exclusion{{With: []FeatureName{FeatureLocalTier, FeatureReserve, FeaturePenalty, FeaturePriority, FeatureCalendar}, Reason: globalExactMsg}},
		is:         "== 'Global'",
		set:        rateSets(func(r *RateLimit) bool { return r.Scope != nil && *r.Scope == ScopeGlobal })},
	{Name: FeatureRequestOverride, Path: "limit.rate.requestOverride", TakenBy: exact, Refused: requestOverrideMsg,
		Exclusions: []Exclusion{{With: []FeatureName{FeatureCalendar, FeatureBurst, FeatureLocalTier, FeatureReserve, FeatureGlobal}, Reason: requestOverrideMsg}},
		set:        rateSets(func(r *RateLimit) bool { return r.RequestOverride != nil })},
	{Name: FeatureLeaseDuration, Path: "limit.concurrency.leaseDuration", TakenBy: []Taker{TakerConcurrency},
		set: concurrencySets(func(c *ConcurrencyLimit) bool { return c.LeaseDuration != nil })},
	{Name: FeatureConcurrencyPriority, Path: "limit.concurrency.priority", TakenBy: []Taker{TakerConcurrency},
		set: concurrencySets(func(c *ConcurrencyLimit) bool { return c.Priority != nil })},
	{Name: FeatureSoft, Path: "mode",
		Exclusions: []Exclusion{{With: []FeatureName{FeatureHidden}, Reason: softHiddenMsg}},
		is:         "== 'Soft'",
		set:        func(s *RateLimitPolicySpec) bool { return s.Mode != nil && *s.Mode == Soft }},
	{Name: FeatureHidden, Path: "response.visibility", is: "== 'Hidden'",
		set: func(s *RateLimitPolicySpec) bool {
			return s.Response != nil && s.Response.Visibility != nil && *s.Response.Visibility == Hidden
		}},
}

func rateSets(f func(r *RateLimit) bool) func(s *RateLimitPolicySpec) bool {
	return func(s *RateLimitPolicySpec) bool { return s.Limit.Rate != nil && f(s.Limit.Rate) }
}

func concurrencySets(f func(c *ConcurrencyLimit) bool) func(s *RateLimitPolicySpec) bool {
	return func(s *RateLimitPolicySpec) bool { return s.Limit.Concurrency != nil && f(s.Limit.Concurrency) }
}

// FeatureByName returns the row of the table named n, or nil.
func FeatureByName(n FeatureName) *Feature {
	for i := range Features {
		if Features[i].Name == n {
			return &Features[i]
		}
	}
	return nil
}

// TakerOf is what judges f in s: the algorithm of spec.limit.rate for its
// members (TokenBucket when omitted, as the API server defaults it),
// Concurrency for the members of spec.limit.concurrency, and otherwise
// the spec's type, or its rate's algorithm for type Rate.
func TakerOf(s *RateLimitPolicySpec, f *Feature) Taker {
	switch {
	case strings.HasPrefix(f.Path, "limit.rate."):
		return rateAlgorithm(s.Limit.Rate)
	case strings.HasPrefix(f.Path, "limit.concurrency."):
		return TakerConcurrency
	case s.Limit.Type == LimitRate:
		return rateAlgorithm(s.Limit.Rate)
	}
	return Taker(s.Limit.Type)
}

func rateAlgorithm(r *RateLimit) Taker {
	if r == nil || r.Algorithm == nil {
		return Taker(TokenBucket)
	}
	return Taker(*r.Algorithm)
}

// ValidateFeatures applies the table to spec, whose path is path (such as
// field.NewPath("spec")): a feature its taker refuses, or set with a
// feature that excludes it, is Forbidden on the feature's own path; a
// missing member of the limit's union or window is Required; and
// spec.limit.rate.cost.max must fit the capacity. It says what the CRD's
// rules say, on the same paths, with the same messages; it checks nothing
// else (bounds, formats and required fields are the schema's).
func ValidateFeatures(spec *RateLimitPolicySpec, path *field.Path) field.ErrorList {
	set := map[FeatureName]bool{}
	for i := range Features {
		set[Features[i].Name] = Features[i].set(spec)
	}
	var errs field.ErrorList
	for i := range Features {
		f := &Features[i]
		if !set[f.Name] {
			continue
		}
		p := childPath(path, f.Path)
		if !f.Takes(TakerOf(spec, f)) {
			errs = append(errs, field.Forbidden(p, f.Refused))
		}
		for _, x := range f.Exclusions {
			if slices.ContainsFunc(x.With, func(n FeatureName) bool { return set[n] }) {
				errs = append(errs, field.Forbidden(p, x.Reason))
			}
		}
	}
	return append(errs, validateRequiredMembers(spec, path)...)
}

// validateRequiredMembers checks what the table can't say as features: the
// member the limit's type names, a rate's window, and cost.max within the
// capacity.
func validateRequiredMembers(spec *RateLimitPolicySpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	limit := path.Child("limit")
	switch {
	case spec.Limit.Type == LimitRate && spec.Limit.Rate == nil:
		errs = append(errs, field.Required(limit.Child("rate"), unionMsg))
	case spec.Limit.Type == LimitConcurrency && spec.Limit.Concurrency == nil:
		errs = append(errs, field.Required(limit.Child("concurrency"), unionMsg))
	}
	r := spec.Limit.Rate
	if r == nil {
		return errs
	}
	if r.Period == nil && r.Calendar == nil {
		errs = append(errs, field.Required(limit.Child("rate", "period"), windowMsg))
	}
	if r.Cost != nil && r.Cost.Max != nil {
		capacity := r.Limit
		if r.Burst != nil {
			capacity = *r.Burst
		}
		if *r.Cost.Max > capacity {
			errs = append(errs, field.Invalid(limit.Child("rate", "cost", "max"), *r.Cost.Max, costMaxMsg))
		}
	}
	return errs
}

// childPath is path's descendant at rel, a dotted path such as
// "limit.rate.burst".
func childPath(path *field.Path, rel string) *field.Path {
	for _, name := range strings.Split(rel, ".") {
		path = path.Child(name)
	}
	return path
}
