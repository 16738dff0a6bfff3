package service

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/limiter/compiled"
)

// Priority shedding (spec.priority): a request spends its policy's counter
// leaving its priority's headroom for the priorities above it (see
// algo.Limit.Headroom), so that as the counter fills the lowest priority is
// denied first and the highest last. The decision itself is the store's;
// this file picks the headroom and counts decisions per priority.

// levelStats count one priority level's decisions of one policy.
type levelStats struct {
	allowed, limited, shadowLimited, softLimited atomic.Int64
}

// priorityLevels are a policy's level counters, kept across Swaps by level
// value like the policy's own stats.
type priorityLevels struct {
	mu     sync.Mutex // Swap only
	levels map[string]*levelStats
}

// levelsFor returns a counter per level of p's priority, in its order,
// reusing those of the policy's earlier snapshots. Called by Swap only;
// nil without stats or priority.
func (st *policyStats) levelsFor(p *compiled.Policy) []*levelStats {
	if st == nil || p.Priority == nil {
		return nil
	}
	st.priority.mu.Lock()
	defer st.priority.mu.Unlock()
	if st.priority.levels == nil {
		st.priority.levels = map[string]*levelStats{}
	}
	out := make([]*levelStats, len(p.Priority.Levels))
	for i, l := range p.Priority.Levels {
		ls := st.priority.levels[l.Value]
		if ls == nil {
			ls = &levelStats{}
			st.priority.levels[l.Value] = ls
		}
		out[i] = ls
	}
	return out
}

// priorityHeadroom is the headroom of the priority entries carry under p
// (0 without spec.priority), and its level's index (-1 without).
func priorityHeadroom(p *compiled.Policy, entries []compiled.Entry) (headroom int64, level int) {
	if p.Priority == nil {
		return 0, -1
	}
	level = p.Priority.Level(entries)
	return p.Priority.Levels[level].Headroom, level
}

// countLevel records one decision of a priority level, as count does for
// the policy (a penalized key's denial counts as limited).
func countLevel(levels []*levelStats, level int, dec *Decision, shadow, soft bool) {
	if level < 0 || level >= len(levels) || dec.Reason != "" {
		return
	}
	ls := levels[level]
	switch {
	case dec.Result.Allowed:
		ls.allowed.Add(1)
	case shadow:
		ls.shadowLimited.Add(1)
	case soft:
		ls.softLimited.Add(1)
	default:
		ls.limited.Add(1)
	}
}

// collectPriority sends sluice_priority_decisions_total for p's levels
// (soft_limited only for a soft policy, the only one that marks).
func (d decisionsCollector) collectPriority(ch chan<- prometheus.Metric, p *compiled.Policy, ps *policyState) {
	for i, ls := range ps.levels {
		value := p.Priority.Levels[i].Value
		results := []struct {
			result string
			n      *atomic.Int64
		}{{ResultAllowed, &ls.allowed}, {ResultLimited, &ls.limited}, {ResultShadowLimited, &ls.shadowLimited}, {ResultSoftLimited, &ls.softLimited}}
		if !p.Soft {
			results = results[:3]
		}
		for _, v := range results {
			ch <- prometheus.MustNewConstMetric(d.s.metrics.priorityDecisions, prometheus.CounterValue, float64(v.n.Load()), p.Domain, p.ID(), value, v.result)
		}
	}
}
