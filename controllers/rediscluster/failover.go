package rediscluster

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"
)

// failover promotes a replica of each dead master that serves slots. A
// master is dead when the cluster agreed (fail), or when it is only
// suspected (fail?) or silent for a node timeout and the operator can't
// reach it either: with most masters down no quorum is left to agree.
//
// A dead master the operator can't reach is failed over one node timeout
// after it was last heard from, when Redis would start an election of its
// own: Redis's election waits for a majority to agree, then 0.5-1s more,
// and after a node loss the survivors agree only once the first heirs
// serve (a CI run's third shard was elected 2s after the other two were
// taken over). One the operator still reaches (the cluster saw it fail, a
// partition between Redis nodes) waits twice the node timeout: the
// replicas did not elect one by themselves.
//
// FAILOVER FORCE still needs most masters to vote. When they can't (most
// masters are dead or out of the operator's reach), or FORCE has not promoted anyone by four node
// timeouts, FAILOVER TAKEOVER promotes without a vote. The operator can't
// reach the old master, so it won't keep serving the slots alongside.
//
// While a master that serves slots answers neither the operator nor the
// anchor's pending ping, the pass asks to be run again soon
// (watchClosely), so that it is failed over as soon as it is due, not a
// standby's look later.
func (p *pass) failover(ctx context.Context) error {
	now := p.o.now()
	failed := map[string]bool{}
	var errs []error
	// A master the operator can't reach is not counted on to vote even
	// before it is dead: after a node loss the first master due would
	// otherwise get a FORCE that can't win while the others' silence has
	// not lasted a node timeout yet.
	serving, mute := 0, 0
	for _, n := range p.anchor.nodes {
		if n.Master() && n.SlotCount() > 0 {
			serving++
			if p.dead(n) || p.byID[n.ID] == nil {
				mute++
			}
		}
	}
	noVote := 2*(serving-mute) <= serving // no majority can vote
	var due []promotion
	for _, n := range p.anchor.nodes {
		if !n.Master() || n.SlotCount() == 0 {
			continue
		}
		if !p.dead(n) {
			if p.silent(n) {
				p.watchClosely = true // it may be due soon
			}
			continue
		}
		wait := 2 * p.spec.NodeTimeout
		if noVote || p.byID[n.ID] == nil {
			wait = p.spec.NodeTimeout
		}
		failed[n.ID] = true
		since := now
		if p.o.tracker != nil {
			since = p.o.tracker.failedSince(n.ID, now)
		}
		if n.PongRecv > 0 {
			if pong := time.UnixMilli(n.PongRecv); pong.Before(since) {
				since = pong
			}
		}
		if now.Sub(since) < wait {
			p.watchClosely = true // look again soon: the deadline is about time
			continue
		}
		mode := "FORCE"
		if noVote || now.Sub(since) >= 4*p.spec.NodeTimeout {
			mode = "TAKEOVER" // FORCE can't win, or did not work
		}
		// Every master due is failed over in this pass: a pass that
		// waited on dead members' timeouts for each would add one such
		// wait per shard to the outage.
		if v := p.promotable(n.ID); v != nil {
			due = append(due, promotion{lost: n, heir: v, mode: mode})
		}
	}
	// A takeover that may not outbid its lost master goes after the
	// others, once their epochs have reached its heir (see outbids).
	sure := slices.DeleteFunc(slices.Clone(due), func(d promotion) bool { return !d.outbids() })
	risky := slices.DeleteFunc(due, promotion.outbids)
	tookOver := false
	for _, d := range append(sure, risky...) {
		if d.mode == "TAKEOVER" && !d.outbids() && tookOver {
			p.awaitEpochAbove(ctx, d.heir, d.lost.ConfigEpoch)
		}
		errs = append(errs, p.act(ctx, d.heir, "CLUSTER", "FAILOVER", d.mode))
		tookOver = tookOver || d.mode == "TAKEOVER"
		if p.lostT != nil {
			p.lostT.failedOverBy(d.lost.ID, d.mode)
		}
	}
	if p.o.tracker != nil {
		p.o.tracker.keepOnly(failed)
	}
	return errors.Join(errs...)
}

// silent reports whether master n answers neither the operator nor the
// anchor's pending ping.
func (p *pass) silent(n Node) bool { return p.byID[n.ID] == nil && n.PingSent > 0 }

// promotion is a CLUSTER FAILOVER due: heir takes lost's slots.
type promotion struct {
	lost Node
	heir *view
	mode string
}

// outbids reports whether the heir is known to outbid its lost master.
// TAKEOVER gives the heir a new config epoch only when its own is not
// already the highest it knows (Redis's clusterBumpConfigEpochWithoutConsensus),
// and its claim on the slots wins only with an epoch above the lost
// master's. A replica whose own epoch equals its master's (a collision
// left from the cluster's start, when replicas were attached before Redis
// had given every master its own epoch) and is the highest claims at the
// lost master's epoch, and every other node keeps the slots with the lost
// master: the shard stays down until it comes back (a journey run's third
// shard, for a minute). A replica's own epoch can't be read (CLUSTER NODES
// shows a replica with its master's), so an heir whose current epoch
// does not exceed the lost master's may be one.
func (d promotion) outbids() bool {
	cur, ok := currentEpoch(d.heir.info)
	return ok && cur > d.lost.ConfigEpoch
}

// currentEpoch is cluster_current_epoch of a CLUSTER INFO reply.
func currentEpoch(info map[string]string) (int64, bool) {
	cur, err := strconv.ParseInt(info["cluster_current_epoch"], 10, 64)
	return cur, err == nil
}

// epochWait bounds how long a takeover waits for its heir to hear of the
// epochs the takeovers before it in the pass made: they announce them to
// every node at once.
const epochWait = time.Second

// awaitEpochAbove waits, up to epochWait, until v knows a current epoch
// above epoch.
func (p *pass) awaitEpochAbove(ctx context.Context, v *view, epoch int64) {
	deadline := time.Now().Add(epochWait)
	for time.Now().Before(deadline) {
		s, err := v.c.text(ctx, "CLUSTER", "INFO")
		if err == nil {
			info, _ := ParseInfo(s)
			if cur, ok := currentEpoch(info); ok && cur > epoch {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// dead reports whether master n is down: agreed failed by the cluster, or
// not answering the operator and either suspected by the anchor or not
// heard from by it for a node timeout with a ping pending. The last is
// what Redis's own suspicion (fail?) waits for, less the half node timeout
// Redis may take to send that ping: on a lost node it brings the takeover
// that much sooner.
func (p *pass) dead(n Node) bool {
	if n.Failed() {
		return true
	}
	if p.byID[n.ID] != nil {
		return false
	}
	silent := n.PingSent > 0 && n.PongRecv > 0 && p.o.now().Sub(time.UnixMilli(n.PongRecv)) >= p.spec.NodeTimeout
	return n.Has("fail?") || silent
}

// promotable is the answering replica of master id with the most
// replicated data, or nil.
func (p *pass) promotable(id string) *view {
	var best *view
	for _, v := range p.answered() {
		if me := v.self(); me.Master() || me.MasterID != id {
			continue
		}
		if best == nil || v.offset > best.offset {
			best = v
		}
	}
	return best
}
