package redis

import (
	"context"
	"slices"
	"strconv"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
)

// The shard map groups a real cluster's CLUSTER SLOTS by primary: a
// breaker per shard named by its slots, every key routed to its shard's;
// an unchanged shard keeps its breaker, a changed one gets a new breaker
// and the old one retires; unassigned slots get one of their own.
func TestShardMapFollowsClusterSlots(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	slots, err := c.Nodes[0].Client(t).ClusterSlots(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	env, _ := testEnv(t, BreakerOptions{Failures: 1}, c.Nodes[0].Addr)
	sh := newShards(env, "sl", "0-16383", logger(nil))
	initial := sh.current.Load().breakers[0]
	sh.install(slots)

	names := func() []string {
		var n []string
		for _, b := range sh.current.Load().breakers {
			n = append(n, b.name)
		}
		slices.SortFunc(n, func(a, b string) int { return firstSlot(a) - firstSlot(b) })
		return n
	}
	if want := []string{c.RangeName(0), c.RangeName(1), c.RangeName(2)}; !slices.Equal(names(), want) {
		t.Fatalf("breakers %v, want one per shard %v", names(), want)
	}
	select {
	case <-initial.retired:
	default:
		t.Error("the breaker of the map before the cluster's was not retired")
	}
	for i := range 200 {
		k := storetest.KeyFor(t, strconv.Itoa(i))
		if got, want := sh.breakerFor(k).name, c.RangeName(c.ShardOf(keySlot(k))); got != want {
			t.Fatalf("key in slot %d routed to breaker %s, want %s", keySlot(k), got, want)
		}
	}
	for _, b := range sh.current.Load().breakers {
		if b.probeKey == "" || c.ShardOf(Slot(b.probeKey)) != c.ShardOf(firstSlot(b.name)) {
			t.Errorf("breaker %s probes %q, in slot %d: not its shard", b.name, b.probeKey, Slot(b.probeKey))
		}
	}

	before := slices.Clone(sh.current.Load().breakers)
	sh.install(slots) // the same map again, as every refresh
	if !slices.Equal(before, sh.current.Load().breakers) {
		t.Error("reinstalling the same slots replaced breakers")
	}

	// Shard 2's slots move to shard 1's primary; shard 0's are unassigned.
	var primary1 goredis.ClusterNode
	for _, r := range slots {
		if c.ShardOf(int(r.Start)) == 1 {
			primary1 = r.Nodes[0]
		}
	}
	var moved []goredis.ClusterSlot
	for _, r := range slots {
		switch c.ShardOf(int(r.Start)) {
		case 1:
			moved = append(moved, r)
		case 2:
			r.Nodes = []goredis.ClusterNode{primary1}
			moved = append(moved, r)
		}
	}
	sh.install(moved)
	merged := c.RangeName(1) + "," + c.RangeName(2)
	if c.Ranges[1][1]+1 == c.Ranges[2][0] {
		merged = strconv.Itoa(c.Ranges[1][0]) + "-" + strconv.Itoa(c.Ranges[2][1])
	}
	if want := []string{c.RangeName(0), merged}; !slices.Equal(names(), want) {
		t.Fatalf("after the move: breakers %v, want %v (the unassigned slots, then the merged shard)", names(), want)
	}
	for _, b := range before {
		select {
		case <-b.retired:
		default:
			if b.name != c.RangeName(0) {
				t.Errorf("breaker %s of a changed shard was not retired", b.name)
			}
		}
	}
	// A breaker is named by its slots alone: shard 0's, now unassigned,
	// keeps its breaker, as a failover does.
	if b := sh.current.Load().breakers[0]; b.name != c.RangeName(0) || !slices.Contains(before, b) {
		t.Errorf("the unassigned slots %s got a new breaker", b.name)
	}
}
