package rediscluster

import (
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

// converged reports whether the cluster is as the spec asks and every
// member agrees: full slot map, state ok, each shard one master with its
// replicas, no stranger, no open slot, no migration left.
func (p *pass) converged() bool {
	if !p.complete() || p.res.Migration != nil || len(p.gone()) > 0 {
		return false
	}
	perShard := make([]int, p.spec.Shards)
	for _, v := range p.views {
		if v.m.Shard >= p.spec.Shards {
			return false
		}
		perShard[v.m.Shard]++
	}
	for _, c := range perShard {
		if c != 1+p.spec.ReplicasPerShard {
			return false
		}
	}
	want := p.owners(p.anchor)
	for _, v := range p.views {
		me := v.self()
		if v.info["cluster_state"] != "ok" || len(me.Migrating) > 0 || len(me.Importing) > 0 ||
			!slices.Equal(p.owners(v), want) || len(v.nodes) != len(p.views) {
			return false
		}
		for _, w := range p.views {
			n, ok := v.node(w.id)
			if !ok || n.Pending() || n.Failed() || n.Has("fail?") || (w != v && !n.Connected) || n.Addr != w.m.Addr {
				return false
			}
		}
		if m := p.shardMaster(v.m.Shard); m == nil || (v != m && (me.Master() || me.MasterID != m.id || v.masterLink != "up")) {
			return false
		}
	}
	for _, id := range want {
		if id == "" || p.byID[id] == nil {
			return false
		}
	}
	return true
}
