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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Duration is a length of time in the Gateway API's format (GEP-2257): one
// to four components, each of one to five digits and a unit of h, m, s or
// ms, such as "30s", "1h30m" or "1s500ms". Every duration of the API has
// this type; each field says its own bounds.
// +kubebuilder:validation:Pattern=`^([0-9]{1,5}(h|m|s|ms)){1,4}$`
// +kubebuilder:validation:MaxLength=32
type Duration string

// LimitType names the kind of a limit: a rate or a concurrency.
// +kubebuilder:validation:Enum=Rate;Concurrency
type LimitType string

const (
	// LimitRate limits how many units a counter spends per period.
	LimitRate LimitType = "Rate"
	// LimitConcurrency limits how many requests of a counter are in flight
	// at once.
	LimitConcurrency LimitType = "Concurrency"
)

// Algorithm names the counting algorithm of a rate.
// +kubebuilder:validation:Enum=TokenBucket;GCRA;SlidingWindow;FixedWindow;SlidingLog
type Algorithm string

const (
	// TokenBucket refills limit tokens per period into a bucket of burst tokens.
	TokenBucket Algorithm = "TokenBucket"
	// GCRA is the generic cell rate algorithm: a token bucket kept as one timestamp.
	GCRA Algorithm = "GCRA"
	// SlidingWindow weights the previous fixed window by its overlap with the current one.
	SlidingWindow Algorithm = "SlidingWindow"
	// FixedWindow counts units in windows of period aligned to the epoch,
	// or in calendar windows.
	FixedWindow Algorithm = "FixedWindow"
	// SlidingLog keeps one entry per admitted request over the last
	// period; it is exact. Its limit is at most 10000.
	SlidingLog Algorithm = "SlidingLog"
)

// Mode says what a policy does with the requests over its limit.
// +kubebuilder:validation:Enum=Enforce;Soft;Shadow
type Mode string

const (
	// Enforce denies the requests over the limit.
	Enforce Mode = "Enforce"
	// Soft allows and marks them: the policy is a warning threshold.
	Soft Mode = "Soft"
	// Shadow counts them and logs would-be denials, and tells no client
	// anything.
	Shadow Mode = "Shadow"
)

// FailureMode says what a limiter answers when it cannot reach its store.
// +kubebuilder:validation:Enum=Open;Closed;Local
type FailureMode string

const (
	// FailOpen allows the request.
	FailOpen FailureMode = "Open"
	// FailClosed denies the request with a reason.
	FailClosed FailureMode = "Closed"
	// FailLocal enforces an approximate per-pod share (limit / ready pods) in memory.
	FailLocal FailureMode = "Local"
)

// CalendarPeriod is a calendar window of a FixedWindow.
// +kubebuilder:validation:Enum=Day;Week;Month
type CalendarPeriod string

const (
	// CalendarDay runs from midnight to midnight.
	CalendarDay CalendarPeriod = "Day"
	// CalendarWeek runs from Monday midnight to Monday midnight (ISO 8601).
	CalendarWeek CalendarPeriod = "Week"
	// CalendarMonth runs from the first of the month at midnight to the first of the next.
	CalendarMonth CalendarPeriod = "Month"
)

// Visibility says whether clients are told a policy's numbers.
// +kubebuilder:validation:Enum=Visible;Hidden
type Visibility string

const (
	// Visible policies are reported to clients.
	Visible Visibility = "Visible"
	// Hidden policies deny, but tell clients nothing of themselves but when
	// to come back (Retry-After).
	Hidden Visibility = "Hidden"
)

// ProblemType names one problem type of draft-ietf-httpapi-ratelimit-headers.
// +kubebuilder:validation:Enum=QuotaExceeded;TemporaryReducedCapacity;AbnormalUsageDetected
type ProblemType string

const (
	// QuotaExceeded: the client's requests exceed one or more quota policies.
	QuotaExceeded ProblemType = "QuotaExceeded"
	// TemporaryReducedCapacity: a temporary reduction in capacity.
	TemporaryReducedCapacity ProblemType = "TemporaryReducedCapacity"
	// AbnormalUsageDetected: a pattern that suggests unintentional or malicious behaviour.
	AbnormalUsageDetected ProblemType = "AbnormalUsageDetected"
)

