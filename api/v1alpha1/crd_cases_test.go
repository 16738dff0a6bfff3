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
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// basePolicy is a valid policy that each case changes in one way.
func basePolicy(name string) *v1alpha1.RateLimitPolicy {
	return &v1alpha1.RateLimitPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RateLimitPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
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

// badCase is a policy the API server must reject, and ValidatePolicy too.
//
// typed changes the Go object. raw then changes the spec as JSON, for values
// the Go types cannot hold; ValidatePolicy sees what decoding that JSON gives,
// and a decoding error counts as a rejection.
type badCase struct {
	name  string
	typed func(p *v1alpha1.RateLimitPolicy)
	raw   func(spec map[string]any)

	// field is the path the API server names. ValidatePolicy must name it or a
	// path below it.
	field string
	// message is a substring of the API server's message for field.
	message string
	// goMessage is a substring of ValidatePolicy's error for field, if it
	// words the error differently from the API server.
	goMessage string
}

func descriptors(n int) []v1alpha1.Descriptor {
	ds := make([]v1alpha1.Descriptor, n)
	for i := range ds {
		ds[i].Key = fmt.Sprintf("key%d", i)
	}
	return ds
}

var badCases = []badCase{
	// metadata
	{
		name:      "name missing",
		typed:     func(p *v1alpha1.RateLimitPolicy) { p.Name = "" },
		field:     "metadata.name",
		message:   "name or generateName is required",
		goMessage: "Required value",
	},
	{
		name:    "name not a DNS subdomain",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Name = "Charges_Per_User" },
		field:   "metadata.name",
		message: "a lowercase RFC 1123 subdomain",
	},

	// domain
	{
		name:    "domain missing",
		raw:     func(s map[string]any) { delete(s, "domain") },
		field:   "spec.domain",
		message: "Required value",
	},
	{
		name:      "domain empty",
		typed:     func(p *v1alpha1.RateLimitPolicy) { p.Spec.Domain = "" },
		field:     "spec.domain",
		message:   "should be at least 1 chars long",
		goMessage: "Required value",
	},
	{
		name:    "domain too long",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Domain = strings.Repeat("d", 254) },
		field:   "spec.domain",
		message: "may not be more than 253 bytes",
	},

	// descriptors
	{
		name:    "descriptors missing",
		raw:     func(s map[string]any) { delete(s, "descriptors") },
		field:   "spec.descriptors",
		message: "Required value",
	},
	{
		name:      "descriptors empty",
		typed:     func(p *v1alpha1.RateLimitPolicy) { p.Spec.Descriptors = []v1alpha1.Descriptor{} },
		field:     "spec.descriptors",
		message:   "should have at least 1 items",
		goMessage: "Required value",
	},
	{
		name:    "more than 8 descriptors",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Descriptors = descriptors(9) },
		field:   "spec.descriptors",
		message: "must have at most 8 items",
	},
	{
		name:      "empty key",
		typed:     func(p *v1alpha1.RateLimitPolicy) { p.Spec.Descriptors[0].Key = "" },
		field:     "spec.descriptors[0].key",
		message:   "should be at least 1 chars long",
		goMessage: "Required value",
	},
	{
		name:    "key missing",
		raw:     func(s map[string]any) { delete(s["descriptors"].([]any)[0].(map[string]any), "key") },
		field:   "spec.descriptors[0].key",
		message: "Required value",
	},
	{
		name:    "key too long",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Descriptors[0].Key = strings.Repeat("k", 254) },
		field:   "spec.descriptors[0].key",
		message: "may not be more than 253 bytes",
	},
	{
		name:    "empty value",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Descriptors[1].Value = ptr.To("") },
		field:   "spec.descriptors[1].value",
		message: "should be at least 1 chars long",
	},
	{
		name:    "value too long",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Descriptors[1].Value = ptr.To(strings.Repeat("é", 1025)) },
		field:   "spec.descriptors[1].value",
		message: "may not be more than 1024 bytes",
	},
	{
		name: "duplicate keys",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Descriptors = append(p.Spec.Descriptors, v1alpha1.Descriptor{Key: "user_id", Value: ptr.To("alice")})
		},
		field:   "spec.descriptors",
		message: "descriptor keys must be unique",
	},

	// algorithm and failureMode
	{
		name:    "unknown algorithm",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Algorithm = ptr.To(v1alpha1.Algorithm("LeakyBucket")) },
		field:   "spec.algorithm",
		message: `Unsupported value: "LeakyBucket": supported values: "TokenBucket", "GCRA", "SlidingWindow", "FixedWindow", "SlidingLog"`,
	},
	{
		name: "unknown failureMode",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.FailureMode = ptr.To(v1alpha1.FailureMode("open"))
		},
		field:   "spec.failureMode",
		message: `Unsupported value: "open": supported values: "Open", "Closed", "Local"`,
	},

	// rate
	{
		name:    "rate missing",
		raw:     func(s map[string]any) { delete(s, "rate") },
		field:   "spec.rate",
		message: "spec.rate is required, except with algorithm Concurrency",
	},
	{
		name:    "limit below 1",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Rate.Limit = 0 },
		field:   "spec.rate.limit",
		message: "should be greater than or equal to 1",
	},
	{
		name:    "limit above 1e9",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Rate.Limit = v1alpha1.MaxLimit + 1 },
		field:   "spec.rate.limit",
		message: "should be less than or equal to 1000000000",
	},
	{
		name:    "period missing",
		raw:     func(s map[string]any) { delete(s["rate"].(map[string]any), "period") },
		field:   "spec.rate.period",
		message: "spec.rate.period is required, unless spec.rate.calendar is set",
	},
	{
		name:    "period below 1s",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Rate.Period.Duration = 999 * time.Millisecond },
		field:   "spec.rate.period",
		message: "period must be between 1s and 720h",
	},
	{
		name:    "period above 720h",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Rate.Period.Duration = 720*time.Hour + time.Second },
		field:   "spec.rate.period",
		message: "period must be between 1s and 720h",
	},
	{
		name:    "period negative",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Rate.Period.Duration = -time.Minute },
		field:   "spec.rate.period",
		message: "period must be a Go duration such as 30s, 1m or 1h30m",
		// The Go type holds -1m0s, which is out of range.
		goMessage: "period must be between 1s and 720h",
	},
	{
		name:    "period not a duration",
		raw:     func(s map[string]any) { s["rate"].(map[string]any)["period"] = "1 minute" },
		field:   "spec.rate.period",
		message: "period must be a Go duration such as 30s, 1m or 1h30m",
	},
	{
		name:    "period as a number",
		raw:     func(s map[string]any) { s["rate"].(map[string]any)["period"] = int64(60) },
		field:   "spec.rate.period",
		message: `Invalid value: "integer": spec.rate.period in body must be of type string`,
	},

	// calendar
	{
		name:    "calendar with TokenBucket",
		typed:   func(p *v1alpha1.RateLimitPolicy) { calendar(p, v1alpha1.CalendarDay, ""); p.Spec.Algorithm = nil },
		field:   "spec.rate.calendar",
		message: "spec.rate.calendar applies only to FixedWindow",
	},
	{
		name: "calendar with SlidingWindow",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			calendar(p, v1alpha1.CalendarMonth, "")
			p.Spec.Algorithm = ptr.To(v1alpha1.SlidingWindow)
		},
		field:   "spec.rate.calendar",
		message: "spec.rate.calendar applies only to FixedWindow",
	},
	{
		name: "calendar and period",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			calendar(p, v1alpha1.CalendarDay, "")
			p.Spec.Rate.Period.Duration = 24 * time.Hour
		},
		field:   "spec.rate.calendar",
		message: "spec.rate.calendar replaces spec.rate.period: set only one of them",
	},
	{
		name:    "unknown calendar period",
		raw:     func(s map[string]any) { calendarRaw(s, "Year") },
		field:   "spec.rate.calendar",
		message: `Unsupported value: "Year": supported values: "Day", "Week", "Month"`,
	},
	{
		name:    "unknown time zone",
		typed:   func(p *v1alpha1.RateLimitPolicy) { calendar(p, v1alpha1.CalendarDay, "Mars/Olympus_Mons") },
		field:   "spec.rate.timeZone",
		message: "timeZone must be a time zone of the IANA database, such as Europe/Paris or UTC",
	},
	{
		name:    "time zone as an offset",
		typed:   func(p *v1alpha1.RateLimitPolicy) { calendar(p, v1alpha1.CalendarDay, "+02:00") },
		field:   "spec.rate.timeZone",
		message: "timeZone must be an IANA time zone name such as Europe/Paris or UTC",
	},
	{
		name:    "time zone Local",
		typed:   func(p *v1alpha1.RateLimitPolicy) { calendar(p, v1alpha1.CalendarWeek, "Local") },
		field:   "spec.rate.timeZone",
		message: "timeZone must be an IANA time zone name such as Europe/Paris or UTC",
	},
	{
		name: "time zone empty",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			calendar(p, v1alpha1.CalendarWeek, "")
			p.Spec.Rate.TimeZone = ptr.To("")
		},
		field:   "spec.rate.timeZone",
		message: "should be at least 1 chars long",
	},
	{
		name:    "time zone without calendar",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Rate.TimeZone = ptr.To("Europe/Paris") },
		field:   "spec.rate.timeZone",
		message: "spec.rate.timeZone applies only with spec.rate.calendar",
	},
	{
		name: "localTier with calendar",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			calendar(p, v1alpha1.CalendarDay, "")
			p.Spec.LocalTier = &v1alpha1.LocalTier{Enabled: ptr.To(true)}
		},
		field:   "spec.localTier",
		message: "spec.localTier is not supported with spec.rate.calendar",
	},

	// priority
	{
		name:    "priority share above 100%",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Priority = priority("critical", 100, "batch", 101) },
		field:   "spec.priority.levels[1].share",
		message: "should be less than or equal to 100",
	},
	{
		name:    "priority share below 0%",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Priority = priority("critical", -1) },
		field:   "spec.priority.levels[0].share",
		message: "should be greater than or equal to 0",
	},
	{
		name: "priority shares increasing",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Priority = priority("critical", 100, "default", 50, "batch", 80)
		},
		field:   "spec.priority.levels",
		message: "spec.priority.levels' shares must not increase from one level to the next: list the highest priority first",
	},
	{
		name:    "priority values repeated",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Priority = priority("critical", 100, "critical", 50) },
		field:   "spec.priority.levels",
		message: "spec.priority.levels' values must be unique",
	},
	{
		name: "priority default not a level",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Priority = priority("critical", 100, "batch", 50)
			p.Spec.Priority.Default = "normal"
		},
		field:   "spec.priority.default",
		message: "spec.priority.default must be the value of one of spec.priority.levels",
	},
	{
		name: "priority key is a descriptor key",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Priority = priority("critical", 100)
			p.Spec.Priority.Key = "user_id"
		},
		field:   "spec.priority.key",
		message: "spec.priority.key must not be one of spec.descriptors' keys",
	},
	{
		name:    "priority without levels",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Priority = priority(); p.Spec.Priority.Default = "x" },
		field:   "spec.priority.levels",
		message: "should have at least 1 items",
		// ValidatePolicy says only the count.
		goMessage: "Required value",
	},
	{
		name:      "priority level value empty",
		typed:     func(p *v1alpha1.RateLimitPolicy) { p.Spec.Priority = priority("", 100) },
		field:     "spec.priority.levels[0].value",
		message:   "should be at least 1 chars long",
		goMessage: "Required value",
	},
	{
		name: "localTier with priority",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Priority = priority("critical", 100, "batch", 50)
			p.Spec.LocalTier = &v1alpha1.LocalTier{Enabled: ptr.To(true)}
		},
		field:   "spec.localTier",
		message: "spec.localTier is not supported with spec.priority",
	},

	// penalty
	{
		name:    "penalty duration over 30 days",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Penalty = penalty(720*time.Hour + time.Second) },
		field:   "spec.penalty.duration",
		message: "duration must be between 1s and 720h (30 days)",
	},
	{
		name:    "penalty duration below 1s",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Penalty = penalty(500 * time.Millisecond) },
		field:   "spec.penalty.duration",
		message: "duration must be between 1s and 720h (30 days)",
	},
	{
		name:    "penalty duration not a duration",
		raw:     func(s map[string]any) { s["penalty"] = map[string]any{"duration": "10 minutes"} },
		field:   "spec.penalty.duration",
		message: "duration must be a Go duration such as 30s, 10m or 1h30m",
	},
	{
		name:    "penalty duration missing",
		raw:     func(s map[string]any) { s["penalty"] = map[string]any{"after": int64(3)} },
		field:   "spec.penalty.duration",
		message: "Required value",
	},
	{
		name: "penalty after 0",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Penalty = penalty(time.Minute)
			p.Spec.Penalty.After = ptr.To[int32](0)
		},
		field:   "spec.penalty.after",
		message: "should be greater than or equal to 1",
	},
	{
		name: "penalty within over 720h",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Penalty = penalty(time.Minute)
			p.Spec.Penalty.Within = &metav1.Duration{Duration: 721 * time.Hour}
		},
		field:   "spec.penalty.within",
		message: "within must be between 1s and 720h",
	},
	{
		name: "penalty status not an error",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Penalty = penalty(time.Minute)
			p.Spec.Penalty.Status = ptr.To[int32](200)
		},
		field:   "spec.penalty.status",
		message: "should be greater than or equal to 400",
	},
	{
		name: "penalty reason not a header value",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Penalty = penalty(time.Minute)
			p.Spec.Penalty.Reason = ptr.To("banned\r\nSet-Cookie: x=1")
		},
		field:   "spec.penalty.reason",
		message: "reason must be printable ASCII: it is sent as a header",
	},
	{
		name: "localTier with penalty",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Penalty = penalty(time.Minute)
			p.Spec.LocalTier = &v1alpha1.LocalTier{Enabled: ptr.To(true)}
		},
		field:   "spec.localTier",
		message: "spec.localTier is not supported with spec.penalty",
	},

	// burst
	{
		name:    "burst below 1",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Burst = ptr.To[int64](0) },
		field:   "spec.burst",
		message: "should be greater than or equal to 1",
	},
	{
		name:    "burst above 1e9",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Burst = ptr.To[int64](v1alpha1.MaxBurst + 1) },
		field:   "spec.burst",
		message: "should be less than or equal to 1000000000",
	},
	{
		name:    "burst with SlidingWindow",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Algorithm = ptr.To(v1alpha1.SlidingWindow) },
		field:   "spec.burst",
		message: "spec.burst applies only to TokenBucket and GCRA",
	},
	{
		name:    "burst with FixedWindow",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Algorithm = ptr.To(v1alpha1.FixedWindow) },
		field:   "spec.burst",
		message: "spec.burst applies only to TokenBucket and GCRA",
	},
	{
		name:    "burst with SlidingLog",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Algorithm = ptr.To(v1alpha1.SlidingLog) },
		field:   "spec.burst",
		message: "spec.burst applies only to TokenBucket and GCRA",
	},

	// maxCost
	{
		name:    "maxCost below 1",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.MaxCost = ptr.To[int64](0) },
		field:   "spec.maxCost",
		message: "should be greater than or equal to 1",
	},
	{
		name:    "maxCost above burst",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.MaxCost = ptr.To[int64](6) },
		field:   "spec.maxCost",
		message: "spec.maxCost must not exceed the policy's capacity: spec.burst, or spec.rate.limit without it",
	},
	{
		name: "maxCost above rate.limit without burst",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Algorithm = ptr.To(v1alpha1.SlidingWindow)
			p.Spec.Burst = nil
			p.Spec.MaxCost = ptr.To[int64](6)
		},
		field:   "spec.maxCost",
		message: "spec.maxCost must not exceed the policy's capacity: spec.burst, or spec.rate.limit without it",
	},
	{
		name: "SlidingLog above its cap",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Algorithm = ptr.To(v1alpha1.SlidingLog)
			p.Spec.Burst = nil
			p.Spec.Rate.Limit = v1alpha1.MaxSlidingLogLimit + 1
		},
		field:   "spec.rate.limit",
		message: "may be at most 10000 for SlidingLog, which keeps one entry per admitted request",
	},

	// concurrency
	{
		name: "Concurrency without spec.concurrency",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			concurrencyPolicy(p)
			p.Spec.Concurrency = nil
		},
		raw:     func(s map[string]any) { delete(s, "rate") },
		field:   "spec.concurrency",
		message: "spec.concurrency is required with algorithm Concurrency, and only with it",
	},
	{
		name:    "spec.concurrency without Concurrency",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Concurrency = &v1alpha1.ConcurrencyLimit{MaxInFlight: 5} },
		field:   "spec.concurrency",
		message: "spec.concurrency is required with algorithm Concurrency, and only with it",
	},
	{
		name: "rate with Concurrency",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			concurrencyPolicy(p)
			p.Spec.Rate = v1alpha1.Rate{Limit: 5, Period: metav1.Duration{Duration: time.Minute}}
		},
		field:   "spec.rate",
		message: "spec.rate does not apply to Concurrency, which limits requests in flight: set spec.concurrency.maxInFlight",
	},
	{
		name: "maxInFlight below 1",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			concurrencyPolicy(p)
			p.Spec.Concurrency.MaxInFlight = 0
		},
		raw:     func(s map[string]any) { delete(s, "rate") },
		field:   "spec.concurrency.maxInFlight",
		message: "should be greater than or equal to 1",
	},
	{
		name: "maxInFlight above 10000",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			concurrencyPolicy(p)
			p.Spec.Concurrency.MaxInFlight = v1alpha1.MaxInFlight + 1
		},
		raw:     func(s map[string]any) { delete(s, "rate") },
		field:   "spec.concurrency.maxInFlight",
		message: "should be less than or equal to 10000",
	},
	{
		name: "leaseDuration 0",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			concurrencyPolicy(p)
			p.Spec.Concurrency.LeaseDuration = &metav1.Duration{}
		},
		raw:     func(s map[string]any) { delete(s, "rate") },
		field:   "spec.concurrency.leaseDuration",
		message: "leaseDuration must be above 0s and at most 24h",
	},
	{
		name: "leaseDuration over a day",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			concurrencyPolicy(p)
			p.Spec.Concurrency.LeaseDuration = &metav1.Duration{Duration: 24*time.Hour + time.Second}
		},
		raw:     func(s map[string]any) { delete(s, "rate") },
		field:   "spec.concurrency.leaseDuration",
		message: "leaseDuration must be above 0s and at most 24h",
	},
	{
		name: "leaseDuration not a duration",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			concurrencyPolicy(p)
		},
		raw: func(s map[string]any) {
			delete(s, "rate")
			s["concurrency"].(map[string]any)["leaseDuration"] = "five minutes"
		},
		field:   "spec.concurrency.leaseDuration",
		message: "leaseDuration must be a Go duration such as 30s or 5m",
	},
	{
		name: "leaseEntry a descriptor key",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			concurrencyPolicy(p)
			p.Spec.Concurrency.LeaseEntry = ptr.To("user_id")
		},
		raw:     func(s map[string]any) { delete(s, "rate") },
		field:   "spec.concurrency.leaseEntry",
		message: "spec.concurrency.leaseEntry must not be one of the policy's descriptor keys",
	},
	{
		name: "maxCost with Concurrency",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			concurrencyPolicy(p)
			p.Spec.MaxCost = ptr.To[int64](1)
		},
		raw:     func(s map[string]any) { delete(s, "rate") },
		field:   "spec.maxCost",
		message: "spec.maxCost does not apply to Concurrency, which counts requests, not units",
	},
	{
		name: "localTier with Concurrency",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			concurrencyPolicy(p)
			p.Spec.LocalTier = &v1alpha1.LocalTier{Enabled: ptr.To(true)}
		},
		raw:     func(s map[string]any) { delete(s, "rate") },
		field:   "spec.localTier",
		message: "spec.localTier is not supported with Concurrency or spec.reserve, which hold what they take in the store",
	},

	// reserve
	{
		name: "reserve with SlidingLog",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Algorithm = ptr.To(v1alpha1.SlidingLog)
			p.Spec.Burst = nil
			p.Spec.Reserve = &v1alpha1.Reserve{}
		},
		field:   "spec.reserve",
		message: "spec.reserve is not supported with Concurrency, which holds its slots already, or SlidingLog",
	},
	{
		name: "reserve with Concurrency",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			concurrencyPolicy(p)
			p.Spec.Reserve = &v1alpha1.Reserve{}
		},
		raw:     func(s map[string]any) { delete(s, "rate") },
		field:   "spec.reserve",
		message: "spec.reserve is not supported with Concurrency, which holds its slots already, or SlidingLog",
	},
	{
		name:    "expireAfter below 1s",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Reserve = reserveExpiring(999 * time.Millisecond) },
		field:   "spec.reserve.expireAfter",
		message: "expireAfter must be between 1s and 24h",
	},
	{
		name:    "expireAfter over a day",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Reserve = reserveExpiring(24*time.Hour + time.Second) },
		field:   "spec.reserve.expireAfter",
		message: "expireAfter must be between 1s and 24h",
	},
	{
		name:    "reserve leaseEntry a descriptor key",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Reserve = &v1alpha1.Reserve{LeaseEntry: ptr.To("path")} },
		field:   "spec.reserve.leaseEntry",
		message: "spec.reserve.leaseEntry must not be one of the policy's descriptor keys",
	},
	{
		name: "localTier with reserve",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Reserve = &v1alpha1.Reserve{}
			p.Spec.LocalTier = &v1alpha1.LocalTier{Enabled: ptr.To(true)}
		},
		field:   "spec.localTier",
		message: "spec.localTier is not supported with Concurrency or spec.reserve, which hold what they take in the store",
	},

	// issue 19's policy features on issue 18's holdings and client view
	{
		name: "penalty with Concurrency",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			concurrencyPolicy(p)
			p.Spec.Penalty = penalty(10 * time.Minute)
		},
		field:   "spec.penalty",
		message: "spec.penalty is not supported with Concurrency or spec.reserve: their checks hold what they take apart from the exact decision that counts a penalty's denials",
	},
	{
		name: "penalty with reserve",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Reserve = &v1alpha1.Reserve{}
			p.Spec.Penalty = penalty(10 * time.Minute)
		},
		field:   "spec.penalty",
		message: "spec.penalty is not supported with Concurrency or spec.reserve",
	},
	{
		name: "penalty on a soft policy",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Soft = ptr.To(true)
			p.Spec.Penalty = penalty(10 * time.Minute)
		},
		field:   "spec.penalty",
		message: "spec.penalty does not apply to a soft policy, which never denies: use it on the hard limit",
	},
	{
		name: "priority key is the default lease entry of a reserve",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Reserve = &v1alpha1.Reserve{}
			p.Spec.Priority = priority("critical", 100, "batch", 50)
			p.Spec.Priority.Key = v1alpha1.DefaultLeaseEntry
		},
		field:   "spec.priority.key",
		message: "spec.priority.key must not be the policy's lease entry (spec.concurrency.leaseEntry or spec.reserve.leaseEntry, sluice_lease by default): a descriptor that carries it ends a request",
	},
	{
		name: "priority key is a Concurrency lease entry",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			concurrencyPolicy(p)
			p.Spec.Concurrency.LeaseEntry = ptr.To("slot")
			p.Spec.Priority = priority("critical", 100)
			p.Spec.Priority.Key = "slot"
		},
		field:   "spec.priority.key",
		message: "spec.priority.key must not be the policy's lease entry",
	},
	{
		name: "calendar on Concurrency",
		raw: func(s map[string]any) {
			s["algorithm"], s["concurrency"] = string(v1alpha1.Concurrency), map[string]any{"maxInFlight": int64(5)}
			delete(s, "burst")
			s["rate"] = map[string]any{"limit": int64(5), "calendar": "Day"}
		},
		field:   "spec.rate.calendar",
		message: "spec.rate.calendar applies only to FixedWindow",
	},

	// localTier
	{
		name: "localTier with SlidingLog",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Algorithm = ptr.To(v1alpha1.SlidingLog)
			p.Spec.Burst = nil
			p.Spec.LocalTier = &v1alpha1.LocalTier{Enabled: ptr.To(true)}
		},
		field:   "spec.localTier",
		message: "spec.localTier is not supported with SlidingLog, which stays exact",
	},
	{
		name:    "ttl below 100ms",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.LocalTier = localTierTTL(99 * time.Millisecond) },
		field:   "spec.localTier.ttl",
		message: "ttl must be between 100ms and 1m",
	},
	{
		name:    "ttl above 1m",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.LocalTier = localTierTTL(time.Minute + time.Millisecond) },
		field:   "spec.localTier.ttl",
		message: "ttl must be between 100ms and 1m",
	},
	{
		name:    "ttl not a duration",
		raw:     func(s map[string]any) { s["localTier"] = map[string]any{"enabled": true, "ttl": "2 seconds"} },
		field:   "spec.localTier.ttl",
		message: "ttl must be a Go duration such as 500ms or 2s",
	},
	{
		name:    "maxOvershoot negative",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.LocalTier = localTierOvershoot(intstr.FromInt32(-1)) },
		field:   "spec.localTier.maxOvershoot",
		message: "maxOvershoot must be a count from 0 to 1000000000 or a percentage from 0% to 100%",
	},
	{
		name: "maxOvershoot above 1e9",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.LocalTier = localTierOvershoot(intstr.FromInt32(1_000_000_001))
		},
		field:   "spec.localTier.maxOvershoot",
		message: "maxOvershoot must be a count from 0 to 1000000000 or a percentage from 0% to 100%",
	},
	{
		name:    "maxOvershoot above 100%",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.LocalTier = localTierOvershoot(intstr.FromString("101%")) },
		field:   "spec.localTier.maxOvershoot",
		message: "maxOvershoot must be a count from 0 to 1000000000 or a percentage from 0% to 100%",
	},
	{
		name:    "maxOvershoot string without %",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.LocalTier = localTierOvershoot(intstr.FromString("10")) },
		field:   "spec.localTier.maxOvershoot",
		message: "maxOvershoot must be a count from 0 to 1000000000 or a percentage from 0% to 100%",
	},
	{
		name:    "maxOvershoot fractional percentage",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.LocalTier = localTierOvershoot(intstr.FromString("2.5%")) },
		field:   "spec.localTier.maxOvershoot",
		message: "maxOvershoot must be a count from 0 to 1000000000 or a percentage from 0% to 100%",
	},
}

