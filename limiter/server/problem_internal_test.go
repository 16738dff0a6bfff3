package server

import (
	"testing"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

func TestAcceptsProblem(t *testing.T) {
	for _, tc := range []struct {
		accept string
		want   bool
	}{
		{"", false},
		{"application/json", false},
		{"*/*", false},
		{"application/*", false},
		{"application/problem+json", true},
		{"Application/Problem+JSON", true},
		{"application/json, application/problem+json", true},
		{"application/problem+json, application/json", true},
		{"application/problem+json;q=0.5, application/json", false},
		{"application/json;q=0.4, application/problem+json;q=0.5", true},
		{"application/problem+json;q=0", false},
		{"application/problem+json; q=0.0", false},
		{"text/html, application/problem+json;q=0.9, */*;q=0.8", true},
		{"application/problem+json;q=0.5, application/*;q=0.9", false},
		{"application/problem+json;q=abc", false},
		{"application/problem+json;q=2", false},
		{"application/problem+jsonx", false},
		{"application/problem+json;charset=utf-8", true},
		{" application/problem+json ; Q=1 ", true},
	} {
		if got := acceptsProblem(tc.accept); got != tc.want {
			t.Errorf("acceptsProblem(%q) = %v, want %v", tc.accept, got, tc.want)
		}
	}
}

// Every problem type the API lets a policy name has its URI and title.
func TestEveryProblemTypeKnown(t *testing.T) {
	for _, pt := range v1alpha1.ProblemTypes {
		if _, ok := problemTypes[string(pt)]; !ok {
			t.Errorf("spec.problem.type %s has no URI and title in problemTypes", pt)
		}
	}
	if len(problemTypes) != len(v1alpha1.ProblemTypes) {
		t.Errorf("problemTypes has %d types, the API %d", len(problemTypes), len(v1alpha1.ProblemTypes))
	}
	if _, ok := problemTypes[quotaExceeded]; !ok || quotaExceeded != string(v1alpha1.QuotaExceeded) {
		t.Errorf("the default problem type %q is not the API's %q", quotaExceeded, v1alpha1.QuotaExceeded)
	}
}
