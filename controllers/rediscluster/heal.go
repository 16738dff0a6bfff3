package rediscluster

import (
	"context"
	"fmt"
	"strings"
)

// meet introduces to the anchor every member it does not know at its
// current address: a new node, or one that came back on a new IP with its
// nodes.conf (matched by node ID). A member that the anchor knows but that
// does not know the anchor at its address meets the anchor itself: it saw
// the anchor at a wrong address, or it forgot the cluster (a restart before
// its side of a MEET was saved), and Redis ignores pings from a node it
// does not know, so nothing else would ever introduce them.
func (p *pass) meet(ctx context.Context) error {
	a := p.anchor
	for _, v := range p.answered() {
		if v == a || knowsAt(a, v) || a.handshakeTo(v.m.Addr) {
			continue
		}
		host, port := hostPort(v.m.Addr)
		if err := p.act(ctx, a, "CLUSTER", "MEET", host, port); err != nil {
			return err
		}
	}
	for _, v := range p.answered() {
		if v == a || !knowsAt(a, v) || knowsAt(v, a) || v.handshakeTo(a.m.Addr) {
			continue // !knowsAt(a, v): the anchor meets v, above
		}
		host, port := hostPort(a.m.Addr)
		if err := p.act(ctx, v, "CLUSTER", "MEET", host, port); err != nil {
			return err
		}
	}
	return nil
}

// knowsAt reports whether v knows w's node ID at w's address.
func knowsAt(v, w *view) bool {
	n, ok := v.node(w.id)
	return ok && !n.Pending() && n.Addr == w.m.Addr
}

// bootstrap assigns the slots, split evenly, to each shard's ordinal-0
// member while the cluster is new: no member holds a key and every slot
// served is served by the ordinal-0 member whose share it is.
func (p *pass) bootstrap(ctx context.Context) error {
	if p.assigned(p.anchor) == SlotCount {
		return nil
	}
	ranges := EvenRanges(p.spec.Shards)
	var todo []*view
	for _, v := range p.views {
		if v.ok() && v.keys > 0 {
			return nil
		}
	}
	for _, n := range p.anchor.nodes {
		if n.SlotCount() == 0 {
			continue
		}
		v := p.byID[n.ID]
		if v == nil || v.m.Ordinal != 0 || len(n.Slots) != 1 || n.Slots[0] != ranges[v.m.Shard] {
			return nil // not a fresh cluster: healing assigns lost slots
		}
	}
	for shard := range ranges {
		v := p.member(shard, 0)
		if v == nil || !v.ok() {
			p.res.Status.Operation = OperationWaiting
			return nil // every first pod must answer before slots are split
		}
		if n, _ := p.anchor.node(v.id); n.SlotCount() == 0 && v.self().SlotCount() == 0 {
			todo = append(todo, v)
		}
	}
	for _, v := range todo {
		r := ranges[v.m.Shard]
		if err := p.act(ctx, v, "CLUSTER", "ADDSLOTSRANGE", r[0], r[1]); err != nil {
			return err
		}
	}
	return nil
}

// member is the member at shard and ordinal, or nil.
func (p *pass) member(shard, ordinal int) *view {
	for _, v := range p.views {
		if v.m.Shard == shard && v.m.Ordinal == ordinal {
			return v
		}
	}
	return nil
}

// attachReplicas makes every other member of a shard a replica of the
// shard's master: empty masters, orphans, and replicas of another shard.
// A replica that still syncs from its master's old address (Redis does not
// always follow a master that came back on a new IP) is told again.
// A replica of a dead master that served slots is left for failover, so
// that no data is dropped by resyncing it from an empty master.
func (p *pass) attachReplicas(ctx context.Context) error {
	for shard := range p.spec.Shards {
		m := p.shardMaster(shard)
		if m == nil {
			continue
		}
		mSlots := m.self().SlotCount()
		for _, v := range p.answered() {
			if v.m.Shard != shard || v == m {
				continue
			}
			me := v.self()
			if me.Master() && me.SlotCount() > 0 {
				continue // a second master serving slots: never demoted here
			}
			if !me.Master() && me.MasterID == m.id && (v.masterAddr == "" || v.masterAddr == m.m.Addr) {
				continue
			}
			if !me.Master() {
				cur, _ := p.anchor.node(me.MasterID)
				if cur.SlotCount() > 0 && (mSlots == 0 || cur.Failed()) {
					continue // follows a master that has data m lacks, or awaits failover
				}
			}
			if !knowsAt(v, m) {
				continue // v does not know m at its address yet: gossip first
			}
			if me.Master() && v.sharesEpoch() {
				continue // Redis gives it an epoch of its own first: see sharesEpoch
			}
			if err := p.act(ctx, v, "CLUSTER", "REPLICATE", m.id); err != nil {
				return err
			}
		}
	}
	return nil
}

