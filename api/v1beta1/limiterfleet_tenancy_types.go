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

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The walls between tenants that a platform team declares on a
// LimiterFleet, which tenants cannot write: which namespaces may use each
// rate limit domain the fleet serves (domains, in the shape of a Gateway
// API listener's allowedRoutes), and which pods may call the fleet's
// limiters (clients).

// FromNamespaces says which namespaces a domain admits.
// +kubebuilder:validation:Enum=Same;All;Selector
type FromNamespaces string

const (
	// NamespacesFromSame admits the fleet's own namespace only.
	NamespacesFromSame FromNamespaces = "Same"
	// NamespacesFromAll admits every namespace.
	NamespacesFromAll FromNamespaces = "All"
	// NamespacesFromSelector admits the namespaces whose labels match
	// allowedNamespaces.selector.
	NamespacesFromSelector FromNamespaces = "Selector"
)

// FleetDomain is one rate limit domain a fleet serves, and the namespaces
// whose RateLimitPolicies may use it.
type FleetDomain struct {
	// name is the domain, as RateLimitPolicies name it in spec.domain, such
	// as "payments-api". 1 to 253 characters.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// allowedNamespaces are the namespaces whose policies may use the
	// domain. Defaults to the fleet's own namespace (from: Same).
	// +optional
	// +kubebuilder:default={from: Same}
	AllowedNamespaces *AllowedNamespaces `json:"allowedNamespaces,omitempty"`
}

// AllowedNamespaces selects the namespaces that may use a domain, as a
// Gateway API listener's allowedRoutes.namespaces does.
// +kubebuilder:validation:XValidation:rule="(has(self.from) && self.from == 'Selector') == has(self.selector)",message="allowedNamespaces.selector is required when from is Selector, and only allowed then"
type AllowedNamespaces struct {
	// from is Same (the fleet's namespace), All (every namespace) or
	// Selector (the namespaces selector matches). Defaults to Same.
	// +optional
	// +kubebuilder:default=Same
	From *FromNamespaces `json:"from,omitempty"`

	// selector matches the labels of the namespaces that may use the
	// domain, such as {matchLabels: {team: payments}}. Required when from
	// is Selector, and only allowed then. An empty selector matches every
	// namespace.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// FleetClient selects pods that may call a fleet's limiters on their data
// ports, as a NetworkPolicy peer does: namespaceSelector alone admits every
// pod of the namespaces it selects, podSelector alone the pods it selects
// in the fleet's namespace, and both the pods podSelector selects in the
// namespaces namespaceSelector selects.
// +kubebuilder:validation:XValidation:rule="has(self.namespaceSelector) || has(self.podSelector)",message="a client needs a namespaceSelector, a podSelector or both"
type FleetClient struct {
	// namespaceSelector selects namespaces by their labels, such as
	// {matchLabels: {kubernetes.io/metadata.name: ingress}}; {} selects
	// every namespace. Unset: the fleet's namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// podSelector selects pods by their labels, such as the gateway's
	// {matchLabels: {app: envoy}}. Unset: every pod of the selected
	// namespaces.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`
}

// EffectiveFrom returns from, or Same when unset.
func (a *AllowedNamespaces) EffectiveFrom() FromNamespaces {
	if a == nil || a.From == nil || *a.From == "" {
		return NamespacesFromSame
	}
	return *a.From
}