// RateLimitPolicySpec is one limit: which requests it counts (domain and
// descriptors), what it allows (limit), and what it does with the requests
// over it (mode) and tells their clients (response). The descriptor entries
// that steer the limiters (lease, idempotency, priority, accept) are not
// named here: the LimiterFleet that serves the domain declares them once
// (spec.entries). A later version may add spec.targetRef (Gateway API
// policy attachment) beside domain and descriptors.
// +kubebuilder:validation:XValidation:rule="!(has(self.limit) && has(self.limit.rate) && has(self.limit.rate.penalty)) || !(has(self.mode) && self.mode == 'Soft')",message="spec.limit.rate.penalty does not apply to mode Soft, which never denies: use it on the hard limit",fieldPath=".limit.rate.penalty"
// +kubebuilder:validation:XValidation:rule="!(has(self.mode) && self.mode == 'Soft') || !(has(self.response) && has(self.response.visibility) && self.response.visibility == 'Hidden')",message="spec.mode Soft is not supported with spec.response.visibility Hidden: the mark on the requests over a soft limit would show its threshold; use mode Shadow for a limit that only operators see",fieldPath=".mode"
type RateLimitPolicySpec struct {
	// domain is the Envoy rate limit service domain this limit answers, such as
	// "payments-api". Requests for other domains never match it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Domain string `json:"domain"`

	// descriptors select the requests this limit counts. A request matches
	// when it carries every entry. An entry without a value keeps one
	// counter per distinct value of its key; an entry with a value matches
	// only that value. Keys are unique within a policy. 1 to 8 entries.
	// +required
	// +listType=map
	// +listMapKey=key
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	Descriptors []Descriptor `json:"descriptors"`

	// limit is what the policy allows: a rate (units per period) or a
	// concurrency (requests in flight at once).
	// +required
	Limit Limit `json:"limit"`

	// mode is what the policy does with the requests over its limit:
	// Enforce denies them; Soft allows and marks them (the
	// X-Sluice-Soft-Limit header, naming the policy, on the answer and, over
	// RLS, on the request Envoy forwards upstream) and counts them
	// (status.enforcement.softLimited), so that an application can degrade
	// before a hard limit denies; Shadow counts them and logs would-be
	// denials, and tells no client anything. A Soft policy refuses no cost
	// and is never reported in the rate-limit headers. Defaults to Enforce.
	// +optional
	// +kubebuilder:default=Enforce
	Mode *Mode `json:"mode,omitempty"`

	// failureMode is what the limiter answers when it cannot reach its store:
	// Open allows, Closed denies, and Local enforces an approximate per-pod share
	// (limit / ready pods) in memory. Defaults to Open.
	// +optional
	// +kubebuilder:default=Open
	FailureMode *FailureMode `json:"failureMode,omitempty"`

	// response is what clients are told about this policy: whether they
	// see its numbers, and the problem details of its denials. Without it,
	// the policy is Visible and its denials are QuotaExceeded without
	// detail. (A penalized key's status and reason are spec.limit.rate.penalty's.)
	// +optional
	Response *Response `json:"response,omitempty"`
}

// Descriptor is one entry of an Envoy rate limit descriptor.
type Descriptor struct {
	// key is the descriptor key, such as "user_id" or "path".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`

	// value, when set, matches only requests whose entry for key is exactly this
	// value. When omitted, every value matches and each one gets its own counter.
	// At most 1024 characters.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Value *string `json:"value,omitempty"`
}

