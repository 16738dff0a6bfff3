package redisfleet

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// settle reports a change from not ok to ok, and keeps its time while the
// cluster stays ok; an operator that first sees the cluster ok has seen no
// change, and a forgotten fleet starts afresh.
func TestHealthSettle(t *testing.T) {
	var h healthSeen
	f := types.NamespacedName{Namespace: "ns", Name: "f"}
	t0 := time.Date(2026, 11, 26, 5, 0, 0, 0, time.UTC)
	steps := []struct {
		ok       bool
		at       time.Time
		settled  time.Time
		becameOK bool
	}{
		{true, t0, time.Time{}, false},                                  // first seen ok: no change
		{false, t0.Add(time.Second), time.Time{}, false},                // fails
		{true, t0.Add(2 * time.Second), t0.Add(2 * time.Second), true},  // ok again: the change
		{true, t0.Add(3 * time.Second), t0.Add(2 * time.Second), false}, // stays ok: same time
		{false, t0.Add(4 * time.Second), time.Time{}, false},            // fails again
		{true, t0.Add(5 * time.Second), t0.Add(5 * time.Second), true},  // and recovers
	}
	for i, s := range steps {
		settled, became := h.settle(f, s.ok, s.at)
		if !settled.Equal(s.settled) || became != s.becameOK {
			t.Fatalf("step %d (ok=%v): settledAt %v, becameOK %v; want %v, %v", i, s.ok, settled, became, s.settled, s.becameOK)
		}
	}
	h.forget(f)
	if settled, became := h.settle(f, true, t0.Add(time.Minute)); !settled.IsZero() || became {
		t.Fatalf("after forget: settledAt %v, becameOK %v; want zero, false", settled, became)
	}
}

// A fleet keeps its tracker across passes until it is forgotten.
func TestTrackersPerFleet(t *testing.T) {
	var tr trackers
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	if tr.of(a) != tr.of(a) {
		t.Fatal("a fleet got a new tracker on its second pass")
	}
	if tr.of(a) == tr.of(b) {
		t.Fatal("two fleets share a tracker")
	}
	old := tr.of(a)
	tr.forget(a)
	if tr.of(a) == old {
		t.Fatal("a forgotten fleet kept its tracker")
	}
}
