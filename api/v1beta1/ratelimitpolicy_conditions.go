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

// Condition types of a RateLimitPolicy.
const (
	// AcceptedCondition is True when the spec is valid, does not conflict
	// with an older policy, and fits in the snapshot of every fleet that
	// selects it, so fleets load it.
	AcceptedCondition = "Accepted"

	// EnforcedCondition is True when every ready limiter pod of every selecting
	// fleet has loaded a snapshot that contains this generation of the policy.
	EnforcedCondition = "Enforced"

	// DegradedCondition is True when limiters answer for this policy by its
	// failureMode because they cannot reach the store, or did within the
	// enforcement window (status.enforcement counts failedOpen, failedClosed
	// or localFallback): one failed-open decision keeps it True for the
	// window.
	DegradedCondition = "Degraded"
)

// Reasons for AcceptedCondition.
const (
	// AcceptedReason: the policy is valid and has no conflict.
	AcceptedReason = "Accepted"
	// InvalidSpecReason: the spec breaks a rule the API server could not check.
	InvalidSpecReason = "InvalidSpec"
	// ConflictReason: an older policy has the same domain and descriptors.
	ConflictReason = "Conflict"
	// SnapshotFullReason: a selecting fleet's snapshot would pass the
	// ConfigMap size limit with this policy; the fleet keeps its older
	// policies and refuses the newest that don't fit.
	SnapshotFullReason = "SnapshotFull"
)

// Reasons for EnforcedCondition.
const (
	// EnforcedReason: every ready pod of every selecting fleet has loaded the policy.
	EnforcedReason = "Enforced"
	// SnapshotPendingReason: some ready pods have not loaded the policy yet.
	SnapshotPendingReason = "SnapshotPending"
	// NoFleetReason: no LimiterFleet selects the policy.
	NoFleetReason = "NoFleet"
	// NotAcceptedReason: the policy is not Accepted, so no fleet loads it.
	NotAcceptedReason = "NotAccepted"
	// EnforcementDisabledReason: a selecting fleet has enforcement Disabled.
	EnforcementDisabledReason = "EnforcementDisabled"
)

// Reasons for DegradedCondition.
const (
	// StoreAvailableReason: every limiter reaches the store, and no decision
	// of the enforcement window fell back to the failure mode.
	StoreAvailableReason = "StoreAvailable"
	// StoreUnavailableReason: some limiters fall back to the failure mode.
	StoreUnavailableReason = "StoreUnavailable"
	// FallbackDecisionsReason: every limiter reaches the store now, but
	// some decisions of the enforcement window were answered by the failure
	// mode; the message counts them.
	FallbackDecisionsReason = "FallbackDecisions"
	// BudgetExceededReason: some limiters decide the policy without the
	// store because its namespace is over its store budget (the fleet's
	// spec.tenantBudget.storeCallsPerSecondPerNamespace): failureMode
	// Closed denies, the others decide against the store's last denials
	// and the pod's share of the limit.
	BudgetExceededReason = "BudgetExceeded"
)

// Reasons for AcceptedCondition given by domain ownership (a LimiterFleet's
// spec.domains).
const (
	// DomainNotAllowedReason: no LimiterFleet allows the policy's namespace
	// to use its domain, so no fleet serves it; the message names the
	// domain and what would allow it.
	DomainNotAllowedReason = "DomainNotAllowed"
	// ReservedEntryReason: a fleet that serves the policy declares the
	// entries that steer the limiters (spec.entries), and the policy
	// counts on one of them or names another lease entry or priority key;
	// the message names the fleet, the entry and the field.
	ReservedEntryReason = "ReservedEntry"
)
