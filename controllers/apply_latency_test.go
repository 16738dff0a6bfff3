package controllers

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// histogramSamples reads a histogram's sample count and sum.
func histogramSamples(t testing.TB, h prometheus.Histogram) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

func TestApplyLatency(t *testing.T) {
	now := time.Unix(1000, 0)
	a := applyLatency{now: func() time.Time { return now }}
	enforced := func(gen int64) []metav1.Condition {
		return []metav1.Condition{{Type: v1beta1.EnforcedCondition, Status: metav1.ConditionTrue, ObservedGeneration: gen}}
	}
	pol := func(gen int64, conds []metav1.Condition) *v1beta1.RateLimitPolicy {
		return &v1beta1.RateLimitPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: types.UID("u1"), Generation: gen},
			Status:     v1beta1.RateLimitPolicyStatus{Conditions: conds},
		}
	}
	count0, sum0 := histogramSamples(t, applyToEnforcedSeconds)
	observed := func(wantCount uint64, wantSum float64) {
		t.Helper()
		c, s := histogramSamples(t, applyToEnforcedSeconds)
		if c-count0 != wantCount || s-sum0 != wantSum {
			t.Fatalf("histogram gained %d samples summing %v, want %d summing %v", c-count0, s-sum0, wantCount, wantSum)
		}
	}

	// Found enforced at its generation (an operator restart): not measured.
	a.saw(pol(3, enforced(3)))
	now = now.Add(time.Second)
	a.wrote(pol(3, enforced(3)), enforced(3))
	observed(0, 0)

	// An edit: seen at t, enforced 250ms later, measured once.
	a.saw(pol(4, enforced(3)))
	now = now.Add(100 * time.Millisecond)
	a.saw(pol(4, enforced(3))) // a second reconcile does not restart the clock
	a.wrote(pol(4, enforced(3)), []metav1.Condition{{Type: v1beta1.EnforcedCondition, Status: metav1.ConditionFalse, ObservedGeneration: 4}})
	now = now.Add(150 * time.Millisecond)
	a.wrote(pol(4, enforced(3)), enforced(4))
	a.wrote(pol(4, enforced(4)), enforced(4))
	observed(1, 0.25)

	// Deleted and created again under the same name: a new clock.
	a.forget(types.NamespacedName{Namespace: "ns", Name: "p"})
	p := pol(1, nil)
	p.UID = "u2"
	a.saw(p)
	now = now.Add(500 * time.Millisecond)
	a.wrote(p, enforced(1))
	observed(2, 0.75)
}

// ApplyToEnforcedSamples gives the external tests the sample count and sum
// of sluice_operator_apply_to_enforced_seconds.
func ApplyToEnforcedSamples(t testing.TB) (uint64, float64) {
	return histogramSamples(t, applyToEnforcedSeconds)
}
