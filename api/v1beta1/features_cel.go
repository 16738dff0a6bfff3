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
	"fmt"
	"slices"
	"strings"
)

// CELRule is one x-kubernetes-validations rule of the CRD that the table
// makes: hack/featurecel writes them as the XValidation markers of the
// types that hold them (make generate).
// +kubebuilder:object:generate=false
type CELRule struct {
	// Host is the path below spec of the member whose schema holds the
	// rule: "" (spec itself), "limit" or "limit.rate".
	Host string
	// Rule is the CEL expression, on self, the host.
	Rule string
	// Message is the refusal's message.
	Message string
	// FieldPath is where the API server reports the refusal, from the
	// host, such as ".burst".
	FieldPath string
}

// CELHosts are the members that hold rules, deepest first, and their types.
var CELHosts = []struct{ Path, Type string }{
	{"limit.rate", "RateLimit"}, {"limit", "Limit"}, {"", "RateLimitPolicySpec"},
}

// requiredRules are the rules the table's features can't say: the member
// the limit's type names, a rate's window, and cost.max within the
// capacity. validateRequiredMembers applies them.
var requiredRules = []CELRule{
	{Host: "limit", Rule: "self.type != 'Rate' || has(self.rate)", Message: unionMsg, FieldPath: ".rate"},
	{Host: "limit", Rule: "self.type != 'Concurrency' || has(self.concurrency)", Message: unionMsg, FieldPath: ".concurrency"},
	{Host: "limit.rate", Rule: "has(self.period) || has(self.calendar)", Message: windowMsg, FieldPath: ".period"},
	{Host: "limit.rate", Rule: "!has(self.cost) || !has(self.cost.max) || self.cost.max <= (has(self.burst) ? self.burst : self.limit)",
		Message: costMaxMsg, FieldPath: ".cost.max"},
}

// CELRules are the CRD's rules that say what the table says: for each
// host, its required rules, then for each feature in table order the rule
// of its takers (when some taker refuses it) and one rule per exclusion.
func CELRules() []CELRule {
	var out []CELRule
	for _, h := range CELHosts {
		for _, r := range requiredRules {
			if r.Host == h.Path {
				out = append(out, r)
			}
		}
		for i := range Features {
			out = append(out, featureRules(&Features[i], h.Path)...)
		}
	}
	return out
}

// featureRules are f's rules held by host.
func featureRules(f *Feature, host string) []CELRule {
	var out []CELRule
	if f.Refused != "" && hostOf(f.Path) == host {
		out = append(out, CELRule{Host: host, Rule: fmt.Sprintf("!%s || %s", f.celSet(host), takerRule(f, host)),
			Message: f.Refused, FieldPath: "." + relPath(f.Path, host)})
	}
	for _, x := range f.Exclusions {
		paths := []string{f.Path}
		var with []string
		for _, n := range x.With {
			g := FeatureByName(n)
			paths = append(paths, g.Path)
			with = append(with, g.celSet(host))
		}
		if hostOf(paths...) != host {
			continue
		}
		rule := fmt.Sprintf("!%s || !%s", f.celSet(host), with[0])
		if len(with) > 1 {
			rule = fmt.Sprintf("!%s || !(%s)", f.celSet(host), strings.Join(with, " || "))
		}
		out = append(out, CELRule{Host: host, Rule: rule, Message: x.Reason, FieldPath: "." + relPath(f.Path, host)})
	}
	return out
}

// hostOf is the deepest host strictly above every one of paths.
func hostOf(paths ...string) string {
	for _, h := range CELHosts {
		if h.Path == "" || !slices.ContainsFunc(paths, func(p string) bool { return !strings.HasPrefix(p, h.Path+".") }) {
			return h.Path
		}
	}
	return ""
}

func relPath(path, host string) string {
	if host == "" {
		return path
	}
	return strings.TrimPrefix(path, host+".")
}

// celSet is the CEL condition, on host, that f is set: each member on its
// path is present, and the value is f.is; parenthesized unless one term.
func (f *Feature) celSet(host string) string {
	parts := strings.Split(relPath(f.Path, host), ".")
	var terms []string
	for i := range parts {
		terms = append(terms, fmt.Sprintf("has(self.%s)", strings.Join(parts[:i+1], ".")))
	}
	if f.is != "" {
		terms = append(terms, fmt.Sprintf("self.%s %s", strings.Join(parts, "."), f.is))
	}
	if len(terms) == 1 {
		return terms[0]
	}
	return "(" + strings.Join(terms, " && ") + ")"
}

// takerRule is the CEL condition, on host, that f's taker takes it: the
// rate's algorithm is one of f.TakenBy, or the limit's type is.
func takerRule(f *Feature, host string) string {
	switch {
	case host == "limit.rate":
		quoted := make([]string, len(f.TakenBy))
		for i, t := range f.TakenBy {
			quoted[i] = "'" + string(t) + "'"
		}
		return fmt.Sprintf("self.algorithm in [%s]", strings.Join(quoted, ", "))
	case host == "limit" && slices.Equal(f.TakenBy, RateTakers):
		return "self.type == 'Rate'"
	case host == "limit" && slices.Equal(f.TakenBy, []Taker{TakerConcurrency}):
		return "self.type == 'Concurrency'"
	}
	panic(fmt.Sprintf("v1beta1: no CEL for the takers %v of %s on %q", f.TakenBy, f.Name, host))
}
