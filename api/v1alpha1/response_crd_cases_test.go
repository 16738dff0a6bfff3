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
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// The cases of the fields that shape what clients are told
// (ratelimitpolicy_response_types.go), run by TestCRDRejects and
// TestCRDAccepts against the API server and ValidatePolicy alike.
func init() {
	badCases = append(badCases, responseBadCases...)
	goodCases = append(goodCases, responseGoodCases...)
}

func problem(t v1alpha1.ProblemType, detail string) *v1alpha1.Problem {
	pr := &v1alpha1.Problem{}
	if t != "" {
		pr.Type = &t
	}
	if detail != "" {
		pr.Detail = &detail
	}
	return pr
}

var responseBadCases = []badCase{
	{
		name:    "soft and shadow",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Soft, p.Spec.Shadow = ptr.To(true), ptr.To(true) },
		field:   "spec.soft",
		message: "spec.soft and spec.shadow are exclusive: a soft policy marks the requests over it, a shadow one tells no client anything",
	},
	{
		name: "soft and hidden",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Soft, p.Spec.Visibility = ptr.To(true), ptr.To(v1alpha1.Hidden)
		},
		field:   "spec.soft",
		message: "spec.soft is not supported with spec.visibility Hidden: the mark on the requests over a soft limit would show its threshold",
	},
	{
		name:    "soft not a boolean",
		raw:     func(s map[string]any) { s["soft"] = "yes" },
		field:   "spec.soft",
		message: `spec.soft in body must be of type boolean: "string"`,
	},
	{
		name:    "unknown visibility",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Visibility = ptr.To(v1alpha1.Visibility("Secret")) },
		field:   "spec.visibility",
		message: `Unsupported value: "Secret": supported values: "Visible", "Hidden"`,
	},
	{
		name:    "unknown problem type",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Problem = problem("quota-exceeded", "") },
		field:   "spec.problem.type",
		message: `Unsupported value: "quota-exceeded": supported values: "QuotaExceeded", "TemporaryReducedCapacity", "AbnormalUsageDetected"`,
	},
	{
		name:    "problem detail empty",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Problem = &v1alpha1.Problem{Detail: ptr.To("")} },
		field:   "spec.problem.detail",
		message: "should be at least 1 chars long",
	},
	{
		name:    "problem detail too long",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Problem = problem("", strings.Repeat("é", 257)) },
		field:   "spec.problem.detail",
		message: "may not be more than 256 bytes",
	},
	{
		name:    "problem detail on two lines",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Problem = problem("", "Slow down.\nSee the docs.") },
		field:   "spec.problem.detail",
		message: "detail must be one line of printable text: no control characters",
	},
	{
		name:    "problem detail with an escape character",
		typed:   func(p *v1alpha1.RateLimitPolicy) { p.Spec.Problem = problem("", "\x1b[31mred") },
		field:   "spec.problem.detail",
		message: "detail must be one line of printable text: no control characters",
	},
}

var responseGoodCases = []goodCase{
	{name: "soft", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Soft = ptr.To(true) }},
	{
		name: "soft, visible, not shadow",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Soft, p.Spec.Shadow, p.Spec.Visibility = ptr.To(true), ptr.To(false), ptr.To(v1alpha1.Visible)
		},
	},
	{
		name: "not soft, hidden, shadow",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Soft, p.Spec.Shadow, p.Spec.Visibility = ptr.To(false), ptr.To(true), ptr.To(v1alpha1.Hidden)
		},
	},
	{name: "visible", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Visibility = ptr.To(v1alpha1.Visible) }},
	{name: "hidden", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Visibility = ptr.To(v1alpha1.Hidden) }},
	{
		name: "hidden shadow with problem details",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Visibility, p.Spec.Shadow = ptr.To(v1alpha1.Hidden), ptr.To(true)
			p.Spec.Problem = problem(v1alpha1.AbnormalUsageDetected, "Blocked.")
		},
	},
	{name: "empty problem", typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Problem = &v1alpha1.Problem{} }},
	{
		name: "abnormal usage",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Problem = problem(v1alpha1.AbnormalUsageDetected, "")
		},
	},
	{
		name:  "reduced capacity",
		typed: func(p *v1alpha1.RateLimitPolicy) { p.Spec.Problem = problem(v1alpha1.TemporaryReducedCapacity, "") },
	},
	{
		name: "longest problem detail, counted in characters",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Problem = problem(v1alpha1.QuotaExceeded, strings.Repeat("é", 256))
		},
	},
	{
		name: "problem detail with a link",
		typed: func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Problem = problem("", "Ask for a larger quota at https://example.com/quota — or wait.")
		},
	},
}

// TestClientViewSamplesAccepted applies config/samples/policies-client-view.yaml.
func TestClientViewSamplesAccepted(t *testing.T) {
	for _, p := range readPolicies(t, filepath.Join("..", "..", "config", "samples", "policies-client-view.yaml")) {
		createNamespace(t, p.Namespace)
		t.Run(p.Namespace+"/"+p.Name, func(t *testing.T) {
			requireAccepted(t, p)
		})
	}
}
