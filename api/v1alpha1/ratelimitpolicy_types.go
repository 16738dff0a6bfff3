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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// Algorithm names the counting algorithm of a limit.
// +kubebuilder:validation:Enum=TokenBucket;GCRA;SlidingWindow;FixedWindow;SlidingLog;Concurrency
type Algorithm string

const (
	// TokenBucket refills rate.limit tokens per rate.period into a bucket of burst tokens.
	TokenBucket Algorithm = "TokenBucket"
	// GCRA is the generic cell rate algorithm: a token bucket kept as one timestamp.
	GCRA Algorithm = "GCRA"
	// SlidingWindow weights the previous fixed window by its overlap with the current one.
	SlidingWindow Algorithm = "SlidingWindow"
	// FixedWindow counts requests in windows of rate.period aligned to the epoch.
	FixedWindow Algorithm = "FixedWindow"
	// SlidingLog keeps one entry per request over the last rate.period; it is
	// exact. Its rate.limit is at most 10000 (MaxSlidingLogLimit).
	SlidingLog Algorithm = "SlidingLog"
	// Concurrency limits the requests of a counter in flight at once, not
	// their rate: each takes a lease, released when the request ends (or
	// when the lease expires). It is configured by spec.concurrency, not
	// spec.rate.
	Concurrency Algorithm = "Concurrency"
)

// Algorithms lists every Algorithm, in the order of the CRD enum.
var Algorithms = []Algorithm{TokenBucket, GCRA, SlidingWindow, FixedWindow, SlidingLog, Concurrency}

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

// FailureModes lists every FailureMode, in the order of the CRD enum.
var FailureModes = []FailureMode{FailOpen, FailClosed, FailLocal}

