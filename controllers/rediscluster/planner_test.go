package rediscluster

import (
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
)

func ownerOf(ranges [][2]int) []int {
	o := make([]int, SlotCount)
	for i := range o {
		o[i] = -1
	}
	for sh, r := range ranges {
		for s := r[0]; s <= r[1]; s++ {
			o[s] = sh
		}
	}
	return o
}

func counts(owner []int, shards int) []int {
	c := make([]int, shards)
	for _, o := range owner {
		if o >= 0 {
			c[o]++
		}
	}
	return c
}

func spread(c []int) int {
	lo, hi := c[0], c[0]
	for _, v := range c {
		lo, hi = min(lo, v), max(hi, v)
	}
	return hi - lo
}

func TestEvenRanges(t *testing.T) {
	for n := 1; n <= 64; n++ {
		r := EvenRanges(n)
		owner := ownerOf(r)
		for s, o := range owner {
			if o < 0 {
				t.Fatalf("n=%d: slot %d has no shard", n, s)
			}
		}
		if d := spread(counts(owner, n)); d > 1 {
			t.Fatalf("n=%d: counts differ by %d", n, d)
		}
	}
	if got, want := EvenRanges(3), [][2]int{{0, 5460}, {5461, 10921}, {10922, 16383}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("EvenRanges(3) = %v, want %v", got, want)
	}
}

// minimalMoves is the fewest slots that must change shard to reach an even
// spread: every shard above the larger share gives its excess, and the
// total%n largest shards may keep one more.
func minimalMoves(have []int, total int) int {
	n := len(have)
	sorted := append([]int(nil), have...)
	sort.Sort(sort.Reverse(sort.IntSlice(sorted)))
	moves := 0
	for i, h := range sorted {
		want := total / n
		if i < total%n {
			want++
		}
		moves += max(0, h-want)
	}
	return moves
}

func checkPlan(t *testing.T, owner []int, shards int) []SlotMove {
	t.Helper()
	moves := PlanMoves(owner, shards)
	after := Apply(owner, moves)
	moved := 0
	seen := map[int]bool{}
	for _, m := range moves {
		if m.First > m.Last || m.FromShard == m.ToShard {
			t.Fatalf("bad move %+v", m)
		}
		for s := m.First; s <= m.Last; s++ {
			if seen[s] {
				t.Fatalf("slot %d moved twice", s)
			}
			seen[s] = true
			if owner[s] != m.FromShard {
				t.Fatalf("move %+v: slot %d is shard %d's", m, s, owner[s])
			}
		}
		moved += m.Slots()
	}
	total := 0
	for s, o := range after {
		if (o < 0) != (owner[s] < 0) {
			t.Fatalf("slot %d: owner %d became %d", s, owner[s], o)
		}
		if o >= 0 {
			total++
		}
	}
	if d := spread(counts(after, shards)); d > 1 {
		t.Fatalf("after the plan counts %v differ by %d", counts(after, shards), d)
	}
	if want := minimalMoves(counts(owner, shards), total); moved != want {
		t.Fatalf("plan moves %d slots, the fewest is %d", moved, want)
	}
	if again := PlanMoves(owner, shards); !reflect.DeepEqual(again, moves) {
		t.Fatalf("plan not deterministic")
	}
	if rest := PlanMoves(after, shards); len(rest) != 0 {
		t.Fatalf("a balanced map still plans %v", rest)
	}
	return moves
}

func TestPlanMovesScaleOut(t *testing.T) {
	for from := 3; from <= 12; from++ {
		for to := from; to <= from+5; to++ {
			checkPlan(t, ownerOf(EvenRanges(from)), to)
		}
	}
	moves := checkPlan(t, ownerOf(EvenRanges(3)), 4)
	moved := 0
	for _, m := range moves {
		moved += m.Slots()
		if m.ToShard != 3 {
			t.Fatalf("3->4 moves into shard %d: %+v", m.ToShard, m)
		}
	}
	if moved != 4096 {
		t.Fatalf("3->4 moves %d slots, want 4096", moved)
	}
}

// TestPlanMovesProperties checks random ownership maps, including holes
// and lopsided shards.
func TestPlanMovesProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		shards := 1 + rng.IntN(10)
		owner := make([]int, SlotCount)
		bias := rng.IntN(shards)
		for s := range owner {
			switch r := rng.IntN(10); {
			case r == 0:
				owner[s] = -1
			case r < 4:
				owner[s] = bias
			default:
				owner[s] = rng.IntN(shards)
			}
		}
		checkPlan(t, owner, shards)
	}
}

// TestPlanResumes: a plan cut after any number of moves, replanned from
// the map as it is then, finishes the spread without moving any slot back.
func TestPlanResumes(t *testing.T) {
	owner := ownerOf(EvenRanges(3))
	full := PlanMoves(owner, 5)
	for cut := 0; cut <= len(full); cut++ {
		mid := Apply(owner, full[:cut])
		rest := checkPlan(t, mid, 5)
		if got := Apply(mid, rest); !reflect.DeepEqual(counts(got, 5), counts(Apply(owner, full), 5)) {
			t.Fatalf("cut %d: counts %v", cut, counts(got, 5))
		}
	}
}
