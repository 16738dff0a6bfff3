package redis

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// A node that did not answer is not asked for the slot map again while
// maps list it (a stopped primary before its failover), nor once they
// leave it out (failed over); it is asked again when a map lists it after
// leaving it out (back, as a replica). The bookkeeping alone: the fetches
// themselves run against real servers in failover_test.go.
func TestSlotSourceDeadNodeUntilBack(t *testing.T) {
	slotsOf := func(addrs ...string) []goredis.ClusterSlot {
		var nodes []goredis.ClusterNode
		for _, a := range addrs {
			nodes = append(nodes, goredis.ClusterNode{Addr: a})
		}
		return []goredis.ClusterSlot{{Start: 0, End: Slots - 1, Nodes: nodes}}
	}
	ss := newSlotSource([]string{"10.0.0.1:6379"}, time.Second, nil)
	asked := func() []string {
		c := ss.candidates()
		ss.asking = map[string]bool{}
		slices.Sort(c)
		return c
	}
	const seed, primary, replica = "10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"
	ss.took(slotsOf(primary, replica))
	if got := asked(); !slices.Equal(got, []string{seed, primary, replica}) {
		t.Fatalf("asked %v, want the seed and every node of the map", got)
	}
	ss.failed(primary, context.DeadlineExceeded)
	ss.failed(seed, goredis.Nil) // an answer, if not a map: not dead
	steps := []struct {
		what   string
		listed []string
		want   []string
	}{
		{"still listed (no failover yet)", []string{primary, replica}, []string{seed, replica}},
		{"left out (its replica took over)", []string{replica}, []string{seed, replica}},
		{"listed again (back as a replica)", []string{replica, primary}, []string{seed, primary, replica}},
	}
	for _, s := range steps {
		ss.took(slotsOf(s.listed...))
		if got := asked(); !slices.Equal(got, s.want) {
			t.Errorf("%s: asked %v, want %v", s.what, got, s.want)
		}
	}
	// Every node dead: all are asked rather than none.
	for _, a := range []string{seed, primary, replica} {
		ss.failed(a, context.DeadlineExceeded)
	}
	if got := asked(); len(got) != 3 {
		t.Errorf("every node dead: asked %v, want all 3", got)
	}
}

// go-redis is handed loopback nodes under a name it does not rewrite, and
// dials the address the map named; other addresses pass as they are.
func TestLoopbackNodesKeepTheirAddress(t *testing.T) {
	for _, addr := range []string{"127.0.0.5:6379", "127.0.0.6:6379", "[::1]:7000", "10.0.0.1:6379", "redis-0.redis:6379"} {
		handed := forGoRedis([]goredis.ClusterSlot{{Start: 0, End: 1, Nodes: []goredis.ClusterNode{{Addr: addr}}}})
		got := handed[0].Nodes[0].Addr
		if back := realAddr(got); back != addr {
			t.Errorf("%s handed as %s, dialled as %s", addr, got, back)
		}
		host, _, _ := net.SplitHostPort(got)
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			t.Errorf("%s handed as a loopback IP, %s: go-redis strips it", addr, got)
		}
	}
}

// An answer is judged by the highest config epoch its node's CLUSTER NODES
// names: one below the highest heard is not taken; one not known (its
// CLUSTER NODES failed) only while none was heard; an answer not taken
// that knew more than the map taken asks for a load.
func TestSlotSourceEpochs(t *testing.T) {
	const nodes = "a1 10.0.0.1:6379@16379 myself,master - 0 0 3 connected 0-5460\n" +
		"b2 10.0.0.2:6379@16379 slave a1 0 1 3 connected\n" +
		"c3 10.0.0.3:6379@16379 master - 0 1 7 connected 5461-16383\n"
	if got := maxConfigEpoch(nodes); got != 7 {
		t.Errorf("maxConfigEpoch = %d, want 7", got)
	}
	if got := maxConfigEpoch("ERR garbage\n"); got != -1 {
		t.Errorf("maxConfigEpoch of no node line = %d, want -1", got)
	}
	newer := 0
	ss := newSlotSource(nil, time.Second, nil)
	ss.onNewer = func() { newer++ }
	some := []goredis.ClusterSlot{{Start: 0, End: Slots - 1, Nodes: []goredis.ClusterNode{{Addr: "10.0.0.1:6379"}}}}
	if !ss.take(-1, some) {
		t.Error("an epoch not known, none heard yet: not taken, want taken")
	}
	for i, step := range []struct {
		epoch int64
		take  bool
		want  bool
		newer int
	}{
		{5, true, true, 0},   // the first map
		{7, false, true, 1},  // a node that knows more, not taken: load again
		{5, true, false, 1},  // a node that knows less than one heard
		{-1, true, false, 1}, // not known, one heard: not taken
		{7, true, true, 1},   // the heir's
		{6, false, false, 1}, // a laggard's answer after it
		{9, false, true, 2},
	} {
		var got bool
		if step.take {
			got = ss.take(step.epoch, some)
		} else {
			before := ss.epoch
			ss.heard(step.epoch)
			got = ss.epoch == step.epoch && step.epoch != before
		}
		if got != step.want || newer != step.newer {
			t.Errorf("step %d: epoch %d, take %v: %v with %d loads asked, want %v with %d", i, step.epoch, step.take, got, newer, step.want, step.newer)
		}
	}
}

// Fetches run beside each other (the first load, a decision's, a reload
// an answer asked for): one that took the stale node's map may not
// overwrite one that took the heir's after it, whatever the goroutines'
// order. Each round races a stale answer (epoch 3) against the heir's
// (epoch 4): the heir's map must be the last.
func TestConcurrentTakesKeepTheNewestMap(t *testing.T) {
	mapOf := func(addr string) []goredis.ClusterSlot {
		return []goredis.ClusterSlot{{Start: 0, End: Slots - 1, Nodes: []goredis.ClusterNode{{Addr: addr}}}}
	}
	const stale, heir = "10.0.0.1:6379", "10.0.0.2:6379"
	for round := range 10000 {
		ss := newSlotSource(nil, time.Second, nil)
		ss.take(3, mapOf(stale)) // the first map: the stale node's
		var wg sync.WaitGroup
		for _, a := range []struct {
			epoch int64
			addr  string
		}{{3, stale}, {4, heir}, {3, stale}} {
			wg.Go(func() { ss.take(a.epoch, mapOf(a.addr)) })
		}
		wg.Wait()
		if got := ss.last[0].Nodes[0].Addr; got != heir {
			t.Fatalf("round %d: the last map is %s's, want the heir's (%s)", round, got, heir)
		}
	}
}
