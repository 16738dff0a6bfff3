package rediscluster

import (
	"fmt"
	"slices"
	"strings"
)

// status fills Result.Status from what the members answered.
func (p *pass) status() {
	st := &p.res.Status
	for _, v := range p.answered() {
		switch v.info["cluster_state"] {
		case "ok":
			if st.ClusterState == "" {
				st.ClusterState = "ok"
			}
		default:
			st.ClusterState = v.info["cluster_state"]
		}
	}
	if p.anchor != nil {
		st.SlotsAssigned = p.assigned(p.anchor)
	}
	for _, v := range p.answered() {
		me := v.self()
		ns := NodeStatus{Pod: v.m.Pod, NodeID: v.id, Addr: v.m.Addr, Shard: v.m.Shard, Slots: me.SlotCount(),
			Link: p.link(v), UsedMemory: v.usedMemory, MaxMemory: v.maxMemory}
		if me.Master() {
			ns.Role = "master"
			st.Primaries = append(st.Primaries, ns)
		} else {
			ns.Role = "replica"
			ns.MasterLink = v.masterLink
			st.Replicas = append(st.Replicas, ns)
		}
	}
	st.Unreachable = p.unreachable()
	byPod := func(a, b NodeStatus) int { return strings.Compare(a.Pod, b.Pod) }
	slices.SortFunc(st.Primaries, byPod)
	slices.SortFunc(st.Replicas, byPod)
}

// link is v's link state as another member sees it.
func (p *pass) link(v *view) string {
	for _, w := range p.answered() {
		if w == v {
			continue
		}
		if n, ok := w.node(v.id); ok && n.Connected && !n.Pending() {
			return "connected"
		}
	}
	if len(p.answered()) == 1 {
		return "connected"
	}
	return "disconnected"
}

func (p *pass) unreachable() []NodeStatus {
	var out []NodeStatus
	for _, v := range p.views {
		if !v.ok() {
			out = append(out, NodeStatus{Pod: v.m.Pod, Addr: v.m.Addr, Shard: v.m.Shard, Link: "unreachable"})
		}
	}
	slices.SortFunc(out, func(a, b NodeStatus) int { return strings.Compare(a.Pod, b.Pod) })
	return out
}

// waitingFor names the first thing that keeps the cluster from being
// converged, as a user reads it in RedisReady, or "" when it is. Converged
// is: full slot map, state ok, each shard one master with its replicas, no
// stranger, no open slot, no migration left, and every member agreeing.
func (p *pass) waitingFor() string {
	switch {
	case !p.complete():
		return "every member to answer"
	case p.terminating() != nil:
		return fmt.Sprintf("pod %s, terminating, to be replaced", p.terminating().m.Pod)
	case p.res.Migration != nil:
		return "the slot migration to finish"
	case len(p.gone()) > 0:
		return fmt.Sprintf("node %s, which is no member, to be forgotten", p.gone()[0].ID)
	}
	perShard := make([]int, p.spec.Shards)
	for _, v := range p.views {
		if v.m.Shard >= p.spec.Shards {
			return fmt.Sprintf("pod %s of shard %d, beyond the %d shards asked for", v.m.Pod, v.m.Shard, p.spec.Shards)
		}
		perShard[v.m.Shard]++
	}
	for shard, c := range perShard {
		if c != 1+p.spec.ReplicasPerShard {
			return fmt.Sprintf("shard %d to have %d members, it has %d", shard, 1+p.spec.ReplicasPerShard, c)
		}
	}
	want := p.owners(p.anchor)
	for _, v := range p.views {
		me := v.self()
		switch {
		case v.info["cluster_state"] != "ok":
			return fmt.Sprintf("pod %s to report cluster_state ok (it says %s)", v.m.Pod, orNone(v.info["cluster_state"]))
		case len(me.Migrating) > 0 || len(me.Importing) > 0:
			return fmt.Sprintf("pod %s to close its open slots", v.m.Pod)
		case !slices.Equal(p.owners(v), want):
			return fmt.Sprintf("pod %s to agree with pod %s on who serves each slot", v.m.Pod, p.anchor.m.Pod)
		case len(v.nodes) != len(p.views):
			return fmt.Sprintf("pod %s to know exactly the %d members (it knows %d nodes)", v.m.Pod, len(p.views), len(v.nodes))
		}
		for _, w := range p.views {
			n, ok := v.node(w.id)
			switch {
			case !ok || n.Pending():
				return fmt.Sprintf("pod %s to meet pod %s", v.m.Pod, w.m.Pod)
			case n.Failed() || n.Has("fail?"):
				return fmt.Sprintf("pod %s to stop flagging pod %s %s", v.m.Pod, w.m.Pod, strings.Join(n.Flags, ","))
			case w != v && !n.Connected:
				return fmt.Sprintf("pod %s to connect to pod %s", v.m.Pod, w.m.Pod)
			case n.Addr != w.m.Addr:
				return fmt.Sprintf("pod %s to see pod %s at %s, not %s", v.m.Pod, w.m.Pod, w.m.Addr, n.Addr)
			}
		}
		m := p.shardMaster(v.m.Shard)
		switch {
		case m == nil:
			return fmt.Sprintf("shard %d to have a master", v.m.Shard)
		case v != m && (me.Master() || me.MasterID != m.id):
			return fmt.Sprintf("pod %s to replicate pod %s", v.m.Pod, m.m.Pod)
		case v != m && v.masterLink != "up":
			return fmt.Sprintf("pod %s's link to its master %s to be up (it is %s)", v.m.Pod, m.m.Pod, orNone(v.masterLink))
		}
	}
	for _, id := range want {
		if id == "" || p.byID[id] == nil {
			return "every slot to be served by a member"
		}
	}
	return ""
}

func orNone(s string) string {
	if s == "" {
		return "nothing"
	}
	return s
}

// terminating is the first member whose pod is being deleted, or nil.
func (p *pass) terminating() *view {
	for _, v := range p.views {
		if v.m.Terminating {
			return v
		}
	}
	return nil
}
