package controllers

import (
	"fmt"

	"github.com/sluice-dev/sluice/api/convert"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/limiter/config"
)

// limiterSource is the boundary between the operator, which still holds
// v1alpha1 objects (converting it to v1beta1 is later work), and
// limiter/config, which validates, compiles and writes v1beta1 specs only.
// The policy is converted with the API package's conversion (v1alpha1
// ConvertTo, through api/convert): what only v1beta1 can say and a
// v1alpha1 client carries in the conversion annotation (a rate's scope
// Global, its requestOverride) lands in the v1beta1 spec there, inside
// api/, and so reaches the snapshot; the lease entry and priority key a
// v1alpha1 policy names itself come beside it as entries.
func limiterSource(p *v1alpha1.RateLimitPolicy) (config.Source, error) {
	b, e, err := convert.Policy(p)
	if err != nil {
		return config.Source{}, fmt.Errorf("converting policy %s/%s to v1beta1: %w", p.Namespace, p.Name, err)
	}
	return config.Source{RateLimitPolicy: b, Entries: e}, nil
}

// sourceMap is the limiter's form of each of a fleet's selected
// policies, by namespace/name.
type sourceMap map[string]*config.Source

// sourcesByName converts the selected policies (limiterSource).
func sourcesByName(ps []v1alpha1.RateLimitPolicy) (sourceMap, error) {
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
func (m sourceMap) of(ps []v1alpha1.RateLimitPolicy) []config.Source {
	out := make([]config.Source, len(ps))
	for i := range ps {
		out[i] = *m[ps[i].Namespace+"/"+ps[i].Name]
	}
	return out
}

// documentBytes is config.PolicyDocumentBytes of p's limiter form.
func (m sourceMap) documentBytes(p *v1alpha1.RateLimitPolicy) int {
	return config.PolicyDocumentBytes(m[p.Namespace+"/"+p.Name])
}
