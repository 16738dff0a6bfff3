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
)

// The status of a RateLimitPolicy is one definition for both versions:
// v1alpha1 names these types by alias, so the two can't drift and the
// conversion copies the status as it is.

// RateLimitPolicyStatus is the observed state of a RateLimitPolicy.
type RateLimitPolicyStatus struct {
	// observedGeneration is the metadata.generation the operator last reconciled.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions are Accepted, Enforced and Degraded.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// enforcement sums the decisions of every limiter pod for this policy over
	// the last window.
	// +optional
	Enforcement *EnforcementStatus `json:"enforcement,omitempty"`

	// fleets lists the LimiterFleets that select this policy, and how far each
	// one has loaded it.
	// +optional
	// +listType=map
	// +listMapKey=namespace
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Fleets []FleetStatus `json:"fleets,omitempty"`
}

// EnforcementStatus counts decisions over a recent window, summed over pods.
type EnforcementStatus struct {
	// allowed is the number of requests allowed in the window.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Allowed *int64 `json:"allowed,omitempty"`

	// limited is the number of requests denied in the window.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Limited *int64 `json:"limited,omitempty"`

	// shadowLimited is the number of requests a shadow policy would have denied
	// in the window.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ShadowLimited *int64 `json:"shadowLimited,omitempty"`

	// softLimited is the number of requests over a soft policy's threshold
	// in the window: allowed, and marked.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SoftLimited *int64 `json:"softLimited,omitempty"`

	// failedOpen is the number of requests allowed in the window because the
	// store could not be reached (failureMode Open): admitted uncounted.
	// +optional
	// +kubebuilder:validation:Minimum=0
	FailedOpen *int64 `json:"failedOpen,omitempty"`

	// failedClosed is the number of requests denied in the window because
	// the store could not be reached (failureMode Closed).
	// +optional
	// +kubebuilder:validation:Minimum=0
	FailedClosed *int64 `json:"failedClosed,omitempty"`

	// penalized is the number of requests denied in the window because
	// their key was penalized (spec.penalty), the denial that started a
	// penalty included. They are not in limited.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Penalized *int64 `json:"penalized,omitempty"`

	// refused is the number of requests in the window that matched the
	// policy and were not counted because of what the client sent: a cost
	// above maxCost, a value over 1 KiB, a repeated forward-auth header, a
	// malformed lease or idempotency key. They were denied with a reason
	// (when an enforcing policy matched), are in no other count, and are
	// never a strike of spec.penalty. Absent while there are none.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Refused *int64 `json:"refused,omitempty"`

	// localFallback is the number of requests decided in the window by each
	// pod's share of the limit in memory, because the store could not be
	// reached (failureMode Local).
	// +optional
	// +kubebuilder:validation:Minimum=0
	LocalFallback *int64 `json:"localFallback,omitempty"`

	// released is, for a policy that holds (Concurrency, spec.reserve), the
	// number of holdings ended in the window: slots released, reservations
	// settled, and what requests denied by another policy gave back.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Released *int64 `json:"released,omitempty"`

	// inFlight is, for a policy that holds, how many of the holdings taken
	// in the window (allowed) are not ended (released): requests still in
	// flight, or whose end never came, which free themselves when their
	// lease expires. Holdings taken before the window are not counted.
	// +optional
	// +kubebuilder:validation:Minimum=0
	InFlight *int64 `json:"inFlight,omitempty"`

	// window is the length of time the counts cover, such as "5m".
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	Window *metav1.Duration `json:"window,omitempty"`

	// updatedAt is when the counts were collected.
	// +optional
	UpdatedAt *metav1.Time `json:"updatedAt,omitempty"`

	// unreadPods names the limiter pods (host:port) of the fleets serving this
	// policy whose counts could not be read at updatedAt, and why: the counts
	// lack theirs.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=256
	UnreadPods []string `json:"unreadPods,omitempty"`

	// hottest are the policy's most requested descriptor values in the minute
	// that started at hottestSince, summed over the fleets' pods, most
	// requested first. Only when the serving fleet sets
	// spec.stats.topDescriptors; values are hashed or truncated as it says.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	Hottest []HotDescriptor `json:"hottest,omitempty"`

	// hottestSince is the start of the minute that hottest covers.
	// +optional
	HottestSince *metav1.Time `json:"hottestSince,omitempty"`

	// overshootBound is, for a policy in two-tier mode (spec.localTier), the
	// most units the fleet may admit above the exact algorithm while pods
	// spend granted chunks, as the limiters last reported it: 0 for window
	// algorithms (a grant never outlives its window), else maxOvershoot, or
	// pods × each pod's cap without it. For a policy of scope Global on a
	// fleet in regions, the most units the regions may admit above the
	// limit per period, partitions included: 2·regions·grant (the grant
	// being limit / (20·regions)) plus every region's partition share, a
	// peer's as it last said it in a grant call (100% until it has). The
	// largest any pod reports.
	// +optional
	// +kubebuilder:validation:Minimum=0
	OvershootBound *int64 `json:"overshootBound,omitempty"`
}

// HotDescriptor is one of a policy's most requested descriptor values.
type HotDescriptor struct {
	// value is "key=value" for each of the policy's descriptors without a
	// value, comma-separated, each value hashed (12 hex digits of its SHA-256)
	// or truncated.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	Value string `json:"value"`

	// requests is the number of requests with this value in the minute: an
	// upper bound, exact unless the pods saw more distinct values than
	// their sketches hold.
	// +required
	// +kubebuilder:validation:Minimum=0
	Requests int64 `json:"requests"`

	// limited is how many of them were denied, or would have been for a
	// shadow policy.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Limited int64 `json:"limited,omitempty"`
}

// FleetStatus is how far one LimiterFleet has loaded a policy.
type FleetStatus struct {
	// namespace is the namespace of the LimiterFleet.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`

	// name is the name of the LimiterFleet.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// snapshotVersion is the version (content hash) of the fleet's snapshot
	// that contains this generation of the policy.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	SnapshotVersion string `json:"snapshotVersion,omitempty"`

	// podsSynced is the number of ready limiter pods that have loaded that
	// snapshot or a later one.
	// +optional
	// +kubebuilder:validation:Minimum=0
	PodsSynced *int32 `json:"podsSynced,omitempty"`

	// podsReady is the number of ready limiter pods in the fleet.
	// +optional
	// +kubebuilder:validation:Minimum=0
	PodsReady *int32 `json:"podsReady,omitempty"`
}
