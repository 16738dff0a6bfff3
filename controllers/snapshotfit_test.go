package controllers

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// largestFit finds the cut whatever the guess, and asks no count twice.
func TestLargestFit(t *testing.T) {
	for _, total := range []int{0, 1, 2, 7, 50} {
		for cut := 0; cut <= total; cut++ {
			for guess := -1; guess <= total+1; guess++ {
				asked := map[int]bool{}
				got := largestFit(total, guess, func(n int) bool {
					if asked[n] {
						t.Fatalf("total %d cut %d guess %d: asked %d twice", total, cut, guess, n)
					}
					if n < 0 || n > total {
						t.Fatalf("total %d: asked %d", total, n)
					}
					asked[n] = true
					return n <= cut
				})
				if got != cut {
					t.Fatalf("total %d cut %d guess %d: got %d", total, cut, guess, got)
				}
			}
		}
	}
}

// fitSnapshot keeps the oldest policies and refuses the newest, by
// creation time then name, whatever order they come in.
func TestFitSnapshotRefusesNewest(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ps []v1alpha1.RateLimitPolicy
	for i, name := range []string{"e", "d", "c", "b", "a"} { // e oldest
		ps = append(ps, v1alpha1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
			CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(i/2) * time.Second))}})
	}
	// Each policy costs 10 bytes: a limit of 35 keeps three.
	build := func(kept []v1alpha1.RateLimitPolicy) builtSnapshot {
		return builtSnapshot{version: fmt.Sprint(len(kept)), stored: 10 * len(kept)}
	}
	reversed := []v1alpha1.RateLimitPolicy{ps[4], ps[3], ps[2], ps[1], ps[0]}
	for _, in := range [][]v1alpha1.RateLimitPolicy{ps, reversed} {
		fit := fitSnapshot(in, 35, -1, false, build)
		var kept, refused []string
		for _, p := range fit.kept {
			kept = append(kept, p.Name)
		}
		for _, p := range fit.refused {
			refused = append(refused, p.Name)
		}
		// e, d at t0; c, b at t0+1s; a at t0+2s: ties go by name.
		if fmt.Sprint(kept) != "[d e b]" || fmt.Sprint(refused) != "[c a]" || fit.version != "3" {
			t.Fatalf("kept %v refused %v version %s", kept, refused, fit.version)
		}
	}
	// An exact hint is trusted: one build.
	builds := 0
	fit := fitSnapshot(ps, 35, 3, true, func(kept []v1alpha1.RateLimitPolicy) builtSnapshot {
		builds++
		return build(kept)
	})
	if builds != 1 || len(fit.kept) != 3 {
		t.Fatalf("%d builds, kept %d", builds, len(fit.kept))
	}
}
