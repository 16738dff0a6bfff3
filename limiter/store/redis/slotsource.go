package redis

// Slot source: where a cluster's slot map comes from, for the store's shard
// map and for go-redis's routing alike (ClusterOptions.ClusterSlots hands
// go-redis the last map fetched). Invariants:
//   - A fetch asks every node it may at once, the seeds and every node of
//     the last map, each with fetchTimeout, and takes the first answer the
//     coverage filter takes (coverage.go): a stopped node costs no more
//     than the deadline, never a turn in a sequence.
//   - A node that did not answer is known dead and is not asked again
//     until a map left it out and then lists it again (it failed over and
//     came back, as a replica), or until no other node may be asked.
//   - go-redis never fetches a map itself once the store has one: it is
//     handed the last map, so the store and go-redis route alike.
//   - A map is never taken from a node that knows less than one already
//     heard: each node's answer carries the highest config epoch its
//     CLUSTER NODES names, and an answer below the highest heard (within
//     coverageMemory) is refused. A primary restarted from its nodes.conf
//     claims its old slots until the cluster tells it of its replica's
//     takeover (at once when it hears the cluster; for as long as it
//     can't, on a node whose network is not up yet): the heir's epoch is
//     higher. An answer is judged and taken in one step, so a fetch
//     beside another never takes its older map after the other's newer
//     one; and its epoch is asked before its map, so it never claims more
//     than the map knows. Every answer of a fetch counts, the ones after
//     the first taken too; one above the taken map's has the map loaded
//     again (onNewer). An answer whose CLUSTER NODES failed is taken only
//     while no epoch was heard within coverageMemory (a CI run under load
//     took a stale node's map that way).
//   - A new store's first map, with no epoch heard yet to judge by, is the
//     answer that knows the highest epoch among those that came within
//     firstLoadGrace of the first (slotfirst.go): a restarted old primary
//     that answers first does not win over its heir.

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// slotSource fetches CLUSTER SLOTS from the nodes that may answer.
type slotSource struct {
	seeds   []string
	timeout time.Duration // of each node's answer
	// newClient makes the client a fetch asks addr with.
	newClient func(addr string) *goredis.Client

	mu      sync.Mutex
	clients map[string]*goredis.Client
	// dead are the nodes that did not answer, each true once a map left
	// it out: the next map that lists it brings it back.
	dead map[string]bool
	// asking are the nodes asked and not answered yet: a stopped node is
	// asked once at a time, not once per load while it keeps silent.
	asking map[string]bool
	last   []goredis.ClusterSlot
	// handed is last as go-redis is handed it (see forClient).
	handed []goredis.ClusterSlot
	// firstTaken is closed when the first map is taken.
	firstTaken chan struct{}
	// epoch is the highest config epoch an answer named, heard at
	// epochAt; taken is the taken map's answer's.
	epoch, taken int64
	epochAt      time.Time
	// onNewer asks for a load: an answer knew more than the map taken.
	onNewer func()
}

func newSlotSource(seeds []string, timeout time.Duration, newClient func(string) *goredis.Client) *slotSource {
	ss := &slotSource{seeds: seeds, timeout: timeout, newClient: newClient,
		clients: map[string]*goredis.Client{}, dead: map[string]bool{}, asking: map[string]bool{},
		firstTaken: make(chan struct{})}
	return ss
}

// loopbackName is added to a loopback IP in the maps go-redis is handed:
// go-redis takes a loopback IP in a map with no origin (ClusterSlots) for
// another host's, and strips it to ":port", which would make every node
// on one port one node. A name it leaves alone; realAddr turns it back into
// the IP for the dial. Only nodes on loopback addresses (one host, as in
// tests) have one.
const loopbackName = ".loopback.sluice.invalid"

// forGoRedis is slots with loopbackName added to each loopback IP.
func forGoRedis(slots []goredis.ClusterSlot) []goredis.ClusterSlot {
	out := slices.Clone(slots)
	for i, r := range out {
		out[i].Nodes = slices.Clone(r.Nodes)
		for j, n := range out[i].Nodes {
			host, port, err := net.SplitHostPort(n.Addr)
			if ip := net.ParseIP(host); err == nil && ip != nil && ip.IsLoopback() {
				out[i].Nodes[j].Addr = net.JoinHostPort(host+loopbackName, port)
			}
		}
	}
	return out
}

// realAddr is the address go-redis's node addr stands for (see loopbackName).
func realAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || !strings.HasSuffix(host, loopbackName) {
		return addr
	}
	return net.JoinHostPort(strings.TrimSuffix(host, loopbackName), port)
}

// errNoSlots fails a fetch that no node answered; errStale one whose
// answers all came from nodes that knew an older config epoch than one
// heard before.
var (
	errNoSlots = errors.New("redis store: no cluster node answered CLUSTER SLOTS")
	errStale   = errors.New("redis store: every node that answered CLUSTER SLOTS knew an older config epoch than one heard before (a node back from a stop that has not heard the cluster yet?)")
)