// Limit is a rate or a concurrency: set type and the member of that name.
// +union
// +kubebuilder:validation:XValidation:rule="self.type != 'Rate' || has(self.rate)",message="spec.limit must set the member its type names, and only it: rate with type Rate, concurrency with type Concurrency",fieldPath=".rate"
// +kubebuilder:validation:XValidation:rule="self.type != 'Concurrency' || has(self.concurrency)",message="spec.limit must set the member its type names, and only it: rate with type Rate, concurrency with type Concurrency",fieldPath=".concurrency"
// +kubebuilder:validation:XValidation:rule="!has(self.rate) || self.type == 'Rate'",message="spec.limit must set the member its type names, and only it: rate with type Rate, concurrency with type Concurrency",fieldPath=".rate"
// +kubebuilder:validation:XValidation:rule="!has(self.concurrency) || self.type == 'Concurrency'",message="spec.limit must set the member its type names, and only it: rate with type Rate, concurrency with type Concurrency",fieldPath=".concurrency"
type Limit struct {
	// type is Rate (units per period, in spec.limit.rate) or Concurrency
	// (requests in flight at once, in spec.limit.concurrency).
	// +required
	// +unionDiscriminator
	Type LimitType `json:"type"`

	// rate is how many units a counter allows per period. Only with type Rate.
	// +optional
	Rate *RateLimit `json:"rate,omitempty"`

	// concurrency is how many requests of a counter may be in flight at
	// once. Only with type Concurrency.
	// +optional
	Concurrency *ConcurrencyLimit `json:"concurrency,omitempty"`
}

// The rules of RateLimit, and those of Limit and RateLimitPolicySpec that
// name features, are the table of features.go (Features), one rule per
// refusal, each on the member it refuses, with the table's reason as its
// message: change both together (TestFeatureParity holds them to it).