// RateLimitPolicySpec is one limit: which requests it counts and how many it allows.
// +kubebuilder:validation:XValidation:rule="!has(self.burst) || !has(self.algorithm) || self.algorithm == 'TokenBucket' || self.algorithm == 'GCRA'",message="spec.burst applies only to TokenBucket and GCRA",fieldPath=".burst"
// +kubebuilder:validation:XValidation:rule="!has(self.localTier) || !has(self.localTier.enabled) || !self.localTier.enabled || !has(self.algorithm) || self.algorithm != 'SlidingLog'",message="spec.localTier is not supported with SlidingLog, which stays exact",fieldPath=".localTier"
// +kubebuilder:validation:XValidation:rule="!has(self.maxCost) || !has(self.rate) || self.maxCost <= (has(self.burst) ? self.burst : self.rate.limit)",message="spec.maxCost must not exceed the policy's capacity: spec.burst, or spec.rate.limit without it",fieldPath=".maxCost"
// +kubebuilder:validation:XValidation:rule="has(self.rate) || (has(self.algorithm) && self.algorithm == 'Concurrency')",message="spec.rate is required, except with algorithm Concurrency",fieldPath=".rate"
// +kubebuilder:validation:XValidation:rule="!has(self.rate) || !has(self.algorithm) || self.algorithm != 'Concurrency'",message="spec.rate does not apply to Concurrency, which limits requests in flight: set spec.concurrency.maxInFlight",fieldPath=".rate"
// +kubebuilder:validation:XValidation:rule="has(self.concurrency) == (has(self.algorithm) && self.algorithm == 'Concurrency')",message="spec.concurrency is required with algorithm Concurrency, and only with it",fieldPath=".concurrency"
// +kubebuilder:validation:XValidation:rule="!has(self.maxCost) || !has(self.algorithm) || self.algorithm != 'Concurrency'",message="spec.maxCost does not apply to Concurrency, which counts requests, not units",fieldPath=".maxCost"
// +kubebuilder:validation:XValidation:rule="!has(self.reserve) || !has(self.algorithm) || (self.algorithm != 'Concurrency' && self.algorithm != 'SlidingLog')",message="spec.reserve is not supported with Concurrency, which holds its slots already, or SlidingLog, whose log can't be charged after the fact",fieldPath=".reserve"
// +kubebuilder:validation:XValidation:rule="!has(self.localTier) || !has(self.localTier.enabled) || !self.localTier.enabled || (!has(self.reserve) && (!has(self.algorithm) || self.algorithm != 'Concurrency'))",message="spec.localTier is not supported with Concurrency or spec.reserve, which hold what they take in the store",fieldPath=".localTier"
// +kubebuilder:validation:XValidation:rule="!has(self.concurrency) || !has(self.concurrency.leaseEntry) || self.descriptors.all(d, d.key != self.concurrency.leaseEntry)",message="spec.concurrency.leaseEntry must not be one of the policy's descriptor keys",fieldPath=".concurrency.leaseEntry"
// +kubebuilder:validation:XValidation:rule="!has(self.reserve) || !has(self.reserve.leaseEntry) || self.descriptors.all(d, d.key != self.reserve.leaseEntry)",message="spec.reserve.leaseEntry must not be one of the policy's descriptor keys",fieldPath=".reserve.leaseEntry"
// +kubebuilder:validation:XValidation:rule="!has(self.soft) || !self.soft || !has(self.shadow) || !self.shadow",message="spec.soft and spec.shadow are exclusive: a soft policy marks the requests over it, a shadow one tells no client anything",fieldPath=".soft"
// +kubebuilder:validation:XValidation:rule="!has(self.soft) || !self.soft || !has(self.visibility) || self.visibility != 'Hidden'",message="spec.soft is not supported with spec.visibility Hidden: the mark on the requests over a soft limit would show its threshold; use spec.shadow for a limit that only operators see",fieldPath=".soft"
// +kubebuilder:validation:XValidation:rule="!has(self.rate) || !has(self.rate.calendar) || (has(self.algorithm) && self.algorithm == 'FixedWindow')",message="spec.rate.calendar applies only to FixedWindow",fieldPath=".rate.calendar"
// +kubebuilder:validation:XValidation:rule="!has(self.localTier) || !has(self.localTier.enabled) || !self.localTier.enabled || !has(self.rate) || !has(self.rate.calendar)",message="spec.localTier is not supported with spec.rate.calendar",fieldPath=".localTier"
// +kubebuilder:validation:XValidation:rule="!has(self.priority) || !self.descriptors.exists(d, d.key == self.priority.key)",message="spec.priority.key must not be one of spec.descriptors' keys: every priority shares the policy's counters",fieldPath=".priority.key"
// +kubebuilder:validation:XValidation:rule="!has(self.priority) || ((!has(self.concurrency) || !has(self.concurrency.leaseEntry) || self.priority.key != self.concurrency.leaseEntry) && (!has(self.reserve) || !has(self.reserve.leaseEntry) || self.priority.key != self.reserve.leaseEntry))",message="spec.priority.key must not be the policy's lease entry (spec.concurrency.leaseEntry or spec.reserve.leaseEntry, sluice_lease by default): a descriptor that carries it ends a request",fieldPath=".priority.key"
// +kubebuilder:validation:XValidation:rule="!has(self.localTier) || !has(self.localTier.enabled) || !self.localTier.enabled || !has(self.priority)",message="spec.localTier is not supported with spec.priority",fieldPath=".localTier"
// +kubebuilder:validation:XValidation:rule="!has(self.localTier) || !has(self.localTier.enabled) || !self.localTier.enabled || !has(self.penalty)",message="spec.localTier is not supported with spec.penalty",fieldPath=".localTier"
// +kubebuilder:validation:XValidation:rule="!has(self.penalty) || (!has(self.reserve) && (!has(self.algorithm) || self.algorithm != 'Concurrency'))",message="spec.penalty is not supported with Concurrency or spec.reserve: their checks hold what they take apart from the exact decision that counts a penalty's denials",fieldPath=".penalty"
// +kubebuilder:validation:XValidation:rule="!has(self.penalty) || !has(self.soft) || !self.soft",message="spec.penalty does not apply to a soft policy, which never denies: use it on the hard limit",fieldPath=".penalty"
// +kubebuilder:validation:XValidation:rule="!has(self.algorithm) || self.algorithm != 'SlidingLog' || self.rate.limit <= 10000",message="spec.rate.limit may be at most 10000 for SlidingLog, which keeps one entry per admitted request, so a counter's memory grows with the limit: use SlidingWindow (constant memory, close to exact) or TokenBucket/GCRA for larger limits",fieldPath=".rate.limit"
type RateLimitPolicySpec struct {
	// domain is the Envoy rate limit service domain this limit answers, such as
	// "payments-api". Requests for other domains never match it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Domain string `json:"domain"`

	// descriptors select the requests this limit counts. A request matches when it
	// carries every entry. An entry without a value keeps one counter per distinct
	// value of its key; an entry with a value matches only that value.
	// Keys are unique within a policy. 1 to 8 entries.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:rule="self.all(d, self.exists_one(e, e.key == d.key))",message="descriptor keys must be unique"
	Descriptors []Descriptor `json:"descriptors"`

	// algorithm is the counting algorithm. Defaults to TokenBucket.
	// +optional
	// +kubebuilder:default=TokenBucket
	Algorithm *Algorithm `json:"algorithm,omitempty"`

	// rate is how many units a counter allows per period. Required for
	// every algorithm but Concurrency, which takes spec.concurrency instead.
	// +optional
	Rate Rate `json:"rate,omitzero"`

	// concurrency configures algorithm Concurrency: how many requests of a
	// counter may be in flight at once, and how long a slot that is never
	// released stays taken. Required with Concurrency, and only with it.
	// +optional
	Concurrency *ConcurrencyLimit `json:"concurrency,omitempty"`

	// reserve takes each request's cost in two steps: at request time a
	// reservation of an estimate (the request's cost, denied when it does
	// not fit), and when the request ends its settlement at the actual cost,
	// which refunds or charges the difference (for an LLM request: the
	// tokens it really used). A reservation never settled is settled at its
	// estimate when it expires. Not with Concurrency, SlidingLog,
	// localTier or penalty.
	// +optional
	Reserve *Reserve `json:"reserve,omitempty"`

	// burst is the bucket size in units: how many can be spent at once after an
	// idle period. Only for TokenBucket and GCRA. Defaults to rate.limit.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	Burst *int64 `json:"burst,omitempty"`

	// maxCost is the most units one request may spend on this limit: a
	// request whose descriptor cost (hits_addend) is above it is refused
	// with InvalidArgument (HTTP 400) naming the policy and the cap, and
	// spends nothing, so that one caller can't empty a counter in one
	// request. From 1 to the policy's capacity (burst, or rate.limit without
	// it); defaults to the capacity. Shadow policies, and every policy while
	// enforcement is disabled, refuse nothing.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	MaxCost *int64 `json:"maxCost,omitempty"`

	// shadow, when true, evaluates and counts the limit and logs would-be denials,
	// but never denies a request. Defaults to false.
	// +optional
	// +kubebuilder:default=false
	Shadow *bool `json:"shadow,omitempty"`

	// failureMode is what the limiter answers when it cannot reach its store:
	// Open allows, Closed denies, and Local enforces an approximate per-pod share
	// (limit / ready pods) in memory. Defaults to Open.
	// +optional
	// +kubebuilder:default=Open
	FailureMode *FailureMode `json:"failureMode,omitempty"`

	// localTier turns on two-tier mode: each pod takes grants (chunks of tokens) from the
	// store and spends them locally, trading a bounded overshoot for fewer store
	// calls. Off when omitted. Not supported with SlidingLog.
	// +optional
	LocalTier *LocalTier `json:"localTier,omitempty"`

	// priority sheds low-priority requests first as a counter fills: a
	// descriptor entry carries each request's priority, and each priority
	// may use its share of the capacity (for Concurrency, of the slots
	// in flight). Not with localTier.
	// +optional
	Priority *PriorityShedding `json:"priority,omitempty"`

	// penalty denies a key for a while once it has gone over its limit (or
	// over it a number of times within a window), whatever it sends
	// meanwhile, with its own status and reason. Not with localTier, nor
	// with Concurrency or reserve (which hold what they take), nor on a
	// soft policy (which never denies).
	// +optional
	Penalty *Penalty `json:"penalty,omitempty"`

	// What clients are told (ratelimitpolicy_response_types.go).

	// visibility says whether clients are told this policy's numbers.
	// Visible: its limit, remaining quota and reset show in RateLimit,
	// RateLimit-Policy and X-RateLimit-* (when it is the most restrictive
	// visible policy), in RLS descriptor statuses and in the status peek,
	// and its name in problem details. Hidden: none of these, over RLS and
	// HTTP alike, so that a security limit does not tell an attacker its
	// threshold; it still denies, and its denial carries Retry-After, the
	// time until its counter is back to its full quota (not until the next
	// unit frees, which would tell its rate). Defaults to Visible.
	// +optional
	Visibility *Visibility `json:"visibility,omitempty"`

	// soft, when true, makes the policy a warning threshold: over it,
	// requests are allowed but marked (the X-Sluice-Soft-Limit header,
	// naming the policy, on the answer and, over RLS, on the request Envoy
	// forwards upstream; "softLimits" in the RLS dynamic metadata) and
	// counted (status.enforcement.softLimited, and sluice_decisions_total
	// with result soft_limited), so that an application can degrade before
	// a hard limit denies. A soft policy never denies, refuses no cost, and
	// is never reported in the rate-limit headers. It may have the same
	// domain and descriptors as one enforcing policy, its hard limit. Not
	// with shadow, visibility Hidden or penalty. Defaults to false.
	// +optional
	Soft *bool `json:"soft,omitempty"`

	// problem shapes the problem details (RFC 9457) that HTTP clients
	// accepting application/problem+json get when this policy denies them:
	// the problem type of draft-ietf-httpapi-ratelimit-headers and a detail.
	// Without it, the type is QuotaExceeded and there is no detail.
	// +optional
	Problem *Problem `json:"problem,omitempty"`
}

