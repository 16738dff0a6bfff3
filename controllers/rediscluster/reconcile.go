package rediscluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
)

const (
	// requeueSoon is how soon to look again while the cluster converges.
	requeueSoon = 500 * time.Millisecond
	// requeueFailover is how soon to look again while a dead master's
	// replica may need CLUSTER FAILOVER FORCE.
	requeueFailover = 200 * time.Millisecond
)

// pass is one Reconcile: the spec, what the members answered, and what was
// done.
type pass struct {
	spec  Spec
	o     *options
	views []*view
	// byID maps node IDs to the members that hold them.
	byID map[string]*view
	// anchor is the member whose view stands for the cluster: the one that
	// sees the most slots assigned.
	anchor *view
	res    Result
	// watchClosely is set when a dead master awaits its replica's
	// promotion.
	watchClosely bool
	// lostT holds the lost masters (the Tracker's, or the pass's own).
	lostT *Tracker
}

// Reconcile runs one level-based pass over the cluster spec describes and
// returns what it observed and did. The error is a *SpecError or a
// *ScaleInError when nothing was done, or joins the *NodeError of each
// member that could not be reached or understood; the pass then still heals
// what it can, and the Result is usable.
func Reconcile(ctx context.Context, spec Spec, opts ...Option) (Result, error) {
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	if spec.NodeTimeout <= 0 {
		spec.NodeTimeout = 15 * time.Second
	}
	if err := validate(spec); err != nil {
		return Result{Migration: spec.Migration}, err
	}
	p := &pass{spec: spec, o: &o, byID: map[string]*view{}}
	p.views = observe(ctx, spec, &o)
	defer func() {
		for _, v := range p.views {
			if v.c != nil {
				v.c.close()
			}
		}
	}()
	var nodeErrs []error
	for _, v := range p.views {
		if !v.ok() {
			nodeErrs = append(nodeErrs, v.err)
			continue
		}
		if other := p.byID[v.id]; other != nil {
			v.err = &NodeError{Pod: v.m.Pod, Addr: v.m.Addr, Reason: ReasonDuplicateID,
				Err: fmt.Errorf("node ID %s is also pod %s's (a copied nodes.conf?)", v.id, other.m.Pod)}
			nodeErrs = append(nodeErrs, v.err)
			continue
		}
		p.byID[v.id] = v
	}
	for _, v := range p.answered() { // by shard and ordinal: the same anchor whatever the pods' order
		if p.anchor == nil || p.assigned(v) > p.assigned(p.anchor) {
			p.anchor = v
		}
	}
	p.res.Migration = spec.Migration
	if p.anchor == nil {
		p.res.Status.Operation = OperationWaiting
		p.res.RequeueAfter = requeueSoon
		p.res.Status.Unreachable = p.unreachable()
		return p.res, errors.Join(nodeErrs...)
	}
	if err := p.checkScaleIn(); err != nil {
		p.status()
		return p.res, err
	}
	p.trackLost()
	err := p.run(ctx)
	p.res.Status.Lost = p.trackedLost()
	if p.watchClosely {
		p.res.RequeueAfter = requeueFailover
	}
	p.status()
	if err != nil {
		nodeErrs = append([]error{err}, nodeErrs...)
	}
	return p.res, errors.Join(nodeErrs...)
}

// run sends what the cluster needs next, one phase at a time: a phase that
// acted ends the pass, and the next pass observes its effect.
func (p *pass) run(ctx context.Context) error {
	if p.o.failoverOnly {
		err := p.failover(ctx)
		if len(p.res.Actions) > 0 {
			p.res.Status.Operation = OperationHealing
		}
		return err
	}
	if p.o.handOverOnly {
		before := len(p.res.Actions)
		err := p.handOver(ctx)
		if len(p.res.Actions) > before {
			p.res.Status.Operation = OperationHandOver
		}
		return err
	}
	phases := []struct {
		op string
		do func(context.Context) error
	}{
		{OperationHealing, p.meet},
		{OperationBootstrap, p.bootstrap},
		{OperationHandOver, p.handOver},
		{OperationHealing, p.attachReplicas},
		{OperationHealing, p.failover},
		{OperationHealing, p.forgetGone},
		{OperationHealing, p.assignLost},
		{OperationMigrating, p.migrate},
	}
	for _, ph := range phases {
		before := len(p.res.Actions)
		err := ph.do(ctx)
		if len(p.res.Actions) > before || err != nil {
			if p.res.Status.Operation == "" {
				p.res.Status.Operation = ph.op
			}
			p.res.RequeueAfter = requeueSoon
			return err
		}
	}
	p.res.Status.WaitingFor = p.waitingFor()
	p.res.Converged = p.res.Status.WaitingFor == ""
	if !p.res.Converged {
		p.res.RequeueAfter = requeueSoon
		if p.res.Status.Operation == "" {
			p.res.Status.Operation = OperationWaiting
		}
	}
	return nil
}

