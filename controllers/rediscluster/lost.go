package rediscluster

import (
	"time"
)

// LostPrimary is a master the cluster lost (failed, or silent and not
// answering the operator) while it served slots, and what serves its
// slots since. It is kept from the pass that first sees the loss until the
// node answers the operator again, so a status can tell a failover while
// it happens and after, not only that a node is missing.
type LostPrimary struct {
	// Pod is the member at the lost master's address ("" when none is),
	// Shard its shard (-1 when unknown) and NodeID its node ID.
	Pod    string
	Shard  int
	NodeID string
	// LastHeard is the last time a member heard from it (its last pong as
	// the anchor saw it; zero when never).
	LastHeard time.Time
	// Heir is the member that serves the lost master's slots now, and
	// HeirSince the first pass that saw it do so; "" and zero while none
	// does.
	Heir      string
	HeirSince time.Time
	// By is the CLUSTER FAILOVER this operator pod sent to the heir
	// ("FORCE" or "TAKEOVER"), or "" when Redis's own election promoted it
	// (or another operator pod's takeover did).
	By string
}

// trackLost updates the tracker's lost masters from this pass and sets
// Result.Status.Lost. Without a tracker a pass still tells the losses it
// sees, without an heir's time.
func (p *pass) trackLost() {
	if p.anchor == nil {
		return
	}
	now := p.o.now()
	t := p.o.tracker
	if t == nil {
		t = NewTracker()
	}
	seen := map[string]bool{}
	for _, n := range p.anchor.nodes {
		if !n.Master() || p.byID[n.ID] != nil {
			continue
		}
		if n.SlotCount() > 0 && !p.dead(n) {
			continue
		}
		lp, ok := t.lost(n.ID)
		if !ok && (n.SlotCount() == 0 || !p.dead(n)) {
			continue // an empty master, or one never seen serving while lost
		}
		seen[n.ID] = true
		if !ok {
			lp = LostPrimary{NodeID: n.ID, Shard: -1}
			if m := p.memberAt(n.Addr); m != nil {
				lp.Pod, lp.Shard = m.Pod, m.Shard
			}
		}
		if n.PongRecv > 0 {
			if heard := time.UnixMilli(n.PongRecv); heard.After(lp.LastHeard) {
				lp.LastHeard = heard
			}
		}
		if lp.Heir == "" {
			if h := p.servingMaster(lp.Shard); h != nil {
				lp.Heir, lp.HeirSince = h.m.Pod, now
			}
		}
		t.setLost(lp)
	}
	t.keepLost(seen)
	p.lostT = t
}

// trackedLost lists the lost masters as trackLost and the pass's
// failovers left them.
func (p *pass) trackedLost() []LostPrimary {
	if p.lostT == nil {
		return nil
	}
	return p.lostT.lostList()
}

// memberAt is the member whose address is addr, or nil.
func (p *pass) memberAt(addr string) *Member {
	for i := range p.spec.Members {
		if addr != "" && p.spec.Members[i].Addr == addr {
			return &p.spec.Members[i]
		}
	}
	return nil
}

// servingMaster is an answering master of shard that serves slots, or nil.
func (p *pass) servingMaster(shard int) *view {
	for _, v := range p.answered() {
		if me := v.self(); v.m.Shard == shard && me.Master() && me.SlotCount() > 0 {
			return v
		}
	}
	return nil
}
