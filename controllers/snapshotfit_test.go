package controllers

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	var ps []v1beta1.RateLimitPolicy
	for i, name := range []string{"e", "d", "c", "b", "a"} { // e oldest
		ps = append(ps, v1beta1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
			CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(i/2) * time.Second))}})
	}
	// Each policy costs 10 bytes: a limit of 35 keeps three.
	build := func(kept []v1beta1.RateLimitPolicy) builtSnapshot {
		return builtSnapshot{version: fmt.Sprint(len(kept)), stored: 10 * len(kept)}
	}
	reversed := []v1beta1.RateLimitPolicy{ps[4], ps[3], ps[2], ps[1], ps[0]}
	for _, in := range [][]v1beta1.RateLimitPolicy{ps, reversed} {
		fit := fitSnapshot(in, 35, unlimitedShare, tenBytes, -1, false, build)
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
	fit := fitSnapshot(ps, 35, unlimitedShare, tenBytes, 3, true, func(kept []v1beta1.RateLimitPolicy) builtSnapshot {
		builds++
		return build(kept)
	})
	if builds != 1 || len(fit.kept) != 3 {
		t.Fatalf("%d builds, kept %d", builds, len(fit.kept))
	}
}

func unlimitedShare(string) namespaceShare { return namespaceShare{policies: 1 << 30, bytes: 1 << 30} }

func tenBytes(*v1beta1.RateLimitPolicy) int { return 10 }

// fitSnapshot with tenant shares: a namespace over its share (policies or
// bytes) loses its own newest policies, never another's; and when what is
// within the shares still does not fit, the namespace holding the most
// bytes loses its newest first, whatever the age of the others' policies.
func TestFitSnapshotTenantShares(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// A policy is "ns/name:size@second".
	type pol struct {
		ns, name string
		size, at int
	}
	cases := []struct {
		name   string
		in     []pol
		limit  int
		shares map[string]namespaceShare // others: unlimited
		kept   string
		full   string // refused for want of room
		over   string // refused over their namespace's share
	}{{
		name:   "policy count share",
		in:     []pol{{"a", "a1", 10, 0}, {"a", "a2", 10, 1}, {"a", "a3", 10, 2}, {"b", "b1", 10, 3}},
		limit:  1000,
		shares: map[string]namespaceShare{"a": {policies: 2, bytes: 1000}},
		kept:   "[a/a1 a/a2 b/b1]", full: "[]", over: "[a/a3]",
	}, {
		name:   "byte share: the namespace's newest go, even small ones after a large one",
		in:     []pol{{"a", "a1", 10, 0}, {"a", "a2", 50, 1}, {"b", "b1", 10, 2}, {"a", "a3", 5, 3}},
		limit:  1000,
		shares: map[string]namespaceShare{"a": {policies: 100, bytes: 40}},
		kept:   "[a/a1 b/b1]", full: "[]", over: "[a/a2 a/a3]",
	}, {
		// The attack: A's old policy grew; age alone would refuse b1.
		name:   "an edit to an old policy costs its own namespace",
		in:     []pol{{"a", "a1", 60, 0}, {"a", "a2", 10, 1}, {"b", "b1", 10, 2}},
		limit:  75,
		shares: map[string]namespaceShare{"a": {policies: 100, bytes: 60}, "b": {policies: 100, bytes: 60}},
		kept:   "[a/a1 b/b1]", full: "[]", over: "[a/a2]",
	}, {
		name:  "oversubscribed: the namespace holding the most bytes loses first",
		in:    []pol{{"a", "a1", 20, 0}, {"a", "a2", 20, 1}, {"a", "a3", 20, 2}, {"b", "b1", 10, 3}, {"b", "b2", 10, 4}},
		limit: 55,
		kept:  "[a/a1 b/b1 b/b2]", full: "[a/a2 a/a3]", over: "[]",
	}, {
		name:  "oversubscribed, equal bytes: the newer policy goes",
		in:    []pol{{"a", "a1", 10, 0}, {"b", "b1", 10, 1}, {"a", "a2", 10, 2}, {"b", "b2", 10, 3}},
		limit: 35,
		kept:  "[a/a1 b/b1 a/a2]", full: "[b/b2]", over: "[]",
	}, {
		name:  "one namespace: the newest go, as before",
		in:    []pol{{"a", "a1", 10, 0}, {"a", "a2", 30, 1}, {"a", "a3", 10, 2}},
		limit: 45,
		kept:  "[a/a1 a/a2]", full: "[a/a3]", over: "[]",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sizes := map[string]int{}
			var in []v1beta1.RateLimitPolicy
			for _, p := range tc.in {
				in = append(in, v1beta1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: p.name,
					CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(p.at) * time.Second))}})
				sizes[p.ns+"/"+p.name] = p.size
			}
			size := func(p *v1beta1.RateLimitPolicy) int { return sizes[p.Namespace+"/"+p.Name] }
			build := func(kept []v1beta1.RateLimitPolicy) builtSnapshot {
				n := 0
				for i := range kept {
					n += size(&kept[i])
				}
				return builtSnapshot{stored: n}
			}
			share := func(ns string) namespaceShare {
				if s, ok := tc.shares[ns]; ok {
					return s
				}
				return unlimitedShare(ns)
			}
			names := func(ps []v1beta1.RateLimitPolicy) string {
				out := []string{}
				for _, p := range ps {
					out = append(out, p.Namespace+"/"+p.Name)
				}
				return fmt.Sprint(out)
			}
			fit := fitSnapshot(in, tc.limit, share, size, -1, false, build)
			if got := names(fit.kept); got != tc.kept {
				t.Errorf("kept %s, want %s", got, tc.kept)
			}
			if got := names(fit.refused); got != tc.full {
				t.Errorf("refused for room %s, want %s", got, tc.full)
			}
			if got := names(fit.overBudget); got != tc.over {
				t.Errorf("over budget %s, want %s", got, tc.over)
			}
			for _, p := range fit.overBudget {
				if msg := fit.budgetMessage[p.Namespace]; msg == "" || !strings.Contains(msg, "namespace "+p.Namespace+" is over its budget") {
					t.Errorf("%s/%s: message %q", p.Namespace, p.Name, msg)
				}
			}
		})
	}
}