// goodCase is a policy at the edge of a rule, which both must accept.
type goodCase struct {
	name  string
	typed func(p *v1alpha1.RateLimitPolicy)
}

var goodCases = []goodCase{
	{
		name: "minimal, all defaults",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec = v1alpha1.RateLimitPolicySpec{
				Domain:      "d",
				Descriptors: []v1alpha1.Descriptor{{Key: "k"}},
				Rate:        v1alpha1.Rate{Limit: 1, Period: metav1.Duration{Duration: time.Second}},
			}
		},
	},
	{name: "8 descriptors", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Descriptors = descriptors(8) }},
	{name: "longest domain", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Domain = strings.Repeat("d", 253) }},
	{name: "longest key", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Descriptors[0].Key = strings.Repeat("k", 253) }},
	{
		name:  "longest value, counted in characters",
		typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Descriptors[1].Value = ptr.To(strings.Repeat("é", 1024)) },
	},
	{
		name: "largest limit and burst",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Rate.Limit = v1alpha1.MaxLimit
			p.Spec.Burst = ptr.To[int64](v1alpha1.MaxBurst)
		},
	},
	{name: "longest period", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Rate.Period.Duration = 720 * time.Hour }},
	{name: "fractional period", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Rate.Period.Duration = 1500 * time.Millisecond }},
	{name: "burst below limit", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Burst = ptr.To[int64](1) }},
	{name: "burst with GCRA", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Algorithm = ptr.To(v1alpha1.GCRA) }},
	{
		name: "window algorithm without burst",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Algorithm = ptr.To(v1alpha1.FixedWindow)
			p.Spec.Burst = nil
		},
	},
	{
		name: "SlidingLog at its cap",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Algorithm = ptr.To(v1alpha1.SlidingLog)
			p.Spec.Burst = nil
			p.Spec.Rate.Limit = v1alpha1.MaxSlidingLogLimit
		},
	},
	{
		name: "disabled localTier with SlidingLog",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Algorithm = ptr.To(v1alpha1.SlidingLog)
			p.Spec.Burst = nil
			p.Spec.LocalTier = &v1alpha1.LocalTier{Enabled: ptr.To(false)}
		},
	},
	{name: "empty localTier", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.LocalTier = &v1alpha1.LocalTier{} }},
	{name: "shortest ttl", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.LocalTier = localTierTTL(100 * time.Millisecond) }},
	{name: "longest ttl", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.LocalTier = localTierTTL(time.Minute) }},
	{name: "maxOvershoot 0", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.LocalTier = localTierOvershoot(intstr.FromInt32(0)) }},
	{
		name: "maxOvershoot 1e9",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.LocalTier = localTierOvershoot(intstr.FromInt32(1_000_000_000))
		},
	},
	{name: "maxOvershoot 0%", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.LocalTier = localTierOvershoot(intstr.FromString("0%")) }},
	{name: "maxOvershoot 100%", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.LocalTier = localTierOvershoot(intstr.FromString("100%")) }},
	{name: "failureMode Local", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.FailureMode = ptr.To(v1alpha1.FailLocal) }},
	{name: "shadow", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Shadow = ptr.To(true) }},
	{name: "maxCost 1", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.MaxCost = ptr.To[int64](1) }},
	{name: "maxCost equal to burst", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.MaxCost = ptr.To[int64](5) }},
	{
		name: "maxCost above rate.limit, within burst",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Burst = ptr.To[int64](50)
			p.Spec.MaxCost = ptr.To[int64](50)
		},
	},
	{name: "Concurrency", typed: concurrencyPolicy},
	{
		name: "Concurrency, shortest lease",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			concurrencyPolicy(p)
			p.Spec.Concurrency.LeaseDuration = &metav1.Duration{Duration: time.Millisecond}
		},
	},
	{
		name: "Concurrency, a day's lease, 10000 in flight, own entry",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			concurrencyPolicy(p)
			p.Spec.Concurrency = &v1alpha1.ConcurrencyLimit{MaxInFlight: v1alpha1.MaxInFlight,
				LeaseDuration: &metav1.Duration{Duration: 24 * time.Hour}, LeaseEntry: ptr.To("done")}
			p.Spec.FailureMode = ptr.To(v1alpha1.FailLocal)
			p.Spec.Shadow = ptr.To(true)
		},
	},
	{name: "reserve, defaults", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Reserve = &v1alpha1.Reserve{} }},
	{name: "reserve, shortest expiry", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Reserve = reserveExpiring(time.Second) }},
	{name: "reserve, longest expiry", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Reserve = reserveExpiring(24 * time.Hour) }},
	{
		name: "reserve with a disabled localTier",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Reserve = &v1alpha1.Reserve{}
			p.Spec.LocalTier = &v1alpha1.LocalTier{Enabled: ptr.To(false)}
		},
	},
	{
		name: "maxCost equal to rate.limit without burst",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Algorithm = ptr.To(v1alpha1.FixedWindow)
			p.Spec.Burst = nil
			p.Spec.MaxCost = ptr.To[int64](5)
		},
	},
	{name: "calendar day, UTC by default", typed: func(p *v1alpha1.RateLimitPolicy) { calendar(p, v1alpha1.CalendarDay, "") }},
	{name: "calendar week in Paris", typed: func(p *v1alpha1.RateLimitPolicy) { calendar(p, v1alpha1.CalendarWeek, "Europe/Paris") }},
	{
		name:  "calendar month in New York",
		typed: func(p *v1alpha1.RateLimitPolicy) { calendar(p, v1alpha1.CalendarMonth, "America/New_York") },
	},
	{name: "calendar day, UTC named", typed: func(p *v1alpha1.RateLimitPolicy) { calendar(p, v1alpha1.CalendarDay, "UTC") }},
	{
		name:  "calendar day in a zone with a sign",
		typed: func(p *v1alpha1.RateLimitPolicy) { calendar(p, v1alpha1.CalendarDay, "Etc/GMT+5") },
	},
	{
		name: "calendar with a disabled localTier",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			calendar(p, v1alpha1.CalendarDay, "")
			p.Spec.LocalTier = &v1alpha1.LocalTier{Enabled: ptr.To(false)}
		},
	},
	{name: "priority, decreasing shares", typed: func(p *v1alpha1.RateLimitPolicy) {
		p.Spec.Priority = priority("critical", 100, "default", 80, "batch", 50)
	}},
	{name: "priority, equal shares and 0%", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Priority = priority("a", 90, "b", 90, "c", 0) }},
	{
		name: "priority, 16 levels",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			var kv []any
			for i := range v1alpha1.MaxPriorityLevels {
				kv = append(kv, fmt.Sprintf("p%d", i), 100-i)
			}
			p.Spec.Priority = priority(kv...)
		},
	},
	{
		name: "priority on a fleet-wide counter",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Descriptors = []v1alpha1.Descriptor{{Key: "service", Value: ptr.To("search")}}
			p.Spec.Priority = priority("critical", 100, "batch", 50)
			p.Spec.Priority.Default = "batch"
		},
	},
	{name: "penalty, defaults", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Penalty = penalty(10 * time.Minute) }},
	{
		name: "penalty at its bounds",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Penalty = &v1alpha1.Penalty{Duration: metav1.Duration{Duration: 720 * time.Hour}, After: ptr.To[int32](1000),
				Within: &metav1.Duration{Duration: 720 * time.Hour}, Status: ptr.To[int32](599), Reason: ptr.To(strings.Repeat("~", 256))}
		},
	},
	{
		name: "penalty with priority and a calendar",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			calendar(p, v1alpha1.CalendarDay, "Asia/Tokyo")
			p.Spec.Priority = priority("critical", 100, "batch", 50)
			p.Spec.Penalty = penalty(time.Second)
		},
	},
	// issue 19's policy features on issue 18's holdings and client view
	{
		name: "priority on Concurrency",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			concurrencyPolicy(p)
			p.Spec.Priority = priority("interactive", 100, "batch", 50)
		},
	},
	{
		name: "priority and a calendar with reserve",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			calendar(p, v1alpha1.CalendarMonth, "Europe/Paris")
			p.Spec.Reserve = &v1alpha1.Reserve{LeaseEntry: ptr.To("reservation")}
			p.Spec.Priority = priority("interactive", 100, "batch", 50)
		},
	},
	{
		name: "priority key sluice_lease on a policy that holds nothing",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Priority = priority("interactive", 100)
			p.Spec.Priority.Key = v1alpha1.DefaultLeaseEntry
		},
	},
	{
		name: "penalty on a hidden policy",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Visibility = ptr.To(v1alpha1.Hidden)
			p.Spec.Penalty = penalty(time.Hour)
		},
	},
	{
		name: "soft policy with priority",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Soft = ptr.To(true)
			p.Spec.Priority = priority("interactive", 100, "batch", 50)
		},
	},
}

