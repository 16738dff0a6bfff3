package config

import (
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

func localTier(p *v1beta1.RateLimitPolicy) { rate(p).LocalTier = &v1beta1.LocalTier{} }
func reserve(p *v1beta1.RateLimitPolicy) {
	rate(p).Cost = &v1beta1.Cost{Reserve: &v1beta1.Reserve{}}
}
func penalty(p *v1beta1.RateLimitPolicy) {
	rate(p).Penalty = &v1beta1.Penalty{Duration: "1m"}
}
func calendar(p *v1beta1.RateLimitPolicy) {
	rate(p).Period, rate(p).Calendar = nil, &v1beta1.Calendar{Period: v1beta1.CalendarDay}
}
func priority(p *v1beta1.RateLimitPolicy) {
	rate(p).Priority = &v1beta1.PriorityShedding{Levels: []v1beta1.PriorityLevel{{Value: "a", Share: 100}}, Default: "a"}
}
func global(p *v1beta1.RateLimitPolicy)  { rate(p).Scope = ptr.To(v1beta1.ScopeGlobal) }
func noBurst(p *v1beta1.RateLimitPolicy) { rate(p).Burst = nil }
func mode(m v1beta1.Mode) func(p *v1beta1.RateLimitPolicy) {
	return func(p *v1beta1.RateLimitPolicy) { p.Spec.Mode = &m }
}
func hidden(p *v1beta1.RateLimitPolicy) {
	p.Spec.Response = &v1beta1.Response{Visibility: ptr.To(v1beta1.Hidden)}
}
func override(p *v1beta1.RateLimitPolicy) {
	rate(p).RequestOverride = &v1beta1.RequestOverride{Maximum: 10}
}

// What fields say together (validateFeatures, api/v1beta1's feature
// table), with v1beta1 paths and the v1beta1 CRD's messages: every check
// the limiter made on v1alpha1 specs still refuses.
var featureCases = []validateCase{
	{name: "burst with SlidingWindow", mutate: algorithm(v1beta1.SlidingWindow),
		want: fe("spec.limit.rate.burst", field.ErrorTypeForbidden), detail: "spec.limit.rate.burst applies only to TokenBucket and GCRA"},
	{name: "burst with GCRA", mutate: algorithm(v1beta1.GCRA)},
	{name: "calendar with TokenBucket", mutate: both(noBurst, calendar),
		want: fe("spec.limit.rate.calendar", field.ErrorTypeForbidden), detail: "spec.limit.rate.calendar applies only to FixedWindow"},
	{name: "calendar with FixedWindow", mutate: both(noBurst, calendar, algorithm(v1beta1.FixedWindow))},
	{name: "calendar and period", mutate: func(p *v1beta1.RateLimitPolicy) { rate(p).Calendar = &v1beta1.Calendar{Period: v1beta1.CalendarDay} },
		want: fe("spec.limit.rate.period", field.ErrorTypeInvalid)},
	{name: "SlidingLog above 10000", mutate: both(noBurst, algorithm(v1beta1.SlidingLog), func(p *v1beta1.RateLimitPolicy) { rate(p).Limit = 10001 }),
		want: fe("spec.limit.rate.limit", field.ErrorTypeForbidden), detail: "at most 10000 for SlidingLog"},
	{name: "SlidingLog with localTier", mutate: both(noBurst, algorithm(v1beta1.SlidingLog), localTier),
		want: fe("spec.limit.rate.localTier", field.ErrorTypeForbidden), detail: "not supported with SlidingLog"},
	{name: "SlidingLog with reserve", mutate: both(noBurst, algorithm(v1beta1.SlidingLog), reserve),
		want: fe("spec.limit.rate.cost.reserve", field.ErrorTypeForbidden)},
	{name: "cost.max above burst", mutate: func(p *v1beta1.RateLimitPolicy) { rate(p).Cost = &v1beta1.Cost{Max: ptr.To[int64](6)} },
		want: fe("spec.limit.rate.cost.max", field.ErrorTypeInvalid), detail: "spec.limit.rate.cost.max must not exceed the capacity"},
	{name: "cost.max at burst", mutate: func(p *v1beta1.RateLimitPolicy) { rate(p).Cost = &v1beta1.Cost{Max: ptr.To[int64](5)} }},
	{name: "localTier with reserve", mutate: both(localTier, reserve), want: fe("spec.limit.rate.localTier", field.ErrorTypeForbidden), detail: "cost.reserve"},
	{name: "localTier with penalty", mutate: both(localTier, penalty), want: fe("spec.limit.rate.localTier", field.ErrorTypeForbidden)},
	{name: "reserve with penalty", mutate: both(reserve, penalty), want: fe("spec.limit.rate.penalty", field.ErrorTypeForbidden), detail: "not supported with cost.reserve"},
	{name: "localTier with priority", mutate: both(localTier, priority),
		want: fe("spec.limit.rate.localTier", field.ErrorTypeForbidden), detail: "not supported with calendar, priority"},
	{name: "localTier with calendar", mutate: both(noBurst, algorithm(v1beta1.FixedWindow), calendar, localTier),
		want: fe("spec.limit.rate.localTier", field.ErrorTypeForbidden)},
	{name: "Global", mutate: global},
	{name: "Global with SlidingLog", mutate: both(noBurst, algorithm(v1beta1.SlidingLog), global),
		want: fe("spec.limit.rate.scope", field.ErrorTypeForbidden), detail: "scope Global is not supported with SlidingLog"},
	{name: "Global with penalty", mutate: both(global, penalty), want: fe("spec.limit.rate.scope", field.ErrorTypeForbidden), detail: "scope Global is not supported with localTier"},
	{name: "Global with priority", mutate: both(global, priority), want: fe("spec.limit.rate.scope", field.ErrorTypeForbidden)},
	{name: "requestOverride", mutate: both(noBurst, override)},
	{name: "requestOverride with burst", mutate: override, want: fe("spec.limit.rate.requestOverride", field.ErrorTypeForbidden), detail: "needs a fixed period"},
	{name: "requestOverride with calendar", mutate: both(noBurst, algorithm(v1beta1.FixedWindow), calendar, override),
		want: fe("spec.limit.rate.requestOverride", field.ErrorTypeForbidden)},
	{name: "requestOverride with Global", mutate: both(noBurst, global, override), want: fe("spec.limit.rate.requestOverride", field.ErrorTypeForbidden)},
	{name: "Soft", mutate: mode(v1beta1.Soft)},
	{name: "Soft and Hidden", mutate: both(mode(v1beta1.Soft), hidden), want: fe("spec.mode", field.ErrorTypeForbidden), detail: "spec.mode Soft is not supported with spec.response.visibility Hidden"},
	{name: "Soft with penalty", mutate: both(mode(v1beta1.Soft), penalty), want: fe("spec.limit.rate.penalty", field.ErrorTypeForbidden), detail: "penalty does not apply to mode Soft"},
	{name: "priority key a descriptor key", mutate: both(priority, func(p *v1beta1.RateLimitPolicy) { p.Spec.Descriptors[0].Key = "priority" }),
		want: fe("spec.limit.rate.priority", field.ErrorTypeInvalid), detail: "must not be one of spec.descriptors' keys"},
	{name: "lease entry a descriptor key", mutate: both(reserve, func(p *v1beta1.RateLimitPolicy) { p.Spec.Descriptors[0].Key = "sluice_lease" }),
		want: fe("entries.lease", field.ErrorTypeInvalid), detail: "must not be one of the policy's descriptor keys"},
}