// fetch asks every node that may answer at once and returns the first
// answer taken, or the first error when none is.
func (ss *slotSource) fetch(ctx context.Context) ([]goredis.ClusterSlot, error) {
	addrs := ss.candidates()
	answers := make(chan answer, len(addrs))
	for _, addr := range addrs {
		c := ss.client(addr)
		go func() {
			actx, cancel := context.WithTimeout(context.Background(), ss.timeout)
			defer cancel()
			// CLUSTER NODES before CLUSTER SLOTS: a node may learn of a
			// takeover between the two, and the epoch must not claim more
			// than the map knows (a stale map paired with the heir's
			// epoch would be taken); a map newer than its epoch is only
			// judged more strictly than it deserves.
			epoch := int64(-1) // not judged
			if nodes, nerr := c.ClusterNodes(actx).Result(); nerr == nil {
				epoch = maxConfigEpoch(nodes)
			}
			slots, err := c.ClusterSlots(actx).Result()
			ss.mu.Lock()
			delete(ss.asking, addr)
			ss.mu.Unlock()
			answers <- answer{addr, slots, err, epoch}
		}()
	}
	if ss.fresh() {
		return ss.pickFirst(ctx, answers, len(addrs))
	}
	first := errNoSlots
	for i := range addrs {
		var a answer
		select {
		case a = <-answers:
		case <-ctx.Done():
			go ss.drain(answers, len(addrs)-i)
			return nil, ctx.Err()
		}
		if a.err == nil && len(a.slots) > 0 && ss.take(a.epoch, a.slots) {
			go ss.drain(answers, len(addrs)-i-1) // the others, as they come
			return a.slots, nil
		}
		ss.failed(a.addr, a.err)
		switch {
		case first != errNoSlots && first != errStale:
		case a.err != nil:
			first = a.err
		case len(a.slots) > 0:
			first = errStale
		}
	}
	return nil, first
}

// answer is one node's CLUSTER SLOTS answer, and the highest config epoch
// its CLUSTER NODES named (-1: not known).
type answer struct {
	addr  string
	slots []goredis.ClusterSlot
	err   error
	epoch int64
}

// drain notes the nodes that fail among n more answers of a fetch, and
// the epochs the others know.
func (ss *slotSource) drain(answers <-chan answer, n int) {
	for range n {
		a := <-answers
		ss.failed(a.addr, a.err)
		if a.err == nil {
			ss.heard(a.epoch)
		}
	}
}

// candidates are the nodes a fetch asks, marked asking: the seeds and the
// last map's nodes that are not known dead and not asked already without
// an answer yet; failing that, those not asked already; failing that, all.
func (ss *slotSource) candidates() []string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	all := slices.Clone(ss.seeds)
	for _, r := range ss.last {
		for _, n := range r.Nodes {
			if !slices.Contains(all, n.Addr) {
				all = append(all, n.Addr)
			}
		}
	}
	quiet := slices.DeleteFunc(slices.Clone(all), func(a string) bool { return ss.asking[a] })
	alive := slices.DeleteFunc(slices.Clone(quiet), func(a string) bool { _, dead := ss.dead[a]; return dead })
	switch {
	case len(alive) > 0:
	case len(quiet) > 0:
		alive = quiet
	default:
		alive = all // each asked already, by a fetch beside this one
	}
	for _, a := range alive {
		ss.asking[a] = true
	}
	return alive
}

// client is the fetch client of addr, made on first use.
func (ss *slotSource) client(addr string) *goredis.Client {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	c := ss.clients[addr]
	if c == nil {
		c = ss.newClient(addr)
		ss.clients[addr] = c
	}
	return c
}

// failed notes that addr did not answer: a node that cannot be reached or
// timed out is dead; one that answered with an error reply is not.
func (ss *slotSource) failed(addr string, err error) {
	if err == nil || FailureClass(err) == "" {
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if _, dead := ss.dead[addr]; !dead {
		ss.dead[addr] = false
	}
}

// setLast makes slots the last map, and brings back the dead nodes it
// lists after one that left them out; ss.mu is held.
func (ss *slotSource) setLast(slots []goredis.ClusterSlot) {
	listed := map[string]bool{}
	for _, r := range slots {
		for _, n := range r.Nodes {
			listed[n.Addr] = true
		}
	}
	if ss.last == nil {
		close(ss.firstTaken)
	}
	ss.last, ss.handed = slots, forGoRedis(slots)
	for addr, c := range ss.clients {
		if !listed[addr] && !slices.Contains(ss.seeds, addr) {
			_ = c.Close() // a node that left the cluster
			delete(ss.clients, addr)
		}
	}
	for addr, gone := range ss.dead {
		switch {
		case !listed[addr]:
			ss.dead[addr] = true
		case gone:
			delete(ss.dead, addr)
		}
	}
}

// close closes the fetch clients.
func (ss *slotSource) close() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, c := range ss.clients {
		_ = c.Close()
	}
	ss.clients = map[string]*goredis.Client{}
}

// movedHook asks for the slot map when a node answers MOVED: go-redis
// follows the redirect, and the store's shard map (which breaker guards
// the slot) follows the move. It is a hook on every node of go-redis's
// cluster client.
type movedHook struct{ refresh func(trigger string) }

// DialHook implements goredis.Hook.
func (h *movedHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// ProcessHook implements goredis.Hook.
func (h *movedHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if moved(err) {
			h.refresh(triggerMoved)
		}
		return err
	}
}

// ProcessPipelineHook implements goredis.Hook.
func (h *movedHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		// A MOVED reply does not fail the pipeline: go-redis sends the
		// command again to the node it names, after this.
		for _, cmd := range cmds {
			if moved(cmd.Err()) {
				h.refresh(triggerMoved)
				break
			}
		}
		return err
	}
}

// moved reports a MOVED reply.
func moved(err error) bool {
	if err == nil {
		return false
	}
	_, ok := goredis.IsMovedError(err)
	return ok
}

var _ goredis.Hook = (*movedHook)(nil)