// ConcurrencyLimit configures algorithm Concurrency.
type ConcurrencyLimit struct {
	// maxInFlight is the most requests of one counter in flight at once:
	// each holds a slot from the check that admits it until it is released
	// (or its lease expires). From 1 to 10000.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxInFlight int64 `json:"maxInFlight"`

	// leaseDuration is how long a slot that is never released stays taken,
	// as a Go duration above 0 and at most 24h: a crashed gateway or client
	// must not hold slots for ever. Longer than the longest request.
	// Defaults to 5m.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="leaseDuration must be a Go duration such as 30s or 5m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) > duration('0s') && duration(self) <= duration('24h'))",message="leaseDuration must be above 0s and at most 24h"
	LeaseDuration *metav1.Duration `json:"leaseDuration,omitempty"`

	// leaseEntry is the descriptor entry key whose value is a lease ID: a
	// descriptor that carries it releases that lease instead of taking a
	// slot (Envoy's call at stream end, with the ID the check answered in
	// its dynamic metadata); every other policy still decides it. It applies
	// to the whole domain: a policy whose lease entry is a key another policy
	// of the domain counts on (descriptors, priority.key), or the reverse,
	// is not accepted (Conflict). Defaults to sluice_lease.
	// +optional
	// +kubebuilder:default=sluice_lease
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	LeaseEntry *string `json:"leaseEntry,omitempty"`
}

