package service

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/limiter/compiled"
)

// The hit statistics of the policies with HitStats (compiled.Behaviours;
// those compiled from envoyproxy/ratelimit configuration, whose per-limit
// statistics, ratelimit.service.rate_limit.KEY.STAT in ERL's statsd, they
// are) are sluice_erl_hits_total{domain, key, stat}: KEY is the policy's
// HitStatsKey and STAT one of hitStatNames. They count hits (a
// descriptor's cost), where sluice_decisions_total counts decisions.
//
// KEY is the policy's name (an ERL limit's full key, domain.key_value...),
// or a key built from the request's values (ERL's detailed_metric or
// value_to_metric). Those values are the client's: the keys the service
// keeps are bounded (Options.HitStatsKeys); past the bound a new value's
// hits count under the policy's name, so that a client choosing values
// can't grow the series without bound. A request's own limit (the
// descriptor's limit field) counts under its domain's policy of own
// limits, never the client's values.

// DefaultHitStatsKeys is the default bound on the keys of
// sluice_erl_hits_total built from requests' values.
const DefaultHitStatsKeys = 10000

// nearLimitRatio is envoyproxy/ratelimit's NEAR_LIMIT_RATIO default: hits past this
// share of the limit are near_limit.
const nearLimitRatio = 0.8

// The stat label's values, envoyproxy/ratelimit's statistics' names
// (shadow_mode counts a DryRun policy's denied hits).
var hitStatNames = [...]string{"total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode"}

const (
	statTotalHits = iota
	statOverLimit
	statNearLimit
	statWithinLimit
	statDryRun
)

type hitCounters struct {
	domain string
	n      [len(hitStatNames)]atomic.Uint64
}

// hitStats holds the counters by key. Safe for concurrent use.
type hitStats struct {
	max  int
	desc *prometheus.Desc
	mu   sync.RWMutex
	keys map[string]*hitCounters
	// detailed is how many keys were built from requests' values.
	detailed int
}

func newHitStats(max int) *hitStats {
	if max <= 0 {
		max = DefaultHitStatsKeys
	}
	return &hitStats{max: max, keys: map[string]*hitCounters{},
		desc: prometheus.NewDesc("sluice_erl_hits_total",
			"envoyproxy/ratelimit's per-limit statistics for limits read from ERL configuration: hits by domain, ERL's stats key (the limit's full key; with detailed_metric or value_to_metric, the request's values, up to a bound past which hits count under the full key) and stat: total_hits, over_limit, near_limit, within_limit, shadow_mode.",
			[]string{"domain", "key", "stat"}, nil)}
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
// hits, as ERL's base limiter counts them: every hit in total_hits; an
// allowed one in within_limit, and in near_limit past the ratio; a denied
// one (a Shadow or Quota policy's too) in over_limit, and in shadow_mode
// for a DryRun policy's. A decision a failure mode made counts in
// total_hits only (ERL would have answered an error).
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

// hitStatsCollector exports sluice_erl_hits_total.
type hitStatsCollector struct{ e *hitStats }

func (c hitStatsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.e.desc }

func (c hitStatsCollector) Collect(ch chan<- prometheus.Metric) {
	c.e.mu.RLock()
	defer c.e.mu.RUnlock()
	for key, n := range c.e.keys {
		for i, stat := range hitStatNames {
			ch <- prometheus.MustNewConstMetric(c.e.desc, prometheus.CounterValue, float64(n.n[i].Load()), n.domain, key, stat)
		}
	}
}
