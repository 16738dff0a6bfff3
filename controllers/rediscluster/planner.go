package rediscluster

import "sort"

// EvenRanges splits the slots into n contiguous ranges whose sizes differ
// by at most one: shard i gets EvenRanges(n)[i].
func EvenRanges(n int) [][2]int {
	r := make([][2]int, n)
	for i := range n {
		r[i] = [2]int{i * SlotCount / n, (i+1)*SlotCount/n - 1}
	}
	return r
}

// PlanMoves plans the fewest slot moves that spread the slots evenly over
// shards 0..shards-1. owner[s] is the shard serving slot s (-1: nobody,
// left alone). Shards that serve more than their share give away their
// highest slots to the shards below their share, lowest shard first. The
// plan is deterministic and its moves are contiguous ranges.
func PlanMoves(owner []int, shards int) []SlotMove {
	have := make([]int, shards)
	total := 0
	for _, o := range owner {
		if o >= 0 && o < shards {
			have[o]++
			total++
		}
	}
	want := evenTargets(have, total)
	// Slots each donor gives, highest first within a donor.
	type give struct{ slot, from int }
	var gives []give
	for d := range shards {
		extra := have[d] - want[d]
		for s := len(owner) - 1; s >= 0 && extra > 0; s-- {
			if owner[s] == d {
				gives = append(gives, give{s, d})
				extra--
			}
		}
	}
	sort.Slice(gives, func(i, j int) bool { return gives[i].slot < gives[j].slot })
	var moves []SlotMove
	gi := 0
	for r := range shards {
		for need := want[r] - have[r]; need > 0 && gi < len(gives); need-- {
			g := gives[gi]
			gi++
			if n := len(moves); n > 0 && moves[n-1].ToShard == r && moves[n-1].FromShard == g.from && moves[n-1].Last == g.slot-1 {
				moves[n-1].Last = g.slot
				continue
			}
			moves = append(moves, SlotMove{First: g.slot, Last: g.slot, FromShard: g.from, ToShard: r})
		}
	}
	return moves
}

// evenTargets gives each shard total/n slots, and one more to the
// total%n shards that hold the most (ties: lowest index), which keeps the
// moves fewest.
func evenTargets(have []int, total int) []int {
	n := len(have)
	want := make([]int, n)
	order := make([]int, n)
	for i := range n {
		want[i] = total / n
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return have[order[a]] > have[order[b]] })
	for _, i := range order[:total%n] {
		want[i]++
	}
	return want
}

// Apply returns owner with the moves done.
func Apply(owner []int, moves []SlotMove) []int {
	out := append([]int(nil), owner...)
	for _, m := range moves {
		for s := m.First; s <= m.Last; s++ {
			out[s] = m.ToShard
		}
	}
	return out
}