// RateLimit is limit units per period, or per calendar window, counted by
// an algorithm, with what a request may spend and how.
// +kubebuilder:validation:XValidation:rule="has(self.period) || has(self.calendar)",message="spec.limit.rate takes period, or calendar instead of it: set exactly one",fieldPath=".period"
// +kubebuilder:validation:XValidation:rule="!has(self.cost) || !has(self.cost.max) || self.cost.max <= (has(self.burst) ? self.burst : self.limit)",message="spec.limit.rate.cost.max must not exceed the capacity: burst, or limit without it",fieldPath=".cost.max"
// +kubebuilder:validation:XValidation:rule="!has(self.period) || !has(self.calendar)",message="spec.limit.rate takes period, or calendar instead of it: set exactly one",fieldPath=".period"
// +kubebuilder:validation:XValidation:rule="!has(self.calendar) || self.algorithm in ['FixedWindow']",message="spec.limit.rate.calendar applies only to FixedWindow",fieldPath=".calendar"
// +kubebuilder:validation:XValidation:rule="!has(self.burst) || self.algorithm in ['TokenBucket', 'GCRA']",message="spec.limit.rate.burst applies only to TokenBucket and GCRA",fieldPath=".burst"
// +kubebuilder:validation:XValidation:rule="!(has(self.limit) && self.limit > 10000) || self.algorithm in ['TokenBucket', 'GCRA', 'SlidingWindow', 'FixedWindow']",message="spec.limit.rate.limit may be at most 10000 for SlidingLog, which keeps one entry per admitted request: use SlidingWindow or TokenBucket/GCRA for larger limits",fieldPath=".limit"
// +kubebuilder:validation:XValidation:rule="!(has(self.cost) && has(self.cost.reserve)) || self.algorithm in ['TokenBucket', 'GCRA', 'SlidingWindow', 'FixedWindow']",message="spec.limit.rate.cost.reserve is not supported with SlidingLog, whose log cannot be charged after the fact",fieldPath=".cost.reserve"
// +kubebuilder:validation:XValidation:rule="!has(self.localTier) || self.algorithm in ['TokenBucket', 'GCRA', 'SlidingWindow', 'FixedWindow']",message="spec.limit.rate.localTier is not supported with SlidingLog, which stays exact",fieldPath=".localTier"
// +kubebuilder:validation:XValidation:rule="!has(self.localTier) || !(has(self.calendar) || has(self.priority) || (has(self.cost) && has(self.cost.reserve)) || has(self.penalty))",message="spec.limit.rate.localTier is not supported with calendar, priority, cost.reserve or penalty, which need the store's exact count",fieldPath=".localTier"
// +kubebuilder:validation:XValidation:rule="!has(self.penalty) || !(has(self.cost) && has(self.cost.reserve))",message="spec.limit.rate.penalty is not supported with cost.reserve: a reservation holds what it takes apart from the exact decision that counts a penalty's denials",fieldPath=".penalty"
// +kubebuilder:validation:XValidation:rule="!(has(self.scope) && self.scope == 'Global') || self.algorithm in ['TokenBucket', 'GCRA', 'SlidingWindow', 'FixedWindow']",message="spec.limit.rate.scope Global is not supported with SlidingLog, which stays exact: use SlidingWindow, FixedWindow, TokenBucket or GCRA",fieldPath=".scope"
// +kubebuilder:validation:XValidation:rule="!(has(self.scope) && self.scope == 'Global') || !(has(self.localTier) || (has(self.cost) && has(self.cost.reserve)) || has(self.penalty) || has(self.priority) || has(self.calendar))",message="spec.limit.rate.scope Global is not supported with localTier, cost.reserve, penalty, priority or calendar: a region spends grants taken from the key's home region, which these would need counted exactly there",fieldPath=".scope"
// +kubebuilder:validation:XValidation:rule="!has(self.requestOverride) || self.algorithm in ['TokenBucket', 'GCRA', 'SlidingWindow', 'FixedWindow']",message="spec.limit.rate.requestOverride needs a fixed period and is not supported with calendar, SlidingLog, burst, localTier, cost.reserve or scope Global: a request's own limit replaces limit (and the bucket size) for that request only, which these can't honour",fieldPath=".requestOverride"
// +kubebuilder:validation:XValidation:rule="!has(self.requestOverride) || !(has(self.calendar) || has(self.burst) || has(self.localTier) || (has(self.cost) && has(self.cost.reserve)) || (has(self.scope) && self.scope == 'Global'))",message="spec.limit.rate.requestOverride needs a fixed period and is not supported with calendar, SlidingLog, burst, localTier, cost.reserve or scope Global: a request's own limit replaces limit (and the bucket size) for that request only, which these can't honour",fieldPath=".requestOverride"
type RateLimit struct {
	// algorithm is the counting algorithm. Defaults to TokenBucket.
	// +optional
	// +kubebuilder:default=TokenBucket
	Algorithm *Algorithm `json:"algorithm,omitempty"`

	// limit is the number of units allowed per period, from 1 to 1000000000
	// (10000 for SlidingLog).
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	Limit int64 `json:"limit"`

	// period is the window or refill interval, from 1s to 720h, such as
	// "1s", "1m" or "1h30m". Exactly one of period and calendar.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('720h')",message="period must be between 1s and 720h"
	Period *Duration `json:"period,omitempty"`

	// calendar, instead of period, makes a FixedWindow's windows calendar
	// periods in a time zone, the way billing quotas are written ("10,000
	// calls per day"). Only with algorithm FixedWindow.
	// +optional
	Calendar *Calendar `json:"calendar,omitempty"`

	// burst is the bucket size in units: how many can be spent at once after an
	// idle period. Only for TokenBucket and GCRA. Defaults to limit.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	Burst *int64 `json:"burst,omitempty"`

	// cost is what one request may spend, and whether it spends it in two
	// steps (reserve, then settle). Each request's cost is its descriptor's
	// hits_addend (1 without it).
	// +optional
	Cost *Cost `json:"cost,omitempty"`

	// localTier turns on two-tier mode: each pod is granted chunks of units
	// from the store and spends them locally, trading a bounded overshoot
	// for fewer store calls. Off when omitted. Not with SlidingLog,
	// calendar, priority, cost.reserve or penalty.
	// +optional
	LocalTier *LocalTier `json:"localTier,omitempty"`

	// priority sheds low-priority requests first as a counter fills. Not
	// with localTier.
	// +optional
	Priority *PriorityShedding `json:"priority,omitempty"`

	// penalty denies a key for a while once it has gone over its limit (or
	// over it a number of times within a window), whatever it sends
	// meanwhile, with its own status and reason. Not with localTier or
	// cost.reserve, nor with mode Soft (which never denies).
	// +optional
	Penalty *Penalty `json:"penalty,omitempty"`
	// scope is where the counter lives: Region (the default) counts in the
	// region's own store, so each region enforces the whole limit on its
	// own traffic; Global counts a key once across all the regions of the
	// fleet's spec.regions, each region spending grants taken from the
	// key's home region. Global is for TokenBucket, GCRA, FixedWindow and
	// SlidingWindow, without localTier, cost.reserve, penalty, priority or
	// calendar.
	// +optional
	Scope *RegionScope `json:"scope,omitempty"`

	// requestOverride opts the policy in to a request's own limit: the RLS
	// descriptor's limit field (requests_per_unit per unit, which Envoy
	// sets from dynamic metadata, such as a tenant's plan from an auth
	// service) replaces limit for that request, converted to the policy's
	// period and never above requestOverride.maximum. Off when omitted: a
	// request's own limit is then ignored. Only with a period (not
	// calendar), and not with SlidingLog, burst, localTier, cost.reserve or
	// scope Global.
	// +optional
	RequestOverride *RequestOverride `json:"requestOverride,omitempty"`
}

