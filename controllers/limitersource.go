package controllers

import (
	"fmt"

	"github.com/sluice-dev/sluice/api/convert"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/limiter/config"
)

// limiterSource is the limiter's form of a policy the operator read, in
// v1beta1, which limiter/config validates, compiles and writes as it is:
// the stored spec, and beside it as entries the lease entry and priority
// key a v1alpha1 client may have named in the policy itself (which the
// stored object keeps in its conversion annotation, read inside api/ by
// convert.StoredPolicy, without the webhook).
func limiterSource(p *v1beta1.RateLimitPolicy) (config.Source, error) {
	b, e, err := convert.StoredPolicy(p)
	if err != nil {
		return config.Source{}, fmt.Errorf("reading policy %s/%s: %w", p.Namespace, p.Name, err)
	}
	return config.Source{RateLimitPolicy: b, Entries: e}, nil
}

// sourceMap is the limiter's form of each of a fleet's selected
// policies, by namespace/name.
type sourceMap map[string]*config.Source

// sourcesByName converts the selected policies (limiterSource).
func sourcesByName(ps []v1beta1.RateLimitPolicy) (sourceMap, error) {
	out := make(sourceMap, len(ps))
	for i := range ps {
		s, err := limiterSource(&ps[i])
		if err != nil {
			return nil, err
		}
		out[ps[i].Namespace+"/"+ps[i].Name] = &s
	}
	return out, nil
}

// of is the limiter's form of ps, each of which m holds.
func (m sourceMap) of(ps []v1beta1.RateLimitPolicy) []config.Source {
	out := make([]config.Source, len(ps))
	for i := range ps {
		out[i] = *m[ps[i].Namespace+"/"+ps[i].Name]
	}
	return out
}

// documentBytes is config.PolicyDocumentBytes of p's limiter form.
func (m sourceMap) documentBytes(p *v1beta1.RateLimitPolicy) int {
	return config.PolicyDocumentBytes(m[p.Namespace+"/"+p.Name])
}
