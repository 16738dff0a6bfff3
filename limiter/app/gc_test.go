package app_test

import (
	"math"
	"testing"

	"github.com/sluice-dev/sluice/limiter/app"
)

// TestGCPercent: GOGC is raised only under a memory limit, and never over
// a GOGC the process was given.
func TestGCPercent(t *testing.T) {
	for _, tc := range []struct {
		gogc     string
		memLimit int64
		want     int
		set      bool
	}{
		{"", math.MaxInt64, 0, false},               // no limit: Go's default
		{"", 241591860, app.LimitedGCPercent, true}, // the operator's GOMEMLIMIT of 256Mi
		{"100", 241591860, 0, false},                // GOGC given: it wins
		{"off", 241591860, 0, false},
		{"50", math.MaxInt64, 0, false},
	} {
		got, set := app.GCPercent(tc.gogc, tc.memLimit)
		if got != tc.want || set != tc.set {
			t.Errorf("GCPercent(%q, %d) = %d, %v; want %d, %v", tc.gogc, tc.memLimit, got, set, tc.want, tc.set)
		}
	}
}
