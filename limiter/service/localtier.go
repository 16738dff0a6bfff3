package service

import (
	"context"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/regions"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/localtier"
)

// swapLocalTier installs the two-tier settings of snap's policies with
// spec.localTier enabled in the local tier, and returns them by policy ID;
// nil without a local tier.
func (s *Service) swapLocalTier(snap *compiled.Snapshot) map[string]*localtier.Policy {
	if s.tier == nil {
		return nil
	}
	var cfgs []localtier.PolicyConfig
	for _, p := range snap.Policies {
		if t := p.LocalTier; t != nil {
			cfgs = append(cfgs, localtier.PolicyConfig{ID: p.ID(), Limit: p.Limit, TTL: t.TTL, Bound: t.Bound})
		}
	}
	return s.tier.Swap(cfgs)
}

// policyStore is a policy's way to its counters: the regions for a
// Global policy of a fleet in regions, the local tier for a policy in
// two-tier mode (tp set), else the store.
func (s *Service) policyStore(p *compiled.Policy, tp *localtier.Policy) store.Store {
	if p.Global && s.opts.Regions != nil {
		return s.opts.Regions.Store(regions.Policy{ID: p.ID(), Limit: p.Limit})
	}
	if tp == nil {
		return s.store
	}
	return tierStore{tier: s.tier, policy: tp}
}

// tierStore is one policy's view of the local tier, as a store.
type tierStore struct {
	tier   *localtier.Tier
	policy *localtier.Policy
}

func (t tierStore) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	return t.tier.Take(ctx, t.policy, req)
}

// Close does nothing: the tier is the service's caller's.
func (t tierStore) Close() error { return nil }

// LocalTierStats are the two-tier figures of the loaded policies in
// two-tier mode, by policy ID (namespace/name); empty without a local tier.
func (s *Service) LocalTierStats() map[string]localtier.Stats {
	if s.tier == nil {
		return map[string]localtier.Stats{}
	}
	st := s.tier.Stats()
	out := make(map[string]localtier.Stats, len(st))
	for _, p := range st {
		out[p.ID] = p
	}
	return out
}

// swapRegions installs snap's Global policies in the regions.
func (s *Service) swapRegions(snap *compiled.Snapshot) {
	if s.opts.Regions == nil {
		return
	}
	var ps []regions.Policy
	for _, p := range snap.Policies {
		if p.Global {
			ps = append(ps, regions.Policy{ID: p.ID(), Limit: p.Limit})
		}
	}
	s.opts.Regions.Swap(ps)
}

// RegionBounds are the bounds across regions of the loaded Global
// policies, by policy ID; empty without regions.
func (s *Service) RegionBounds() map[string]RegionBound {
	out := map[string]RegionBound{}
	snap := s.Snapshot()
	if s.opts.Regions == nil || snap == nil {
		return out
	}
	for _, p := range snap.Policies {
		if p.Global {
			rg := s.opts.Regions
			out[p.ID()] = RegionBound{Bound: rg.Bound(p.Limit), ReachBound: rg.ReachBound(p.Limit), Regions: int64(rg.Regions())}
		}
	}
	return out
}

// RegionBound is a Global policy's bound across regions (partitions
// included), its bound while every region reaches every home, and how
// many regions share it.
type RegionBound struct{ Bound, ReachBound, Regions int64 }
