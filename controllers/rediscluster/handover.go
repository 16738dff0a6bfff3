package rediscluster

import (
	"context"
	"time"
)

// HandOver is the fast path of Reconcile for a pod that starts
// terminating: it observes the members and sends at most the hand-over's
// CLUSTER FAILOVER, nothing else, so that a controller can call it at once
// on the pod's deletion, apart from the fleet's full pass (which may be
// busy for longer than the pod's preStop sleep). Result.RequeueAfter is set
// while a hand-over may still show; Result.Converged is never set. Use the
// same Tracker as the full passes, so that neither restarts the other's
// hand-over.
func HandOver(ctx context.Context, spec Spec, opts ...Option) (Result, error) {
	return Reconcile(ctx, spec, append(opts, func(o *options) { o.handOverOnly = true })...)
}

// manualFailoverTimeout is how long Redis gives a manual failover
// (CLUSTER_MF_TIMEOUT): a hand-over is not asked for again sooner.
const manualFailoverTimeout = 5 * time.Second

// handOver asks a synced replica of each terminating master that serves
// slots to take them over (CLUSTER FAILOVER, the coordinated kind: the
// master pauses its clients until the replica holds every write, so no
// acknowledged count is lost). The pod's preStop sleep keeps the master
// serving meanwhile. A master with no synced replica is left to stop as
// before: its slots wait for the pod to come back.
func (p *pass) handOver(ctx context.Context) error {
	asked := map[string]bool{}
	for _, v := range p.answered() {
		me := v.self()
		if !v.m.Terminating || !me.Master() || me.SlotCount() == 0 {
			continue
		}
		asked[v.id] = true
		r := p.syncedReplica(v.id)
		if r == nil {
			continue
		}
		p.watchClosely = true // the promotion is about to show
		if p.o.tracker != nil && !p.o.tracker.handOverDue(v.id, p.o.now(), manualFailoverTimeout) {
			continue
		}
		return p.act(ctx, r, "CLUSTER", "FAILOVER")
	}
	if p.o.tracker != nil {
		p.o.tracker.keepHandOvers(asked)
	}
	return nil
}

// syncedReplica is the answering replica of master id, not terminating
// itself, whose link to it is up, with the most replicated data; or nil.
func (p *pass) syncedReplica(id string) *view {
	var best *view
	for _, v := range p.answered() {
		if me := v.self(); me.Master() || me.MasterID != id || v.m.Terminating || v.masterLink != "up" {
			continue
		}
		if best == nil || v.offset > best.offset {
			best = v
		}
	}
	return best
}
