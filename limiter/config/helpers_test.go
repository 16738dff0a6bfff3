package config_test

import (
	"testing"

	"github.com/sluice-dev/sluice/api/convert"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/limiter/config"
)

// alphaSources converts v1alpha1 policies to what the limiter compiles,
// as the operator does at its boundary (api/convert).
func alphaSources(t testing.TB, ps ...v1alpha1.RateLimitPolicy) []config.Source {
	t.Helper()
	out := make([]config.Source, len(ps))
	for i := range ps {
		b, e, err := convert.Policy(&ps[i])
		if err != nil {
			t.Fatalf("converting %s/%s: %v", ps[i].Namespace, ps[i].Name, err)
		}
		out[i] = config.Source{RateLimitPolicy: b, Entries: e}
	}
	return out
}

// The budget defaults the limiter's flags take are the API's.
func TestBudgetDefaultsAreTheAPIs(t *testing.T) {
	if config.DefaultMaxPoliciesPerRequest != v1alpha1.DefaultMaxPoliciesPerRequest ||
		config.DefaultStoreCallsPerSecondPerNamespace != v1alpha1.DefaultStoreCallsPerSecondPerNamespace {
		t.Fatal("limiter/config's budget defaults differ from the API's")
	}
}