// penalty is a spec.penalty of duration d, the rest defaulted.
func penalty(d time.Duration) *v1alpha1.Penalty {
	return &v1alpha1.Penalty{Duration: metav1.Duration{Duration: d}}
}

// priority is a spec.priority on key "priority" with levels (value, share,
// ...), the first one the default.
func priority(kv ...any) *v1alpha1.PriorityShedding {
	ps := &v1alpha1.PriorityShedding{Key: "priority", Levels: []v1alpha1.PriorityLevel{}}
	for i := 0; i < len(kv); i += 2 {
		ps.Levels = append(ps.Levels, v1alpha1.PriorityLevel{Value: kv[i].(string), Share: int32(kv[i+1].(int))})
	}
	if len(ps.Levels) > 0 {
		ps.Default = ps.Levels[0].Value
	}
	return ps
}

// calendar makes p a FixedWindow of calendar period c in time zone tz
// (none when empty).
func calendar(p *v1alpha1.RateLimitPolicy, c v1alpha1.CalendarPeriod, tz string) {
	p.Spec.Algorithm = ptr.To(v1alpha1.FixedWindow)
	p.Spec.Burst = nil
	p.Spec.Rate = v1alpha1.Rate{Limit: 10000, Calendar: ptr.To(c)}
	if tz != "" {
		p.Spec.Rate.TimeZone = ptr.To(tz)
	}
}

