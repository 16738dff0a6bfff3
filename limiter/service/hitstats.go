package service

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/sluice-dev/sluice/limiter/compiled"
)

// The hit statistics of the policies with HitStats (compiled.Behaviours;
// those compiled from envoyproxy/ratelimit configuration, whose per-limit
// statistics, ratelimit.service.rate_limit.KEY.STAT in ERL's statsd, they
// are) count hits (a descriptor's cost) by the policy's domain and
// HitStatsKey, where sluice_decisions_total counts decisions. The edge
// exports them (EachHitStats): limiter/server erlstats.go, as
// sluice_erl_hits_total with ERL's names.
//
// The key is the policy's name (an ERL limit's full key, domain.key_value...),
// or a key built from the request's values (ERL's detailed_metric or
// value_to_metric). Those values are the client's: the keys the service
// keeps are bounded (Options.HitStatsKeys); past the bound a new value's
// hits count under the policy's name, so that a client choosing values
// can't grow the series without bound. A request's own limit (the
// descriptor's limit field) counts under its domain's policy of own
// limits, never the client's values.

// DefaultHitStatsKeys is the default bound on the keys of the hit
// statistics built from requests' values.
const DefaultHitStatsKeys = 10000

// nearLimitRatio is envoyproxy/ratelimit's NEAR_LIMIT_RATIO default:
// allowed hits past this share of the limit are near it.
const nearLimitRatio = 0.8

// HitCounts are one key's hit statistics: every hit (Total), and the hits
// allowed (Within), allowed past the near-limit ratio (Near), denied
// (Over, a Shadow or Quota policy's too), and denied of a DryRun policy
// (DryRun).
type HitCounts struct {
	Total, Over, Near, Within, DryRun uint64
}

// The counters of a key, by statistic.
const (
	statTotalHits = iota
	statOverLimit
	statNearLimit
	statWithinLimit
	statDryRun
	statCount
)

type hitCounters struct {
	domain string
	n      [statCount]atomic.Uint64
}

// hitStats holds the counters by key. Safe for concurrent use.
type hitStats struct {
	max  int
	mu   sync.RWMutex
	keys map[string]*hitCounters
	// detailed is how many keys were built from requests' values.
	detailed int
}

func newHitStats(max int) *hitStats {
	if max <= 0 {
		max = DefaultHitStatsKeys
	}
	return &hitStats{max: max, keys: map[string]*hitCounters{}}
}

// counters are key's, made when first needed; a key built from a
// request's values (detailed) past the bound is folded into the limit's
// full key, fullKey.
func (e *hitStats) counters(domain, key, fullKey string, detailed bool) *hitCounters {
	e.mu.RLock()
	c := e.keys[key]
	e.mu.RUnlock()
	if c != nil {
		return c
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if c = e.keys[key]; c != nil {
		return c
	}
	if detailed {
		if e.detailed >= e.max {
			if c = e.keys[fullKey]; c == nil {
				c = &hitCounters{domain: domain}
				e.keys[fullKey] = c
			}
			return c
		}
		e.detailed++
	}
	c = &hitCounters{domain: domain}
	e.keys[key] = c
	return c
}

// count adds decision dec of policy p (with HitStats) on entries, at cost
// hits, as ERL's base limiter counts them (HitCounts). A decision a
// failure mode made counts in Total only (ERL would have answered an
// error).
func (e *hitStats) count(p *compiled.Policy, entries []compiled.Entry, hits int64, dec *Decision) {
	key, detailed := p.HitStatsKey(entries)
	c := e.counters(p.Domain, key, p.Name, detailed)
	h := uint64(max(hits, 0))
	c.n[statTotalHits].Add(h)
	if dec.Reason != "" {
		return
	}
	r := &dec.Result
	if !r.Allowed {
		c.n[statOverLimit].Add(h)
		if p.DryRun {
			c.n[statDryRun].Add(h)
		}
		return
	}
	c.n[statWithinLimit].Add(h)
	limit := p.Limit.Limit
	near := int64(math.Floor(float64(float32(limit) * nearLimitRatio)))
	if after := limit - r.Remaining; after > near {
		c.n[statNearLimit].Add(uint64(min(hits, after-near)))
	}
}

// EachHitStats calls f with every key's hit statistics so far: its
// domain, the key (a policy's HitStatsKey) and its counts. Safe for
// concurrent use with decisions; f must not call the service.
func (s *Service) EachHitStats(f func(domain, key string, c HitCounts)) {
	e := s.hitStats
	e.mu.RLock()
	defer e.mu.RUnlock()
	for key, c := range e.keys {
		f(c.domain, key, HitCounts{Total: c.n[statTotalHits].Load(), Over: c.n[statOverLimit].Load(),
			Near: c.n[statNearLimit].Load(), Within: c.n[statWithinLimit].Load(), DryRun: c.n[statDryRun].Load()})
	}
}
