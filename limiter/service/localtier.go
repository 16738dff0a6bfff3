package service

import (
	"context"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/localtier"
)

// take decides req in the store, through the local tier for a policy in
// two-tier mode.
func (s *Service) take(ctx context.Context, c *policyCounters, req store.Request) (algo.Result, error) {
	if c.tier != nil {
		return s.tier.Take(ctx, c.tier, req)
	}
	return s.store.Take(ctx, req)
}

// localTierConfigs are the two-tier settings of snap's policies with
// spec.localTier enabled.
func localTierConfigs(snap *config.Snapshot) []localtier.PolicyConfig {
	var out []localtier.PolicyConfig
	for _, p := range snap.Policies {
		if p.Spec.LocalTierEnabled() {
			out = append(out, localtier.PolicyConfig{ID: p.ID(), Limit: p.Limit, Tier: p.Spec.LocalTier})
		}
	}
	return out
}

// LocalTierStats are the two-tier figures of the loaded policies in
// two-tier mode, by policy ID (namespace/name).
func (s *Service) LocalTierStats() map[string]localtier.Stats {
	st := s.tier.Stats()
	out := make(map[string]localtier.Stats, len(st))
	for _, p := range st {
		out[p.ID] = p
	}
	return out
}

// LocalTier is the service's local tier.
func (s *Service) LocalTier() *localtier.Tier { return s.tier }