// sharesEpoch reports whether a live master v knows has v's config epoch.
// Redis gives colliding masters epochs of their own (the one with the
// lower node ID takes a new one), but not a master and a replica: a
// replica attached while it shares its master's epoch keeps it, and a
// TAKEOVER of it while that epoch is the cluster's highest claims the
// slots at the lost master's own epoch, which every other node refuses
// (see promotion.outbids). Every node of a new cluster starts at epoch 0,
// so the replicas wait the second or so Redis takes.
func (v *view) sharesEpoch() bool {
	me := v.self()
	for _, n := range v.nodes {
		if n.ID != v.id && n.Master() && !n.Failed() && !n.Has("fail?") && !n.Pending() && n.ConfigEpoch == me.ConfigEpoch {
			return true
		}
	}
	return false
}

// gone lists the node IDs the members know that no member holds: pods
// deleted or replaced with empty disks. Only a pass where every member
// answered can tell; handshakes are left to settle.
func (p *pass) gone() []Node {
	if !p.complete() {
		return nil
	}
	seen := map[string]bool{}
	var out []Node
	for _, v := range p.answered() {
		for _, n := range v.nodes {
			if p.byID[n.ID] != nil || n.Has("handshake") || seen[n.ID] {
				continue
			}
			seen[n.ID] = true
			if a, ok := p.anchor.node(n.ID); ok {
				n = a
			}
			out = append(out, n)
		}
	}
	return out
}

// forgetGone sends CLUSTER FORGET for each gone node ID to every member
// that knows it. A gone master still serving slots is forgotten only when
// it is failed and no member replicates it: its data is provably gone, and
// assignLost gives its slots to an empty shard.
func (p *pass) forgetGone(ctx context.Context) error {
	for _, g := range p.gone() {
		if g.SlotCount() > 0 {
			if !g.Failed() || p.replicated(g.ID) {
				continue
			}
			p.res.DataLoss = join(p.res.DataLoss, fmt.Sprintf("node %s served slots %s and is gone with every replica: its keys are lost",
				g.ID, rangesString(g.Slots)))
		} else if p.replicated(g.ID) {
			continue // its replicas are re-attached first
		}
		for _, v := range p.answered() {
			if _, ok := v.node(g.ID); ok {
				if err := p.act(ctx, v, "CLUSTER", "FORGET", g.ID); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// replicated reports whether a member replicates id.
func (p *pass) replicated(id string) bool {
	for _, v := range p.answered() {
		if me := v.self(); !me.Master() && me.MasterID == id {
			return true
		}
	}
	return false
}

// assignLost gives slots that no node serves, once the cluster has been
// bootstrapped, to shards whose master serves none (a shard whose every pod
// was replaced), else to the master serving fewest. Only when every member
// answered and no node claims them: their data is provably gone.
func (p *pass) assignLost(ctx context.Context) error {
	if !p.complete() || p.assigned(p.anchor) == 0 {
		return nil
	}
	var free [][2]int
	owner := p.owners(p.anchor)
	for s := 0; s < SlotCount; {
		if owner[s] != "" {
			s++
			continue
		}
		e := s
		for e+1 < SlotCount && owner[e+1] == "" {
			e++
		}
		free = append(free, [2]int{s, e})
		s = e + 1
	}
	if len(free) == 0 {
		return nil
	}
	for _, v := range p.answered() {
		for _, r := range free {
			for _, n := range v.nodes {
				for _, nr := range n.Slots {
					if nr[0] <= r[1] && r[0] <= nr[1] {
						return nil // some node still claims them: gossip settles first
					}
				}
			}
		}
	}
	target := p.leastLoaded()
	if target == nil {
		return nil
	}
	for _, r := range free {
		if err := p.act(ctx, target, "CLUSTER", "ADDSLOTSRANGE", r[0], r[1]); err != nil {
			return err
		}
	}
	p.res.DataLoss = join(p.res.DataLoss, fmt.Sprintf("slots %s were served by no node and their data is gone; assigned empty to shard %d (%s)",
		rangesString(free), target.m.Shard, target.m.Pod))
	return nil
}

// leastLoaded is the shard master serving the fewest slots (lowest shard
// on ties).
func (p *pass) leastLoaded() *view {
	var best *view
	for shard := range p.spec.Shards {
		m := p.shardMaster(shard)
		if m != nil && (best == nil || m.self().SlotCount() < best.self().SlotCount()) {
			best = m
		}
	}
	return best
}

// owners maps each slot to the node ID serving it in v's view.
func (p *pass) owners(v *view) []string {
	owner := make([]string, SlotCount)
	for _, n := range v.nodes {
		if !n.Master() {
			continue
		}
		for _, r := range n.Slots {
			for s := r[0]; s <= r[1]; s++ {
				owner[s] = n.ID
			}
		}
	}
	return owner
}

func rangesString(rs [][2]int) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		if r[0] == r[1] {
			parts[i] = fmt.Sprint(r[0])
		} else {
			parts[i] = fmt.Sprintf("%d-%d", r[0], r[1])
		}
	}
	return strings.Join(parts, ",")
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
