// Package policytest is a test helper: it converts the v1alpha1 policies
// tests build to what limiter/config compiles (config.Source), with the
// API package's conversion (api/convert), as the operator does.
package policytest

import (
	"fmt"

	"github.com/sluice-dev/sluice/api/convert"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/limiter/config"
)

// Sources converts ps; it panics on a policy the conversion refuses.
func Sources(ps ...v1alpha1.RateLimitPolicy) []config.Source {
	out := make([]config.Source, len(ps))
	for i := range ps {
		b, e, err := convert.Policy(&ps[i])
		if err != nil {
			panic(fmt.Sprintf("policytest: converting %s/%s: %v", ps[i].Namespace, ps[i].Name, err))
		}
		out[i] = config.Source{RateLimitPolicy: b, Entries: e}
	}
	return out
}

// Compile compiles v1alpha1 policies as config.CompileSources does their
// v1beta1 form.
func Compile(ps []v1alpha1.RateLimitPolicy) (*config.Snapshot, error) {
	return config.CompileSources(Sources(ps...))
}
