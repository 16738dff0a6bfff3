package compiled_test

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/compiled"
)

func policy(name, domain string, period time.Duration, limit int64, b compiled.Behaviours) *compiled.Policy {
	return &compiled.Policy{Namespace: "ns", Name: name, Domain: domain, Descriptors: []compiled.Descriptor{{Key: "k"}},
		Limit: algo.Limit{Algorithm: algo.FixedWindow, Limit: limit, Burst: limit, Period: period}, Behaviours: b}
}

// TestDomainProperties: a domain knows whether some policy of it is a
// Quota or Replaces others, so that requests elsewhere skip the work; an
// ordinary domain matches every policy and decides no own limits.
func TestDomainProperties(t *testing.T) {
	snap := compiled.New([]*compiled.Policy{
		policy("q", "quotas", time.Minute, 1, compiled.Behaviours{Quota: true}),
		policy("r", "replacing", time.Minute, 1, compiled.Behaviours{Replacement: &compiled.Replacement{Replaces: []string{"x"}}}),
		policy("n", "replacing", time.Minute, 1, compiled.Behaviours{Replacement: &compiled.Replacement{Name: "x"}}),
		policy("p", "plain", time.Minute, 1, compiled.Behaviours{Unlimited: true, DryRun: true, ReportShadow: true, Untenanted: true, HitStats: true}),
	})
	for _, tc := range []struct {
		domain           string
		quotas, replaces bool
	}{{"quotas", true, false}, {"replacing", false, true}, {"plain", false, false}, {"none", false, false}} {
		d := snap.Domain(tc.domain)
		if d.HasQuotas() != tc.quotas || d.HasReplaces() != tc.replaces {
			t.Errorf("domain %s: HasQuotas %v, HasReplaces %v; want %v, %v", tc.domain, d.HasQuotas(), d.HasReplaces(), tc.quotas, tc.replaces)
		}
		if d.DecidesOwnLimits() || d.OwnLimitPolicy(2) != nil || d.Matching() != compiled.MatchEvery {
			t.Errorf("domain %s decides own limits, or is matched as a tree", tc.domain)
		}
	}
}

// TestOwnLimitsAndTreeMatching: a domain given a tree (SetERL) is matched
// as one, and decides a request's own limit by its policy of the unit.
func TestOwnLimitsAndTreeMatching(t *testing.T) {
	own := policy("own-minute", "tree", time.Minute, 0, compiled.Behaviours{})
	limit := policy("k", "tree", time.Minute, 5, compiled.Behaviours{})
	snap := compiled.New([]*compiled.Policy{own, limit})
	tree := compiled.NewERLTree()
	tree.Overrides[2] = own
	tree.Add([]compiled.ERLLevel{{Name: "k", Key: "k"}}, limit)
	snap.SetERL("tree", tree)
	d := snap.Domain("tree")
	if !d.DecidesOwnLimits() || d.OwnLimitPolicy(2) != own || d.OwnLimitPolicy(1) != nil || d.OwnLimitPolicy(-1) != nil || d.OwnLimitPolicy(8) != nil {
		t.Fatalf("own limits: decides %v, minute %v, second %v", d.DecidesOwnLimits(), d.OwnLimitPolicy(2), d.OwnLimitPolicy(1))
	}
	if d.Matching() != compiled.MatchTree {
		t.Fatal("a domain with a tree is not matched as one")
	}
	// Policy own-minute carries key k too, but the tree alone matches.
	if m := d.AppendMatches(nil, []compiled.Entry{{Key: "k", Value: "v"}}); len(m) != 1 || m[0] != limit {
		t.Fatalf("matches %v, want the tree's one", m)
	}
}

// TestUnitRate: a policy's limit is a rate in an RLS unit when its period
// is one unit's length and the limit fits.
func TestUnitRate(t *testing.T) {
	for _, tc := range []struct {
		period time.Duration
		limit  int64
		want   compiled.UnitRate
		ok     bool
	}{
		{time.Second, 3, compiled.UnitRate{RequestsPerUnit: 3, Unit: 1}, true},
		{time.Hour, 10, compiled.UnitRate{RequestsPerUnit: 10, Unit: 3}, true},
		{7 * 24 * time.Hour, 1, compiled.UnitRate{RequestsPerUnit: 1, Unit: 7}, true},
		{30 * 24 * time.Hour, 1, compiled.UnitRate{RequestsPerUnit: 1, Unit: 5}, true},
		{90 * time.Second, 1, compiled.UnitRate{}, false},
		{time.Minute, 1 << 40, compiled.UnitRate{}, false},
	} {
		got, ok := policy("p", "d", tc.period, tc.limit, compiled.Behaviours{}).UnitRate()
		if got != tc.want || ok != tc.ok {
			t.Errorf("%d per %s: %v %v, want %v %v", tc.limit, tc.period, got, ok, tc.want, tc.ok)
		}
	}
}

// TestHitStatsKeyOfPolicy: outside ERL configuration, a policy's hit
// statistics key is its name, never the request's values.
func TestHitStatsKeyOfPolicy(t *testing.T) {
	p := policy("p", "d", time.Minute, 1, compiled.Behaviours{HitStats: true})
	if key, detailed := p.HitStatsKey([]compiled.Entry{{Key: "k", Value: "client-chosen"}}); key != "p" || detailed {
		t.Fatalf("HitStatsKey = %q, %v; want the name", key, detailed)
	}
}
