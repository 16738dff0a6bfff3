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

// Command featurecel writes the XValidation markers of the v1beta1 types
// that hold the feature table's rules (v1beta1.CELRules: RateLimitPolicySpec,
// Limit, RateLimit) from the table, replacing every XValidation marker
// directly above each type. make manifests runs it before controller-gen.
//
//	go run ./hack/featurecel [api/v1beta1/ratelimitpolicy_types.go]
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

const marker = "// +kubebuilder:validation:XValidation:"

func main() {
	file := "api/v1beta1/ratelimitpolicy_types.go"
	if len(os.Args) > 1 {
		file = os.Args[1]
	}
	if err := run(file); err != nil {
		fmt.Fprintln(os.Stderr, "featurecel:", err)
		os.Exit(1)
	}
}

func run(file string) error {
	src, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	lines := strings.Split(string(src), "\n")
	rules := v1beta1.CELRules()
	for _, h := range v1beta1.CELHosts {
		var markers []string
		for _, r := range rules {
			if r.Host != h.Path {
				continue
			}
			if strings.ContainsAny(r.Rule+r.Message+r.FieldPath, "\"\\`") {
				return fmt.Errorf("a rule of %s holds a quote or backslash: %+v", h.Type, r)
			}
			markers = append(markers, fmt.Sprintf("%srule=%q,message=%q,fieldPath=%q", marker, r.Rule, r.Message, r.FieldPath))
		}
		if lines, err = replaceMarkers(lines, h.Type, markers); err != nil {
			return err
		}
	}
	return os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o644)
}

// replaceMarkers drops the XValidation markers of the comment directly
// above `type name struct` and puts markers right above the type.
func replaceMarkers(lines []string, name string, markers []string) ([]string, error) {
	at := -1
	for i, l := range lines {
		if l == "type "+name+" struct {" {
			at = i
			break
		}
	}
	if at < 0 {
		return nil, fmt.Errorf("no type %s", name)
	}
	start := at
	for start > 0 && strings.HasPrefix(lines[start-1], "//") {
		start--
	}
	var out []string
	out = append(out, lines[:start]...)
	for _, l := range lines[start:at] {
		if !strings.HasPrefix(l, marker) {
			out = append(out, l)
		}
	}
	out = append(out, markers...)
	return append(out, lines[at:]...), nil
}