// act sends a mutating command to v and records it.
func (p *pass) act(ctx context.Context, v *view, args ...any) error {
	words := make([]string, len(args))
	for i, a := range args {
		words[i] = fmt.Sprint(a)
	}
	desc := v.m.Pod + ": " + strings.Join(words, " ")
	p.res.Actions = append(p.res.Actions, desc)
	if _, err := v.c.do(ctx, args...); err != nil {
		return fmt.Errorf("%s failed: %w", desc, err)
	}
	return nil
}

// note records an action that summarises several commands.
func (p *pass) note(format string, args ...any) {
	p.res.Actions = append(p.res.Actions, fmt.Sprintf(format, args...))
}

func validate(s Spec) error {
	switch {
	case s.Shards < 3:
		return &SpecError{Msg: fmt.Sprintf("shards is %d, a Redis Cluster needs at least 3", s.Shards)}
	case s.ReplicasPerShard < 0:
		return &SpecError{Msg: fmt.Sprintf("replicasPerShard is %d, must not be negative", s.ReplicasPerShard)}
	}
	addrs := map[string]string{}
	places := map[[2]int]string{}
	for _, m := range s.Members {
		if m.Shard < 0 || m.Ordinal < 0 {
			return &SpecError{Msg: fmt.Sprintf("pod %s has shard %d ordinal %d", m.Pod, m.Shard, m.Ordinal)}
		}
		if m.Addr != "" {
			if _, _, err := net.SplitHostPort(m.Addr); err != nil {
				return &SpecError{Msg: fmt.Sprintf("pod %s has address %q: %v", m.Pod, m.Addr, err)}
			}
			if other, dup := addrs[m.Addr]; dup {
				return &SpecError{Msg: fmt.Sprintf("pods %s and %s have the same address %s", other, m.Pod, m.Addr)}
			}
			addrs[m.Addr] = m.Pod
		}
		k := [2]int{m.Shard, m.Ordinal}
		if other, dup := places[k]; dup {
			return &SpecError{Msg: fmt.Sprintf("pods %s and %s are both ordinal %d of shard %d", other, m.Pod, m.Ordinal, m.Shard)}
		}
		places[k] = m.Pod
	}
	if s.Migration != nil {
		for _, mv := range s.Migration.Moves {
			if mv.First < 0 || mv.Last >= SlotCount || mv.First > mv.Last || mv.FromShard < 0 || mv.ToShard < 0 ||
				mv.FromShard == mv.ToShard || max(mv.FromShard, mv.ToShard) >= s.Shards {
				return &SpecError{Msg: fmt.Sprintf("migration move %+v is not a move of slots between shards 0..%d", mv, s.Shards-1)}
			}
		}
	}
	return nil
}

// assigned is the number of slots v sees served.
func (p *pass) assigned(v *view) int {
	c := 0
	for _, n := range v.nodes {
		c += n.SlotCount()
	}
	return c
}

// answered lists the members that answered, by shard and ordinal.
func (p *pass) answered() []*view {
	var out []*view
	for _, v := range p.views {
		if v.ok() {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b *view) int {
		if a.m.Shard != b.m.Shard {
			return a.m.Shard - b.m.Shard
		}
		return a.m.Ordinal - b.m.Ordinal
	})
	return out
}

// complete reports whether every member has an address and answered, and
// every pod the spec calls for (ordinals 0..ReplicasPerShard of each shard)
// is a member: only then is a node ID that no member holds provably gone.
// A pod that was deleted and not yet made again is not a member, and its
// node, with its volume, comes back with it.
func (p *pass) complete() bool {
	present := map[[2]int]bool{}
	for _, v := range p.views {
		if !v.ok() {
			return false
		}
		present[[2]int{v.m.Shard, v.m.Ordinal}] = true
	}
	for shard := range p.spec.Shards {
		for ordinal := range 1 + p.spec.ReplicasPerShard {
			if !present[[2]int{shard, ordinal}] {
				return false
			}
		}
	}
	return true
}

// shardOf is the shard of the member holding id, or -1.
func (p *pass) shardOf(id string) int {
	if v := p.byID[id]; v != nil {
		return v.m.Shard
	}
	return -1
}

// shardMaster is the member that is shard's master: the answered master
// serving slots (the newest config epoch if two claim to), else ordinal 0
// if it is a master, else the lowest ordinal master. nil when none.
func (p *pass) shardMaster(shard int) *view {
	var best, empty *view
	for _, v := range p.answered() {
		if v.m.Shard != shard {
			continue
		}
		me := v.self()
		if !me.Master() {
			continue
		}
		if me.SlotCount() > 0 {
			if best == nil || me.ConfigEpoch > best.self().ConfigEpoch {
				best = v
			}
		} else if empty == nil {
			empty = v
		}
	}
	if best != nil {
		return best
	}
	return empty
}

// checkScaleIn rejects a spec with fewer shards than serve slots.
func (p *pass) checkScaleIn() error {
	have := 0
	for _, n := range p.anchor.nodes {
		if n.SlotCount() > 0 {
			if s := p.shardOf(n.ID); s+1 > have {
				have = s + 1
			}
		}
	}
	if have > p.spec.Shards {
		return &ScaleInError{Have: have, Want: p.spec.Shards}
	}
	return nil
}

func hostPort(addr string) (string, string) {
	h, port, _ := net.SplitHostPort(addr)
	return h, port
}
