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
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults and bounds of spec.penalty.
const (
	MinPenaltyDuration           = time.Second
	MaxPenaltyDuration           = 30 * 24 * time.Hour // 720h
	DefaultPenaltyAfter    int32 = 3
	MaxPenaltyAfter        int32 = 1000
	DefaultPenaltyWithin         = time.Minute
	DefaultPenaltyStatus   int32 = 403
	MinPenaltyStatus       int32 = 400
	MaxPenaltyStatus       int32 = 599
	MaxPenaltyReasonLength       = 256
)

// Penalty denies a key that went over its limit for a while, whatever it
// sends meanwhile (spec.penalty): once the key is denied after times
// within a window of within, it is denied for duration with its own
// status and reason. The penalty is stored beside the key's counter (in
// the same Redis Cluster slot) and expires by itself. The key it bans (the
// policy's descriptor values) must come from the gateway's authenticated
// identity or its own view of the client (such as Envoy's remote_address),
// never from a client header: whoever can name a key can spend and strike it.
type Penalty struct {
	// duration is how long a penalized key is denied, as a Go duration from
	// 1s to 720h (30 days), such as "10m".
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="duration must be a Go duration such as 30s, 10m or 1h30m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('720h'))",message="duration must be between 1s and 720h (30 days)"
	Duration metav1.Duration `json:"duration"`

	// after is how many strikes of the key within the window start a
	// penalty, from 1 to 1000. Defaults to 3. A strike is a denial that the
	// key's own traffic made: of a cost above 0, when the counter had not
	// one unit left, at the full capacity. A cost above what remains, a
	// denial by a priority's share (spec.priority) and a request refused
	// before it is decided are never strikes.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	After *int32 `json:"after,omitempty"`

	// within is the window in which a key's denials are counted, from its
	// first denial, as a Go duration from 1s to 720h. Defaults to 1m. A
	// penalty starts the count afresh when it ends.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="within must be a Go duration such as 30s, 1m or 1h"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('720h'))",message="within must be between 1s and 720h"
	Within *metav1.Duration `json:"within,omitempty"`

	// status is the HTTP status of a penalized request's answer on the HTTP
	// check and forward-auth, from 400 to 599. Defaults to 403. Over Envoy
	// RLS the gateway picks the status; the RLS dynamic metadata carries
	// this one.
	// +optional
	// +kubebuilder:validation:Minimum=400
	// +kubebuilder:validation:Maximum=599
	Status *int32 `json:"status,omitempty"`

	// reason is the X-Sluice-Reason header (and the RLS dynamic metadata's
	// reason) of a penalized request's answer: printable ASCII, at most 256
	// characters. Defaults to "penalized by <namespace>/<name> for
	// <duration>", or for a policy with visibility Hidden, which keeps its
	// name out of answers, "penalized for <duration>".
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self.matches('^[ -~]+$')",message="reason must be printable ASCII: it is sent as a header"
	Reason *string `json:"reason,omitempty"`
}

// EffectiveAfter returns after, or 3 when unset.
func (p *Penalty) EffectiveAfter() int32 {
	if p.After == nil {
		return DefaultPenaltyAfter
	}
	return *p.After
}

// EffectiveWithin returns within, or 1m when unset.
func (p *Penalty) EffectiveWithin() time.Duration {
	if p.Within == nil {
		return DefaultPenaltyWithin
	}
	return p.Within.Duration
}

// EffectiveStatus returns status, or 403 when unset.
func (p *Penalty) EffectiveStatus() int32 {
	if p.Status == nil {
		return DefaultPenaltyStatus
	}
	return *p.Status
}
