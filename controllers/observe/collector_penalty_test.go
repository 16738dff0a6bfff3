package observe

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// Penalized denials (spec.penalty) are summed over pods into
// status.enforcement.penalized, apart from limited; a policy without a
// penalty that never penalized shows none.
func TestCollectorPenalized(t *testing.T) {
	pols := []v1beta1.RateLimitPolicy{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ban", UID: "uid-ban"},
			Spec: v1beta1.RateLimitPolicySpec{Limit: v1beta1.Limit{Type: v1beta1.LimitRate, Rate: &v1beta1.RateLimit{Penalty: &v1beta1.Penalty{Duration: "1m"}}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "plain", UID: "uid-plain"}},
	}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	c := &Collector{Window: 5 * time.Minute, MinWrite: 10 * time.Second, now: func() time.Time { return now }}
	c.defaults()
	c.unread = map[types.NamespacedName][]string{}
	served := map[string]string{"uid-ban": "ns/ban", "uid-plain": "ns/plain"}
	pod := func(boot string, limited, penalized int64) *limiterwire.Stats {
		return &limiterwire.Stats{BootID: boot, StartedAt: now.Add(-time.Second), Policies: []limiterwire.PolicyStats{
			{UID: "uid-ban", Allowed: 10, Limited: limited, Penalized: penalized},
			{UID: "uid-plain", Allowed: 3, Limited: 1},
		}}
	}
	c.record(now, "a", pod("a1", 2, 5), served)
	c.record(now, "b", pod("b1", 1, 7), served)
	err := c.writeEach(context.Background(), now, pols, func(_ context.Context, pol *v1beta1.RateLimitPolicy, e *v1beta1.EnforcementStatus) error {
		pol.Status.Enforcement = e.DeepCopy()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ban, plain := pols[0].Status.Enforcement, pols[1].Status.Enforcement
	if ban == nil || ptr.Deref(ban.Penalized, -1) != 12 || ptr.Deref(ban.Limited, -1) != 3 || ptr.Deref(ban.Allowed, -1) != 20 {
		t.Errorf("ns/ban: %+v, want 12 penalized, 3 limited, 20 allowed", ban)
	}
	if plain == nil || plain.Penalized != nil || ptr.Deref(plain.Limited, -1) != 2 {
		t.Errorf("ns/plain: %+v, want no penalized count and 2 limited", plain)
	}
}
