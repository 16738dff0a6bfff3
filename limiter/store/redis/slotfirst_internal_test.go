package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// A new store's first map is the answer that knows the highest config
// epoch among those in hand when the grace after the first one ends (or
// the caller's deadline does): a restarted old primary that answers first
// with its old epoch loses to its heir's later answer. The choice alone,
// on answers as the fetch's goroutines send them: the fetches against real
// servers are in rejoin_stale_test.go (TestIsolatedStalePrimary).
func TestFirstMapTakesTheHighestEpoch(t *testing.T) {
	mapOf := func(primary string) []goredis.ClusterSlot {
		return []goredis.ClusterSlot{{Start: 0, End: Slots - 1, Nodes: []goredis.ClusterNode{{Addr: primary}}}}
	}
	const stale, heir, other = "10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"
	refused := errors.New("dial tcp: connection refused")
	cases := []struct {
		name    string
		answers []answer
		want    string // the taken map's primary; "" for none
		wantErr error
	}{
		{"the stale node first, the heir after", []answer{{stale, mapOf(stale), nil, 3}, {heir, mapOf(heir), nil, 7}}, heir, nil},
		{"the heir first", []answer{{heir, mapOf(heir), nil, 7}, {stale, mapOf(stale), nil, 3}}, heir, nil},
		{"equal epochs: the first", []answer{{other, mapOf(other), nil, 7}, {heir, mapOf(heir), nil, 7}}, other, nil},
		{"an epoch not known loses", []answer{{other, mapOf(other), nil, -1}, {heir, mapOf(heir), nil, 2}}, heir, nil},
		{"a failed node is passed over", []answer{{heir, nil, refused, -1}, {stale, mapOf(stale), nil, 3}}, stale, nil},
		{"none answers", []answer{{heir, nil, refused, -1}, {stale, nil, refused, -1}}, "", refused},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ss := newSlotSource([]string{stale, heir, other}, time.Second, nil)
			if !ss.fresh() {
				t.Fatal("a new source has a map")
			}
			answers := make(chan answer, len(tc.answers))
			for _, a := range tc.answers {
				answers <- a
			}
			slots, err := ss.pickFirst(context.Background(), answers, len(tc.answers))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			got := ""
			if len(slots) > 0 {
				got = slots[0].Nodes[0].Addr
			}
			if got != tc.want {
				t.Fatalf("took %q's map, want %q's", got, tc.want)
			}
			if tc.want != "" && ss.fresh() {
				t.Error("the map taken is not the source's last")
			}
		})
	}
}

// The grace ends the wait: a node that has not answered by then does not
// hold the first map back (it is drained later), and a caller's deadline
// with no answer in hand ends it with the deadline's error.
func TestFirstMapGraceEndsTheWait(t *testing.T) {
	const fast, slow = "10.0.0.1:6379", "10.0.0.2:6379"
	ss := newSlotSource([]string{fast, slow}, time.Second, nil)
	answers := make(chan answer, 2)
	answers <- answer{fast, []goredis.ClusterSlot{{Start: 0, End: Slots - 1, Nodes: []goredis.ClusterNode{{Addr: fast}}}}, nil, 3}
	slots, err := ss.pickFirst(context.Background(), answers, 2) // slow never answers while it waits
	if err != nil || len(slots) == 0 {
		t.Fatalf("with one answer in hand and one node silent: %v, %v; want its map", slots, err)
	}
	answers <- answer{slow, nil, context.DeadlineExceeded, -1} // drained

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	none := make(chan answer)
	if _, err := newSlotSource([]string{slow}, time.Second, nil).pickFirst(ctx, none, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("with the caller gone and no answer: %v, want its context's error", err)
	}
}
