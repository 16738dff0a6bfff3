package store_test

import (
	"context"
	"testing"

	"github.com/sluice-dev/sluice/limiter/store"
)

type kickCount struct{ n int }

func (k *kickCount) Kick() { k.n++ }

// A gather kicks its parked stores once no party runs: when the last
// party parks, or finishes without a store call; each store once, however
// many calls it holds; and a party parking after that is kicked at once.
func TestGatherKicksWhenNoPartyRuns(t *testing.T) {
	var g store.Gather
	g.Reset(3)
	a, b := &kickCount{}, &kickCount{}
	g.Park(a)
	g.Park(a)
	if a.n != 0 {
		t.Fatalf("kicked %d times with a party still running, want 0", a.n)
	}
	g.Done() // the third party called no store
	if a.n != 1 {
		t.Fatalf("kicked %d times once no party runs, want 1", a.n)
	}
	g.Unpark()
	g.Park(b) // a party's next call, the others done or parked
	if b.n != 1 || a.n != 1 {
		t.Fatalf("kicks %d and %d, want the new store kicked once and the first not again", b.n, a.n)
	}
	ctx := store.WithGather(context.Background(), &g)
	if store.GatherFrom(ctx) != &g || store.GatherFrom(context.Background()) != nil {
		t.Error("GatherFrom does not return the gather WithGather set")
	}
}
