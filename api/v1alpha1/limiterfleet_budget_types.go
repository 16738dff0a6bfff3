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

import "github.com/sluice-dev/sluice/api/v1beta1"

// Defaults of a namespace's budget: v1beta1's (see
// v1beta1/limiterfleet_budget_defaults.go).
const (
	DefaultMaxPoliciesPerNamespace         = v1beta1.DefaultMaxPoliciesPerNamespace
	DefaultMaxSnapshotBytesPerNamespace    = v1beta1.DefaultMaxSnapshotBytesPerNamespace
	DefaultMaxPoliciesPerRequest           = v1beta1.DefaultMaxPoliciesPerRequest
	DefaultStoreCallsPerSecondPerNamespace = v1beta1.DefaultStoreCallsPerSecondPerNamespace
)

// TenantBudget is what one namespace's policies may cost a fleet: its
// snapshot, and the work of its limiter pods. Every field is optional and
// has a default.
type TenantBudget struct {
	// maxPoliciesPerNamespace is how many of a namespace's policies the
	// fleet's snapshot holds, from 1 to 10000: past it, the namespace's
	// newest policies are refused (Accepted=False, reason SnapshotFull),
	// never another namespace's. Defaults to 200.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxPoliciesPerNamespace *int32 `json:"maxPoliciesPerNamespace,omitempty"`

	// maxSnapshotBytesPerNamespace is how many bytes of the snapshot
	// document (the policies' canonical JSON, before compression) a
	// namespace's policies may take, from 1024 to 16777216: past it, the
	// namespace's newest policies are refused (Accepted=False, reason
	// SnapshotFull), never another namespace's. Defaults to 262144 (256 KiB,
	// a quarter of the snapshot ConfigMap's 1 MiB). Above 1 MiB it lets one
	// namespace fill the ConfigMap, whose content is gzip-compressed past
	// 512 KiB.
	// +optional
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=16777216
	MaxSnapshotBytesPerNamespace *int32 `json:"maxSnapshotBytesPerNamespace,omitempty"`

	// maxPoliciesPerRequest is how many of a namespace's policies one
	// request (all its descriptors together) may match, from 1 to 1024. A
	// request that matches more is denied with a reason naming the
	// namespace and the budget, before any store call: no policy is
	// skipped silently. Defaults to 32.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	MaxPoliciesPerRequest *int32 `json:"maxPoliciesPerRequest,omitempty"`

	// storeCallsPerSecondPerNamespace is how many policy decisions against
	// the store (one per matched policy of a request) each limiter pod makes
	// per second for a namespace's policies, from 1 to 1000000, with a burst
	// of one second's worth. It is per pod: the fleet's total is this times
	// its replicas. Past it, a decision is made without the store, whatever
	// the policy's failureMode but Closed (which denies): a key the store
	// last said is over its limit stays denied until the store said it would
	// admit again, and the rest is decided against the pod's share of the
	// limit in memory, with reason "namespace store budget exceeded (...)",
	// counted in sluice_budget_exceeded_total{namespace}. Within a
	// namespace, each key is metered by two of 16 shares of the budget: one
	// key's flood takes what the others leave. Peeks (the status peek,
	// explain, a cost of 0) take nothing from it: they have a tenth of it of
	// their own. Defaults to 20000.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	StoreCallsPerSecondPerNamespace *int32 `json:"storeCallsPerSecondPerNamespace,omitempty"`
}

// TenantBudgets are the fleet's per-namespace budgets: one for every
// namespace, and overrides for some.
type TenantBudgets struct {
	// TenantBudget is every namespace's budget, unless overridden.
	TenantBudget `json:",inline"`

	// overrides give some namespaces another budget: each field an
	// override sets replaces the fleet's, and the ones it leaves out
	// default to the fleet's. At most 256, with unique namespaces.
	// +optional
	// +listType=map
	// +listMapKey=namespace
	// +kubebuilder:validation:MaxItems=256
	Overrides []TenantBudgetOverride `json:"overrides,omitempty"`
}

// TenantBudgetOverride is one namespace's budget.
type TenantBudgetOverride struct {
	// namespace is the namespace whose budget this is.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="spec.tenantBudget.overrides[].namespace must be a namespace name: lower-case letters, digits and '-'"
	Namespace string `json:"namespace"`

	TenantBudget `json:",inline"`
}

// ptrTo returns a pointer to v.
func ptrTo[T any](v T) *T { return &v }