// calendarRaw makes the spec a FixedWindow with calendar c, which the Go
// type may not hold.
func calendarRaw(s map[string]any, c string) {
	s["algorithm"] = string(v1alpha1.FixedWindow)
	delete(s, "burst")
	s["rate"] = map[string]any{"limit": int64(10000), "calendar": c}
}

// concurrencyPolicy makes p a Concurrency policy of 5 in flight, with no
// rate or burst.
func concurrencyPolicy(p *v1alpha1.RateLimitPolicy) {
	p.Spec.Algorithm = ptr.To(v1alpha1.Concurrency)
	p.Spec.Rate = v1alpha1.Rate{}
	p.Spec.Burst = nil
	p.Spec.Concurrency = &v1alpha1.ConcurrencyLimit{MaxInFlight: 5}
}

func reserveExpiring(d time.Duration) *v1alpha1.Reserve {
	return &v1alpha1.Reserve{ExpireAfter: &metav1.Duration{Duration: d}}
}

func localTierTTL(d time.Duration) *v1alpha1.LocalTier {
	return &v1alpha1.LocalTier{Enabled: ptr.To(true), TTL: &metav1.Duration{Duration: d}}
}

func localTierOvershoot(v intstr.IntOrString) *v1alpha1.LocalTier {
	return &v1alpha1.LocalTier{Enabled: ptr.To(true), MaxOvershoot: &v}
}
