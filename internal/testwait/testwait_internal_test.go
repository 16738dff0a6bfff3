package testwait

import (
	"fmt"
	"testing"
	"time"
)

func TestDeadline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		load    float64
		extends int // how often a passed deadline moves before it holds
	}{
		{"idle machine", 0.5, 0},
		{"busy, not loaded", LoadedPerCore, 0},
		{"loaded", LoadedPerCore + 1, MaxExtensions},
		{"load unknown", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Deadline{at: time.Now().Add(time.Hour), within: time.Millisecond, load: func() float64 { return tc.load }}
			var said []string
			logf := func(f string, a ...any) { said = append(said, fmt.Sprintf(f, a...)) }
			if d.Passed(logf) {
				t.Fatal("a deadline an hour away has passed")
			}
			moves := 0
			for {
				d.at = time.Now().Add(-time.Second) // passed
				if d.Passed(logf) {
					break
				}
				if moves++; moves > MaxExtensions {
					t.Fatalf("extended %d times, want at most %d", moves, MaxExtensions)
				}
				if !d.at.After(time.Now()) {
					t.Fatal("an extension left the deadline in the past")
				}
			}
			if moves != tc.extends || len(said) != tc.extends {
				t.Fatalf("extended %d times (said %q), want %d", moves, said, tc.extends)
			}
			if want := time.Duration(1+tc.extends) * time.Millisecond; d.Waited() != want {
				t.Fatalf("waited %v, want %v", d.Waited(), want)
			}
		})
	}
}

func TestLoadPerCore(t *testing.T) {
	if l := LoadPerCore(); l < 0 {
		t.Fatalf("load per core %v", l)
	}
}
