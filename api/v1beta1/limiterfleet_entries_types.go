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

// FleetEntries names the descriptor entries that steer the limiters in
// every domain the fleet serves, once, so that no tenant's policy picks
// them: a lease entry ends holdings, an idempotency entry replays a
// decision, a priority entry takes a share. A policy that counts on one of
// them (a descriptor key), or that names another lease entry or priority
// key than the fleet's, is not accepted (reason ReservedEntry). v1beta1
// policies name none of these entries (a v1beta1 policy uses sluice_lease
// and priority until the operator reads v1beta1); a v1alpha1 policy's
// concurrency.leaseEntry, reserve.leaseEntry and priority.key must equal
// the fleet's name when the fleet sets one.
// +kubebuilder:validation:XValidation:rule="!has(self.lease) || !has(self.idempotency) || self.lease != self.idempotency",message="spec.entries.lease and spec.entries.idempotency must differ"
// +kubebuilder:validation:XValidation:rule="!has(self.priority) || ((!has(self.lease) || self.priority != self.lease) && (!has(self.idempotency) || self.priority != self.idempotency))",message="spec.entries.priority must differ from spec.entries.lease and spec.entries.idempotency"
// +kubebuilder:validation:XValidation:rule="!has(self.accept) || ((!has(self.lease) || self.accept != self.lease) && self.accept != (has(self.idempotency) ? self.idempotency : 'idempotency_key') && (!has(self.priority) || self.accept != self.priority))",message="spec.entries.accept must differ from spec.entries.lease, spec.entries.idempotency and spec.entries.priority"
type FleetEntries struct {
	// lease is the descriptor entry key that carries a lease ID (Envoy's
	// call at stream end) in the fleet's domains, such as "sluice_lease".
	// Every holding policy's concurrency.leaseEntry or reserve.leaseEntry
	// (sluice_lease by default) must be this name.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Lease *string `json:"lease,omitempty"`

	// idempotency is the descriptor entry key whose value is an
	// idempotency key over Envoy RLS (the limiters' --idempotency-entry).
	// Defaults to idempotency_key.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Idempotency *string `json:"idempotency,omitempty"`

	// priority is the descriptor entry key that carries a request's
	// priority in the fleet's domains. Every policy's priority.key must be
	// this name. Gateways must fill it from the caller's authenticated
	// identity, never from a client header.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Priority *string `json:"priority,omitempty"`

	// accept is the descriptor entry key that carries the client's Accept
	// header over Envoy RLS (the limiters' --accept-entry): a denial whose
	// entry accepts application/problem+json gets problem details as its
	// body. Defaults to accept. When set, no policy may count on it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Accept *string `json:"accept,omitempty"`
}
