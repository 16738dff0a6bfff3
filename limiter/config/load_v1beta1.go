package config

import (
	"fmt"
	"regexp"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// A policy file may hold v1beta1 RateLimitPolicies, the storage version:
// each is decoded as strictly as a v1alpha1 one, converted to v1alpha1 with
// the conversion the operator's webhook serves, and then defaulted and
// validated as any v1alpha1 policy. The lease entries and priority key,
// which v1beta1 leaves to the fleet, take their defaults (sluice_lease,
// priority), as they do when the API server converts.

// gepDuration is the pattern of v1beta1.Duration, which the API server
// enforces and time.ParseDuration alone does not (it takes 1.5s).
var gepDuration = regexp.MustCompile(`^([0-9]{1,5}(h|m|s|ms)){1,4}$`)

// decodeV1beta1Policy decodes a v1beta1 RateLimitPolicy document (JSON) and
// converts it to v1alpha1.
func decodeV1beta1Policy(where string, js []byte) (v1alpha1.RateLimitPolicy, error) {
	var b v1beta1.RateLimitPolicy
	var p v1alpha1.RateLimitPolicy
	if err := unmarshalStrict(js, &b, where, &b.ObjectMeta); err != nil {
		return p, err
	}
	for field, d := range v1beta1Durations(&b.Spec) {
		if !gepDuration.MatchString(string(d)) {
			return p, fmt.Errorf("%s (%s/%s): spec.%s: %q is not a duration of the form 30s, 1m or 1h30m (one to four parts of 1-5 digits and h, m, s or ms)",
				where, b.Namespace, b.Name, field, d)
		}
	}
	if err := p.ConvertFrom(&b); err != nil {
		return p, fmt.Errorf("%s (%s/%s): %w", where, b.Namespace, b.Name, err)
	}
	p.APIVersion, p.Kind = v1alpha1.GroupVersion.String(), "RateLimitPolicy"
	return p, nil
}

// v1beta1Durations returns the durations set in s, by field path.
func v1beta1Durations(s *v1beta1.RateLimitPolicySpec) map[string]v1beta1.Duration {
	out := map[string]v1beta1.Duration{}
	add := func(field string, d *v1beta1.Duration) {
		if d != nil {
			out[field] = *d
		}
	}
	if c := s.Limit.Concurrency; c != nil {
		add("limit.concurrency.leaseDuration", c.LeaseDuration)
	}
	if r := s.Limit.Rate; r != nil {
		add("limit.rate.period", r.Period)
		if r.Cost != nil && r.Cost.Reserve != nil {
			add("limit.rate.cost.reserve.expireAfter", r.Cost.Reserve.ExpireAfter)
		}
		if r.LocalTier != nil {
			add("limit.rate.localTier.ttl", r.LocalTier.TTL)
		}
		if r.Penalty != nil {
			add("limit.rate.penalty.duration", &r.Penalty.Duration)
			add("limit.rate.penalty.within", r.Penalty.Within)
		}
	}
	return out
}
