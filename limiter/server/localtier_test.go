package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policytest"
	"github.com/sluice-dev/sluice/limiter/server"
)

// The admin stats carry a two-tier policy's overshoot bound and decision
// paths, and nothing of the kind for the others.
func TestAdminStatsLocalTier(t *testing.T) {
	srv, snapURL := startAdmin(t, "")
	base := strings.TrimSuffix(snapURL, limiterwire.SnapshotPath)
	policy := func(name, key string, lt *v1alpha1.LocalTier) v1alpha1.RateLimitPolicy {
		return v1alpha1.RateLimitPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec: v1alpha1.RateLimitPolicySpec{Domain: "shop", Descriptors: []v1alpha1.Descriptor{{Key: key}},
				Rate: v1alpha1.Rate{Limit: 100, Period: metav1.Duration{Duration: time.Minute}}, LocalTier: lt},
		}
	}
	snap, err := policytest.Compile([]v1alpha1.RateLimitPolicy{
		policy("tiered", "user", &v1alpha1.LocalTier{Enabled: ptr.To(true), MaxOvershoot: ptr.To(intstr.FromString("3%"))}),
		policy("exact", "ip", nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Swap(snap)
	resp, err := http.Post("http://"+srv.HTTPAddr()+server.CheckPath, "application/json",
		strings.NewReader(`{"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"kim"},{"key":"ip","value":"10.0.0.1"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, body := get(t, base+limiterwire.StatsPath)
	var st limiterwire.Stats
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &st) != nil || len(st.Policies) != 2 {
		t.Fatalf("GET stats: %d %s", resp.StatusCode, body)
	}
	byName := map[string]limiterwire.PolicyStats{}
	for _, p := range st.Policies {
		byName[p.Name] = p
	}
	// The memory store is exact: the decision passed through the tier, and
	// the bound is 0.
	want := limiterwire.LocalTier{OvershootBound: 0, Pods: 1, Exact: 1}
	if lt := byName["tiered"].LocalTier; lt == nil || *lt != want {
		t.Errorf("tiered: localTier %+v, want %+v (%s)", lt, want, body)
	}
	if lt := byName["exact"].LocalTier; lt != nil || strings.Count(string(body), "overshootBound") != 1 {
		t.Errorf("exact: localTier %+v, want none (%s)", lt, body)
	}
}
