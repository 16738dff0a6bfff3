package config

import (
	"testing"

	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// A level's reserve is the capacity less its share, rounded down: a share
// admits at most share% of the capacity.
func TestCompilePriority(t *testing.T) {
	p := validPolicy()
	rate(p).Algorithm = ptr.To(v1beta1.TokenBucket)
	rate(p).Burst = ptr.To[int64](7)
	rate(p).Priority = &v1beta1.PriorityShedding{Default: "default", Levels: []v1beta1.PriorityLevel{
		{Value: "critical", Share: 100}, {Value: "default", Share: 80}, {Value: "batch", Share: 50}, {Value: "never", Share: 0},
	}}
	snap, err := Compile([]v1beta1.RateLimitPolicy{*p})
	if err != nil {
		t.Fatal(err)
	}
	pr := snap.Policies[0].Priority
	// Of 7: 7, floor(5.6) = 5, floor(3.5) = 3 and 0 may be used.
	for i, want := range []int64{0, 2, 4, 7} {
		if got := pr.Levels[i].Headroom; got != want {
			t.Errorf("%s: reserve %d, want %d", pr.Levels[i].Value, got, want)
		}
	}
	for _, tc := range []struct {
		entries []Entry
		want    string
	}{
		{[]Entry{{Key: "user_id", Value: "u"}, {Key: "priority", Value: "batch"}}, "batch"},
		{[]Entry{{Key: "priority", Value: "critical"}, {Key: "priority", Value: "batch"}}, "critical"}, // the first entry counts
		{[]Entry{{Key: "user_id", Value: "u"}}, "default"},                                             // none
		{[]Entry{{Key: "priority", Value: "urgent"}}, "default"},                                       // unknown
		{[]Entry{{Key: "Priority", Value: "critical"}}, "default"},                                     // keys are case-sensitive
	} {
		if got := pr.Levels[pr.Level(tc.entries)].Value; got != tc.want {
			t.Errorf("%v: level %s, want %s", tc.entries, got, tc.want)
		}
	}
}
