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

// This file holds the fields of a RateLimitPolicySpec that shape what
// clients are told about a policy: the problem details of its denials,
// whether they see its numbers at all, and soft limits, which mark
// requests instead of denying them.

// Visibility says whether clients are told a policy's numbers.
// +kubebuilder:validation:Enum=Visible;Hidden
type Visibility string

const (
	// Visible policies are reported to clients: their limit, remaining
	// quota and reset in the rate-limit headers, RLS statuses and the
	// status peek, and their name in problem details.
	Visible Visibility = "Visible"
	// Hidden policies deny, but tell clients nothing of themselves but
	// when to come back (Retry-After), so that their threshold can't be
	// read from an answer.
	Hidden Visibility = "Hidden"
)

// Visibilities lists every Visibility, in the order of the CRD enum.
var Visibilities = []Visibility{Visible, Hidden}

// IsSoft reports whether the policy is a soft limit: it marks the requests
// over it, and never denies.
func (s *RateLimitPolicySpec) IsSoft() bool {
	return s.Soft != nil && *s.Soft
}

// IsHidden reports whether visibility is Hidden.
func (s *RateLimitPolicySpec) IsHidden() bool {
	return s.Visibility != nil && *s.Visibility == Hidden
}

// ProblemType names one problem type of draft-ietf-httpapi-ratelimit-headers
// (section "Problem Types"), sent to HTTP clients that accept
// application/problem+json when a policy denies them.
// +kubebuilder:validation:Enum=QuotaExceeded;TemporaryReducedCapacity;AbnormalUsageDetected
type ProblemType string

const (
	// QuotaExceeded: the client's requests exceed one or more quota
	// policies.
	QuotaExceeded ProblemType = "QuotaExceeded"
	// TemporaryReducedCapacity: the requests can't be served because of a
	// temporary reduction in capacity, such as a fleet-wide load shedder.
	TemporaryReducedCapacity ProblemType = "TemporaryReducedCapacity"
	// AbnormalUsageDetected: the requests follow a pattern that suggests
	// unintentional or malicious behaviour, such as a security limit.
	AbnormalUsageDetected ProblemType = "AbnormalUsageDetected"
)

// ProblemTypes lists every ProblemType, in the order of the CRD enum.
var ProblemTypes = []ProblemType{QuotaExceeded, TemporaryReducedCapacity, AbnormalUsageDetected}

// Problem shapes the problem details (RFC 9457) of the policy's denials.
type Problem struct {
	// type is the problem type of the draft that a denial by this policy
	// answers with: QuotaExceeded, TemporaryReducedCapacity or
	// AbnormalUsageDetected. Defaults to QuotaExceeded.
	// +optional
	Type *ProblemType `json:"type,omitempty"`

	// detail is the problem's "detail" member: text for people, such as
	// where to ask for a larger quota. One line of printable text, 1 to 256
	// characters. No detail member when omitted.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('[\\\\x00-\\\\x1f\\\\x7f]')",message="detail must be one line of printable text: no control characters"
	Detail *string `json:"detail,omitempty"`
}

// MaxProblemDetailLength bounds spec.problem.detail, in characters.
const MaxProblemDetailLength = 256

// EffectiveProblemType returns problem.type, or QuotaExceeded when unset.
func (s *RateLimitPolicySpec) EffectiveProblemType() ProblemType {
	if s.Problem == nil || s.Problem.Type == nil || *s.Problem.Type == "" {
		return QuotaExceeded
	}
	return *s.Problem.Type
}

// ProblemDetail returns problem.detail, or "" when unset.
func (s *RateLimitPolicySpec) ProblemDetail() string {
	if s.Problem == nil || s.Problem.Detail == nil {
		return ""
	}
	return *s.Problem.Detail
}