// Reserve configures reserve-then-settle costs.
type Reserve struct {
	// expireAfter is how long a reservation waits for its settlement, as a
	// Go duration from 1s to 24h: one never settled is settled at its
	// estimate then. Longer than the longest request. Defaults to 10m.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="expireAfter must be a Go duration such as 30s or 10m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('24h'))",message="expireAfter must be between 1s and 24h"
	ExpireAfter *metav1.Duration `json:"expireAfter,omitempty"`

	// leaseEntry is the descriptor entry key whose value is a reservation
	// ID: a descriptor that carries it settles that reservation at its cost
	// (hits_addend) instead of reserving (Envoy's call at stream end);
	// every other policy still decides it. It applies to the whole domain,
	// as concurrency.leaseEntry does. An estimate (the check's cost) of 0
	// reserves 1 unit. Defaults to sluice_lease.
	// +optional
	// +kubebuilder:default=sluice_lease
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	LeaseEntry *string `json:"leaseEntry,omitempty"`
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

// Rate is limit units per period, or per calendar period.
// +kubebuilder:validation:XValidation:rule="has(self.period) || has(self.calendar)",message="spec.rate.period is required, unless spec.rate.calendar is set",fieldPath=".period"
// +kubebuilder:validation:XValidation:rule="!has(self.period) || !has(self.calendar)",message="spec.rate.calendar replaces spec.rate.period: set only one of them",fieldPath=".calendar"
// +kubebuilder:validation:XValidation:rule="!has(self.timeZone) || has(self.calendar)",message="spec.rate.timeZone applies only with spec.rate.calendar",fieldPath=".timeZone"
type Rate struct {
	// limit is the number of units allowed per period, from 1 to 1000000000.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	Limit int64 `json:"limit"`

	// period is the window or refill interval as a Go duration, such as "1s",
	// "1m" or "1h30m", from 1s to 720h. Required unless calendar is set.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="period must be a Go duration such as 30s, 1m or 1h30m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('720h'))",message="period must be between 1s and 720h"
	Period metav1.Duration `json:"period,omitzero"`

	// calendar, instead of period, makes a FixedWindow's windows calendar
	// periods in timeZone, the way billing quotas are written ("10,000
	// calls per day"): Day (midnight to midnight), Week (Monday midnight to
	// Monday midnight, ISO 8601) or Month (the first of the month at
	// midnight to the next). Windows follow the calendar: a month holds 28
	// to 31 days, and a day 23 or 25 hours when daylight saving time starts
	// or ends. Only with algorithm FixedWindow.
	// +optional
	Calendar *CalendarPeriod `json:"calendar,omitempty"`

	// timeZone is the IANA time zone of calendar's windows, such as
	// "Europe/Paris" or "America/New_York". Defaults to UTC. Only with
	// calendar.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$') && self != 'Local'",message="timeZone must be an IANA time zone name such as Europe/Paris or UTC"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$') || self == 'Local' || timestamp('2000-01-01T00:00:00Z').getFullYear(self) > 0",message="timeZone must be a time zone of the IANA database, such as Europe/Paris or UTC"
	TimeZone *string `json:"timeZone,omitempty"`
}

// LocalTier configures two-tier mode.
type LocalTier struct {
	// enabled turns two-tier mode on. Defaults to false.
	// +optional
	// +kubebuilder:default=false
	Enabled *bool `json:"enabled,omitempty"`

	// ttl is how long a pod keeps a granted chunk before it returns the unused
	// tokens, as a Go duration from 100ms to 1m. Defaults to 2s.
	// +optional
	// +kubebuilder:default="2s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="ttl must be a Go duration such as 500ms or 2s"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('100ms') && duration(self) <= duration('1m'))",message="ttl must be between 100ms and 1m"
	TTL *metav1.Duration `json:"ttl,omitempty"`

	// maxOvershoot caps how many units the fleet may admit above the exact
	// algorithm, over any interval, while pods hold granted chunks: a count
	// from 0 to 1000000000, or a percentage of rate.limit from "0%" to "100%".
	// Window algorithms never overshoot (a grant ends with its window). When
	// omitted, pods × each pod's chunk cap bounds it; status.enforcement
	// reports the bound in force.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=4
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 && self <= 1000000000 : self.matches('^(100|[1-9]?[0-9])%$')",message="maxOvershoot must be a count from 0 to 1000000000 or a percentage from 0% to 100%"
	MaxOvershoot *intstr.IntOrString `json:"maxOvershoot,omitempty"`
}

// The status types are v1beta1's, one definition for both versions (the
// conversion copies status as it is).
type (
	// RateLimitPolicyStatus is the observed state of a RateLimitPolicy.
	RateLimitPolicyStatus = v1beta1.RateLimitPolicyStatus
	// EnforcementStatus sums the limiters' decisions for a policy.
	EnforcementStatus = v1beta1.EnforcementStatus
	// HotDescriptor is one of a policy's most requested descriptor values.
	HotDescriptor = v1beta1.HotDescriptor
	// FleetStatus is what one fleet that selects a policy reports of it.
	FleetStatus = v1beta1.FleetStatus
)

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=ratelimitpolicies,scope=Namespaced,shortName=rlp,categories=sluice
// +kubebuilder:printcolumn:name="Domain",type=string,JSONPath=`.spec.domain`
// +kubebuilder:printcolumn:name="Algorithm",type=string,JSONPath=`.spec.algorithm`
// +kubebuilder:printcolumn:name="Limit",type=integer,JSONPath=`.spec.rate.limit`
// +kubebuilder:printcolumn:name="Period",type=string,JSONPath=`.spec.rate.period`
// +kubebuilder:printcolumn:name="Calendar",type=string,JSONPath=`.spec.rate.calendar`,priority=1
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
// descriptors, the algorithm that counts them, and how many it allows.
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
