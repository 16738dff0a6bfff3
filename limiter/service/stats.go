package service

import (
	"sort"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/store"
)

// nearLimitPercent: an allowed decision whose remaining units are under
// this fraction of the limit's capacity counts as near the limit.
const nearLimitPercent = 20

// policyStats are one policy's decision counts since this process started,
// for the operator's collector (the admin stats endpoint). They are kept
// across Swaps by policy UID (namespace/name when the snapshot has no
// UIDs), so that a new snapshot does not reset them; the generation is the
// last one loaded. Every field is atomic: the request path only adds.
type policyStats struct {
	uid, namespace, name string
	generation           atomic.Int64

	allowed, limited, shadowLimited         atomic.Int64
	failedOpen, failedClosed, localFallback atomic.Int64
	nearLimit                               atomic.Int64
	softLimited                             atomic.Int64
	penalized                               atomic.Int64
	// refused counts the requests the policy matched that were not
	// counted because of what the client sent (refuse.go).
	refused atomic.Int64
	// released counts the holdings ended (slots released, reservations
	// settled), notHeld the ends that found nothing to end.
	released, notHeld atomic.Int64

	// top is the hottest-descriptors sketch; nil when Options.Top is off.
	top *topSketch
	// priority are the counts per priority level (priority.go).
	priority priorityLevels
}

// PolicyStats is a copy of one policy's decision counts since the process
// started. The counts only grow while the process runs.
type PolicyStats struct {
	UID        string
	Namespace  string
	Name       string
	Generation int64

	Allowed       int64
	Limited       int64
	ShadowLimited int64
	FailedOpen    int64
	FailedClosed  int64
	LocalFallback int64
	// NearLimit counts the allowed decisions (from the store) that left
	// less than 20% of the limit's capacity.
	NearLimit int64
	// SoftLimited counts the decisions of a soft policy over its
	// threshold: allowed, and marked.
	SoftLimited int64
	// Penalized counts the denials of penalized keys (spec.penalty), the
	// one that started a penalty included; Limited does not count them.
	Penalized int64
	// Refused counts the requests that matched the policy and were not
	// counted because of what the client sent (a cost above a cap, an
	// over-long value, a malformed lease, ...): denied with a reason when
	// an enforcing policy matched, never a strike of spec.penalty.
	Refused int64
	// Released counts the holdings of a policy that holds (Concurrency
	// slots, reservations) ended by the request's end, or given back by a
	// request denied by another policy; NotHeld the ends that found
	// nothing (ended already, expired, never taken). Allowed counts the
	// holdings taken: Allowed - Released is what is still held, or
	// expired unreleased.
	Released int64
	NotHeld  int64

	// Hottest are the policy's hottest descriptor values in the interval
	// that started at HottestSince (Options.Top); HottestSince is zero when
	// that is off.
	Hottest      []HotValue
	HottestSince time.Time
}

func statsKey(p *compiled.Policy) string {
	if p.UID != "" {
		return p.UID
	}
	return p.ID()
}

// statsFor returns the stats of p, reusing those of the previous snapshot.
// Called by Swap only.
func (s *Service) statsFor(prev map[string]*policyStats, p *compiled.Policy) *policyStats {
	if s.opts.DisablePolicyStats {
		return nil
	}
	st := prev[statsKey(p)]
	if st == nil {
		st = &policyStats{uid: p.UID, namespace: p.Namespace, name: p.Name}
		if s.opts.Top.K > 0 {
			st.top = newTopSketch(s.opts.Top)
		}
	}
	st.generation.Store(p.Generation)
	return st
}

// count records one decision of a policy. shadow is true for a shadow
// policy or under the kill switch, soft for a soft policy.
func (st *policyStats) count(dec *Decision, l algo.Limit, shadow, soft bool) {
	if st == nil {
		return
	}
	switch {
	case dec.Reason != "":
		return // counted by the failure mode
	case !dec.Result.Allowed && shadow:
		st.shadowLimited.Add(1)
	case !dec.Result.Allowed && soft:
		st.softLimited.Add(1)
	case dec.Result.Penalized:
		st.penalized.Add(1)
	case !dec.Result.Allowed:
		st.limited.Add(1)
	default:
		st.allowed.Add(1)
		if dec.Result.Remaining*100 < l.Capacity()*nearLimitPercent {
			st.nearLimit.Add(1)
		}
	}
}

// countEnding records the end of a holding.
func (st *policyStats) countEnding(e *Ending) {
	switch {
	case st == nil || e.Reason != "":
	case e.Found:
		st.released.Add(1)
	default:
		st.notHeld.Add(1)
	}
}

// countTop adds one decision of the counter key to the hottest values.
func (st *policyStats) countTop(now time.Time, key store.Key, p *compiled.Policy, entries []compiled.Entry, dec *Decision) {
	if st == nil || st.top == nil || dec.Reason != "" {
		return
	}
	st.top.add(now, key, p, entries, !dec.Result.Allowed)
}

// PolicyStats returns the decision counts of the loaded snapshot's
// policies since the process started, sorted by namespace and name.
func (s *Service) PolicyStats() []PolicyStats {
	l := s.loaded.Load()
	now := s.clock()
	out := make([]PolicyStats, 0, len(l.stats))
	for _, st := range l.stats {
		var hot []HotValue
		var since time.Time
		if st.top != nil {
			hot, since = st.top.report(now)
		}
		out = append(out, PolicyStats{
			Hottest: hot, HottestSince: since,
			UID: st.uid, Namespace: st.namespace, Name: st.name, Generation: st.generation.Load(),
			Allowed: st.allowed.Load(), Limited: st.limited.Load(), ShadowLimited: st.shadowLimited.Load(),
			FailedOpen: st.failedOpen.Load(), FailedClosed: st.failedClosed.Load(), LocalFallback: st.localFallback.Load(),
			NearLimit: st.nearLimit.Load(), SoftLimited: st.softLimited.Load(), Penalized: st.penalized.Load(),
			Refused:  st.refused.Load(),
			Released: st.released.Load(), NotHeld: st.notHeld.Load(),
		})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}
