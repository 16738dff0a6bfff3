package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
)

// A decision of a new store that loads the slot map itself (go-redis's
// ClusterSlots with no map yet) while the store's own first load runs:
// when its answers all know an older config epoch than one heard (gossip
// had not yet told them the epoch another node named), it takes the map
// the store's first load takes, rather than failing the decision. A CI run
// under load saw such a decision on a healthy new cluster fail open,
// uncounted.
func TestFirstDecisionTakesTheStoresFirstMap(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	ss := newSlotSource(c.Addrs(), time.Second, func(addr string) *goredis.Client {
		return goredis.NewClient(&goredis.Options{Addr: addr, DisableIdentity: true})
	})
	defer ss.close()
	// An epoch above any this cluster knows, as if heard from a node that
	// learned of a newer one first.
	ss.mu.Lock()
	ss.epoch, ss.epochAt = 1<<40, time.Now()
	ss.mu.Unlock()
	if _, err := ss.fetch(context.Background()); !errors.Is(err, errStale) {
		t.Fatalf("a fetch with every answer below the epoch heard: %v, want errStale", err)
	}
	want := []goredis.ClusterSlot{{Start: 0, End: Slots - 1, Nodes: []goredis.ClusterNode{{Addr: c.Addrs()[0]}}}}
	got := make(chan error, 1)
	var slots []goredis.ClusterSlot
	go func() {
		var err error
		slots, err = ss.forClient(context.Background())
		got <- err
	}()
	// The store's first load takes its map once the decision's own fetch
	// has most likely been refused (if not, the decision finds the map
	// taken: either way it must not fail).
	time.Sleep(200 * time.Millisecond)
	ss.took(want)
	if err := <-got; err != nil {
		t.Fatalf("the decision's own load failed beside the store's first map: %v", err)
	}
	if len(slots) != 1 || slots[0].End != Slots-1 {
		t.Fatalf("the decision's load took %v, want the store's first map", slots)
	}
}
