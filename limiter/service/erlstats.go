package service

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/limiter/compiled"
)

// ERL's per-limit statistics (ratelimit.service.rate_limit.KEY.STAT in
// envoyproxy/ratelimit's statsd) are sluice_erl_hits_total{domain, key,
// stat}: KEY is ERL's stats key and STAT one of the erlStat names. They
// count hits (a descriptor's cost), as ERL does, where
// sluice_decisions_total counts decisions.
//
// KEY is the limit's full key (domain.key_value...), and with
// detailed_metric or value_to_metric the key ERL builds from the request's
// values. Those values are the client's: the keys the service keeps are
// bounded (Options.ERLMetricKeys); past the bound a new value's hits count
// under the limit's own full key, so that a client choosing values can't
// grow the series without bound. A request's own limit (the descriptor's
// limit field) counts under its domain's override policy's name, never
// the client's values.

// DefaultERLMetricKeys is the default bound on the keys of
// sluice_erl_hits_total built from requests' values.
const DefaultERLMetricKeys = 10000

// erlNearLimitRatio is ERL's NEAR_LIMIT_RATIO default: hits past this
// share of the limit are near_limit.
const erlNearLimitRatio = 0.8

// The stat label's values, ERL's statistics' names.
var erlStatNames = [...]string{"total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode"}

const (
	erlTotalHits = iota
	erlOverLimit
	erlNearLimit
	erlWithinLimit
	erlShadowMode
)

type erlCounters struct {
	domain string
	n      [len(erlStatNames)]atomic.Uint64
}

// erlStats holds the counters by key. Safe for concurrent use.
type erlStats struct {
	max  int
	desc *prometheus.Desc
	mu   sync.RWMutex
	keys map[string]*erlCounters
	// detailed is how many keys were built from requests' values.
	detailed int
}

func newERLStats(max int) *erlStats {
	if max <= 0 {
		max = DefaultERLMetricKeys
	}
	return &erlStats{max: max, keys: map[string]*erlCounters{},
		desc: prometheus.NewDesc("sluice_erl_hits_total",
			"envoyproxy/ratelimit's per-limit statistics for limits read from ERL configuration: hits by domain, ERL's stats key (the limit's full key; with detailed_metric or value_to_metric, the request's values, up to a bound past which hits count under the full key) and stat: total_hits, over_limit, near_limit, within_limit, shadow_mode.",
			[]string{"domain", "key", "stat"}, nil)}
}

// counters are key's, made when first needed; a key built from a
// request's values (detailed) past the bound is folded into the limit's
// full key, fullKey.
func (e *erlStats) counters(domain, key, fullKey string, detailed bool) *erlCounters {
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
				c = &erlCounters{domain: domain}
				e.keys[fullKey] = c
			}
			return c
		}
		e.detailed++
	}
	c = &erlCounters{domain: domain}
	e.keys[key] = c
	return c
}

// count adds decision dec of ERL policy p (not unlimited) on entries, at
// cost hits, as ERL's base limiter counts it: every hit in total_hits; an
// allowed one in within_limit, and in near_limit past the ratio; a denied
// one (shadow or quota mode too) in over_limit, and in shadow_mode for a
// shadow_mode limit. A decision a failure mode made counts in total_hits
// only (ERL would have answered an error).
func (e *erlStats) count(p *compiled.Policy, entries []compiled.Entry, hits int64, dec *Decision) {
	key, detailed := erlStatsKey(p, entries)
	c := e.counters(p.Domain, key, p.Name, detailed)
	h := uint64(max(hits, 0))
	c.n[erlTotalHits].Add(h)
	if dec.Reason != "" {
		return
	}
	r := &dec.Result
	if !r.Allowed {
		c.n[erlOverLimit].Add(h)
		if p.ERL.ShadowMode {
			c.n[erlShadowMode].Add(h)
		}
		return
	}
	c.n[erlWithinLimit].Add(h)
	limit := p.Limit.Limit
	near := int64(math.Floor(float64(float32(limit) * erlNearLimitRatio)))
	if after := limit - r.Remaining; after > near {
		c.n[erlNearLimit].Add(uint64(min(hits, after-near)))
	}
}

// erlStatsKey is ERL's stats key of p for entries (domain.key_value...),
// and whether it was built from the request's values, as ERL's GetLimit
// builds it: with detailed_metric, every entry's key and value (a
// share_threshold level's pattern in place of its value; without any
// such level, key_value even for an empty value); else, with
// value_to_metric on a level, the request's value at that level (a
// wildcard's pattern, a key alone nothing, elsewhere); else p's full
// key, its name.
func erlStatsKey(p *compiled.Policy, entries []compiled.Entry) (string, bool) {
	e := p.ERL
	if e.Override || (!e.DetailedMetric && !e.ValueToMetric) || len(entries) != len(e.Levels) {
		return p.Name, false
	}
	share := false
	for i := range e.Levels {
		share = share || e.Levels[i].Share
	}
	var b strings.Builder
	b.WriteString(p.Domain)
	for i := range entries {
		en, l := &entries[i], &e.Levels[i]
		b.WriteByte('.')
		b.WriteString(en.Key)
		var v string
		switch {
		case l.Share:
			v = l.Value
		case e.DetailedMetric && !share:
			b.WriteByte('_')
			b.WriteString(en.Value)
			continue
		case e.DetailedMetric, l.Value != "" && !l.Wildcard, l.ValueToMetric:
			v = en.Value
		case l.Wildcard:
			v = l.Value
		}
		if v != "" {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	key := b.String()
	return key, key != p.Name
}

// erlStatsCollector exports sluice_erl_hits_total.
type erlStatsCollector struct{ e *erlStats }

func (c erlStatsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.e.desc }

func (c erlStatsCollector) Collect(ch chan<- prometheus.Metric) {
	c.e.mu.RLock()
	defer c.e.mu.RUnlock()
	for key, n := range c.e.keys {
		for i, stat := range erlStatNames {
			ch <- prometheus.MustNewConstMetric(c.e.desc, prometheus.CounterValue, float64(n.n[i].Load()), n.domain, key, stat)
		}
	}
}