// RequestOverride bounds the limit a request may set for itself.
type RequestOverride struct {
	// maximum is the largest limit a request may set, in units per the
	// policy's own period (spec.limit.rate.period), from 1 to 1000000000.
	// A request's limit is converted to that period (rounded down) and a
	// limit above maximum is clamped to it; a limit of 0 (or one that
	// rounds down to 0) denies the request, with a reason.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	Maximum int64 `json:"maximum"`
}

// Calendar is a calendar window of a FixedWindow: Day (midnight to
// midnight), Week (Monday midnight to Monday midnight, ISO 8601) or Month
// (the first of the month at midnight to the next), in a time zone. A month
// holds 28 to 31 days, and a day 23 or 25 hours when daylight saving time
// starts or ends.
type Calendar struct {
	// period is Day, Week or Month.
	// +required
	Period CalendarPeriod `json:"period"`

	// timeZone is the IANA time zone of the windows, such as "Europe/Paris"
	// or "America/New_York". Defaults to UTC.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$') && self != 'Local'",message="timeZone must be an IANA time zone name such as Europe/Paris or UTC"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$') || self == 'Local' || timestamp('2000-01-01T00:00:00Z').getFullYear(self) > 0",message="timeZone must be a time zone of the IANA database, such as Europe/Paris or UTC"
	TimeZone *string `json:"timeZone,omitempty"`
}

// Cost is what one request may spend on a rate, and how.
type Cost struct {
	// max is the most units one request may spend on this limit: a request
	// whose cost is above it is denied with a reason naming the policy and
	// the cap, and spends nothing, so that one caller can't empty a counter
	// in one request. From 1 to the capacity (burst, or limit without it);
	// defaults to the capacity. Shadow policies, and every policy while
	// enforcement is disabled, refuse nothing.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	Max *int64 `json:"max,omitempty"`

	// reserve takes each request's cost in two steps, as Envoy Gateway's
	// request and response costs do: the check reserves an estimate (the
	// check's cost; an estimate of 0 reserves 1 unit), denied when it does
	// not fit, and the request's end settles the actual cost (for an LLM
	// request: the tokens it really used), refunding or charging the
	// difference. The lease entry that carries the reservation ID at the
	// request's end is the fleet's (spec.entries.lease, sluice_lease by
	// default). Not with SlidingLog, localTier or penalty.
	// +optional
	Reserve *Reserve `json:"reserve,omitempty"`
}

// Reserve configures reserve-then-settle costs.
type Reserve struct {
	// expireAfter is how long a reservation waits for its settlement, from
	// 1s to 24h: one never settled is settled at its estimate then. Longer
	// than the longest request. Defaults to 10m.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="expireAfter must be between 1s and 24h"
	ExpireAfter *Duration `json:"expireAfter,omitempty"`
}

// LocalTier configures two-tier mode.
type LocalTier struct {
	// ttl is how long a pod keeps a granted chunk before it returns the
	// unused units, from 100ms to 1m. Defaults to 2s.
	// +optional
	// +kubebuilder:default="2s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('100ms') && duration(self) <= duration('1m')",message="ttl must be between 100ms and 1m"
	TTL *Duration `json:"ttl,omitempty"`

	// maxOvershoot caps how many units the fleet may admit above the exact
	// algorithm, over any interval, while pods hold granted chunks: a count
	// from 0 to 1000000000, or a percentage of limit from "0%" to "100%".
	// Window algorithms never overshoot. When omitted, pods × each pod's
	// chunk cap bounds it; status.enforcement reports the bound in force.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=4
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 && self <= 1000000000 : self.matches('^(100|[1-9]?[0-9])%$')",message="maxOvershoot must be a count from 0 to 1000000000 or a percentage from 0% to 100%"
	MaxOvershoot *intstr.IntOrString `json:"maxOvershoot,omitempty"`
}

