package controllers

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

var applyToEnforcedSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
	Name: "sluice_operator_apply_to_enforced_seconds",
	Help: "Time from when the operator first sees a RateLimitPolicy generation to when it sets Enforced=True for it: " +
		"every ready limiter pod of every selecting fleet has loaded it. The watch delay before the operator sees the edit is not included.",
	Buckets: []float64{0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60},
})

func init() { registerMetrics(applyToEnforcedSeconds) }

// applyLatency measures apply-to-enforced latency per policy generation.
// A generation that is already Enforced when the operator first sees it
// (after an operator restart) is not measured: its start is unknown.
type applyLatency struct {
	mu   sync.Mutex
	now  func() time.Time
	seen map[types.NamespacedName]genSeen
}

type genSeen struct {
	uid  types.UID
	gen  int64
	at   time.Time
	done bool // observed, or not measurable
}

// saw notes that the reconciler read p; the first read of a generation
// starts its clock.
func (a *applyLatency) saw(p *v1beta1.RateLimitPolicy) {
	a.mu.Lock()
	defer a.mu.Unlock()
	key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	if s, ok := a.seen[key]; ok && s.uid == p.UID && s.gen == p.Generation {
		return
	}
	if a.seen == nil {
		a.seen = map[types.NamespacedName]genSeen{}
	}
	a.seen[key] = genSeen{uid: p.UID, gen: p.Generation, at: a.clock(), done: isEnforced(p.Status.Conditions, p.Generation)}
}

// wrote is called after a status write of p whose conditions are conds; the
// first write of Enforced=True for the generation observes the latency.
func (a *applyLatency) wrote(p *v1beta1.RateLimitPolicy, conds []metav1.Condition) {
	if !isEnforced(conds, p.Generation) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	s, ok := a.seen[key]
	if !ok || s.done || s.uid != p.UID || s.gen != p.Generation {
		return
	}
	applyToEnforcedSeconds.Observe(a.clock().Sub(s.at).Seconds())
	s.done = true
	a.seen[key] = s
}

// forget drops a deleted policy.
func (a *applyLatency) forget(key types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.seen, key)
}

func (a *applyLatency) clock() time.Time {
	if a.now != nil {
		return a.now()
	}
	return time.Now()
}

func isEnforced(conds []metav1.Condition, gen int64) bool {
	c := meta.FindStatusCondition(conds, v1beta1.EnforcedCondition)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == gen
}
