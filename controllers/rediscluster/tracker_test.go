package rediscluster

import (
	"testing"
	"time"
)

func TestTrackerKeepsFirstSighting(t *testing.T) {
	tr := NewTracker()
	t0 := time.Unix(1000, 0)
	if got := tr.failedSince(idA, t0); !got.Equal(t0) {
		t.Fatalf("first sighting %v", got)
	}
	if got := tr.failedSince(idA, t0.Add(time.Minute)); !got.Equal(t0) {
		t.Fatalf("second sighting moved the start to %v", got)
	}
	tr.keepOnly(map[string]bool{idB: true})
	if got := tr.failedSince(idA, t0.Add(time.Hour)); !got.Equal(t0.Add(time.Hour)) {
		t.Fatalf("a node that recovered kept its old failure start %v", got)
	}
}

func TestRangesString(t *testing.T) {
	if got := rangesString([][2]int{{0, 5460}, {7, 7}}); got != "0-5460,7" {
		t.Fatal(got)
	}
}