// ConcurrencyLimit limits the requests of a counter in flight at once: each
// takes a slot, released when the request ends (Envoy's call at stream end
// carries the fleet's lease entry, spec.entries.lease, sluice_lease by
// default) or when its lease expires.
type ConcurrencyLimit struct {
	// maxInFlight is the most requests of one counter in flight at once,
	// from 1 to 10000.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxInFlight int64 `json:"maxInFlight"`

	// leaseDuration is how long a slot that is never released stays taken,
	// above 0 and at most 24h: a crashed gateway or client must not hold
	// slots for ever. Longer than the longest request. Defaults to 5m.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('24h')",message="leaseDuration must be above 0s and at most 24h"
	LeaseDuration *Duration `json:"leaseDuration,omitempty"`

	// priority sheds low-priority requests first as the slots fill.
	// +optional
	Priority *PriorityShedding `json:"priority,omitempty"`
}

// PriorityShedding sheds low-priority requests first as a counter fills:
// every priority spends the one counter of the policy, and a request is
// admitted only while the counter's usage, with its cost, stays within its
// priority's share of the capacity. The descriptor entry that carries a
// request's priority is the fleet's (spec.entries.priority, "priority" by
// default); the gateway must fill it from the caller's authenticated
// identity, never from a client header.
// +kubebuilder:validation:XValidation:rule="self.levels.exists(l, l.value == self.default)",message="priority.default must be the value of one of priority.levels",fieldPath=".default"
type PriorityShedding struct {
	// levels are the priorities, highest first, each with the share of the
	// capacity it may use. Values are unique; shares must not increase down
	// the list. 1 to 16 levels.
	// +required
	// +listType=map
	// +listMapKey=value
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.map(l, -l.share).isSorted()",message="priority.levels' shares must not increase from one level to the next: list the highest priority first"
	Levels []PriorityLevel `json:"levels"`

	// default is the level (one of levels' values) of a request whose
	// priority entry is missing or names no level.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Default string `json:"default"`
}

// PriorityLevel is one priority and its share of the capacity.
type PriorityLevel struct {
	// value is the priority entry's value, such as "critical" or "batch".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Value string `json:"value"`

	// share is the percentage of the capacity (burst, limit, or
	// maxInFlight) that requests of this priority may use, from 0 to 100,
	// rounded down. 100 may use it all; 0 is always shed.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Share int32 `json:"share"`
}

// Penalty denies a key that went over its limit for a while, whatever it
// sends meanwhile: once the key is denied after times within a window of
// within, it is denied for duration with its own status and reason. The key
// it bans must come from the gateway's authenticated identity or its own
// view of the client, never from a client header.
type Penalty struct {
	// duration is how long a penalized key is denied, from 1s to 720h
	// (30 days), such as "10m".
	// +required
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('720h')",message="duration must be between 1s and 720h (30 days)"
	Duration Duration `json:"duration"`

	// after is how many strikes of the key within the window start a
	// penalty, from 1 to 1000. Defaults to 3. A strike is a denial that the
	// key's own traffic made at the full capacity.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	After *int32 `json:"after,omitempty"`

	// within is the window in which a key's denials are counted, from its
	// first denial, from 1s to 720h. Defaults to 1m.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('720h')",message="within must be between 1s and 720h"
	Within *Duration `json:"within,omitempty"`

	// status is the HTTP status of a penalized request's answer on the HTTP
	// check and forward-auth, from 400 to 599. Defaults to 403.
	// +optional
	// +kubebuilder:validation:Minimum=400
	// +kubebuilder:validation:Maximum=599
	Status *int32 `json:"status,omitempty"`

	// reason is the X-Sluice-Reason header (and the RLS dynamic metadata's
	// reason) of a penalized request's answer: printable ASCII, at most 256
	// characters. Defaults to "penalized by <namespace>/<name> for
	// <duration>", or "penalized for <duration>" for a Hidden policy.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self.matches('^[ -~]+$')",message="reason must be printable ASCII: it is sent as a header"
	Reason *string `json:"reason,omitempty"`
}

// Response is what clients are told about a policy.
type Response struct {
	// visibility says whether clients are told this policy's numbers.
	// Visible: its limit, remaining quota and reset show in the rate-limit
	// headers, RLS descriptor statuses and the status peek, and its name in
	// problem details. Hidden: none of these, so that a security limit does
	// not tell an attacker its threshold; it still denies, with
	// Retry-After. Visible when omitted.
	// +optional
	Visibility *Visibility `json:"visibility,omitempty"`

	// problem shapes the problem details (RFC 9457) that HTTP clients
	// accepting application/problem+json get when this policy denies them.
	// +optional
	Problem *Problem `json:"problem,omitempty"`
}

// Problem shapes the problem details (RFC 9457) of the policy's denials.
type Problem struct {
	// type is the problem type of draft-ietf-httpapi-ratelimit-headers that
	// a denial by this policy answers with. QuotaExceeded when omitted.
	// +optional
	Type *ProblemType `json:"type,omitempty"`

	// detail is the problem's "detail" member: one line of printable text,
	// 1 to 256 characters. No detail member when omitted.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('[\\\\x00-\\\\x1f\\\\x7f]')",message="detail must be one line of printable text: no control characters"
	Detail *string `json:"detail,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=ratelimitpolicies,scope=Namespaced,shortName=rlp,categories=sluice
// +kubebuilder:printcolumn:name="Domain",type=string,JSONPath=`.spec.domain`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.limit.type`
// +kubebuilder:printcolumn:name="Algorithm",type=string,JSONPath=`.spec.limit.rate.algorithm`
// +kubebuilder:printcolumn:name="Limit",type=integer,JSONPath=`.spec.limit.rate.limit`
// +kubebuilder:printcolumn:name="Period",type=string,JSONPath=`.spec.limit.rate.period`
// +kubebuilder:printcolumn:name="Calendar",type=string,JSONPath=`.spec.limit.rate.calendar.period`,priority=1
// +kubebuilder:printcolumn:name="MaxInFlight",type=integer,JSONPath=`.spec.limit.concurrency.maxInFlight`,priority=1
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Enforced",type=string,JSONPath=`.status.conditions[?(@.type=="Enforced")].status`
// +kubebuilder:printcolumn:name="Allowed",type=integer,JSONPath=`.status.enforcement.allowed`
// +kubebuilder:printcolumn:name="Limited",type=integer,JSONPath=`.status.enforcement.limited`
// +kubebuilder:printcolumn:name="Shadow",type=integer,JSONPath=`.status.enforcement.shadowLimited`
// +kubebuilder:printcolumn:name="SoftLimited",type=integer,JSONPath=`.status.enforcement.softLimited`,priority=1
// +kubebuilder:printcolumn:name="FailedOpen",type=integer,JSONPath=`.status.enforcement.failedOpen`
// +kubebuilder:printcolumn:name="FailedClosed",type=integer,JSONPath=`.status.enforcement.failedClosed`,priority=1
// +kubebuilder:printcolumn:name="LocalFallback",type=integer,JSONPath=`.status.enforcement.localFallback`,priority=1
// +kubebuilder:printcolumn:name="InFlight",type=integer,JSONPath=`.status.enforcement.inFlight`,priority=1
// +kubebuilder:printcolumn:name="Released",type=integer,JSONPath=`.status.enforcement.released`,priority=1
// +kubebuilder:printcolumn:name="Penalized",type=integer,JSONPath=`.status.enforcement.penalized`,priority=1
// +kubebuilder:printcolumn:name="Degraded",type=string,JSONPath=`.status.conditions[?(@.type=="Degraded")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// RateLimitPolicy is one rate limit: the requests of a domain that carry some
// descriptors, and what it allows of them.
type RateLimitPolicy struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the limit.
	// +required
	Spec RateLimitPolicySpec `json:"spec"`

	// status is what the operator observed, written by it alone.
	// +optional
	Status RateLimitPolicyStatus `json:"status,omitempty"`
}

// Hub marks v1beta1 as the version every other one converts through.
func (*RateLimitPolicy) Hub() {}

// +kubebuilder:object:root=true

// RateLimitPolicyList contains a list of RateLimitPolicy.
type RateLimitPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RateLimitPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RateLimitPolicy{}, &RateLimitPolicyList{})
}
