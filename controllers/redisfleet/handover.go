package redisfleet

import (
	"context"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/rediscluster"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// HandOver is the fast path for a Redis pod that starts terminating: it
// reads the fleet's pods and credentials (creating nothing) and has a
// synced replica of each terminating master take its slots over
// (rediscluster.HandOver), while the pod's preStop sleep keeps the master
// serving. The fleet's full pass may be busy for longer than that sleep,
// so the operator calls this on its own, as soon as the pod's deletion is
// seen. It answers when to look again (0: nothing is terminating, or no
// hand-over is pending). What it sent reaches status.redis.lastActions
// with the next full pass.
func (r *Provisioner) HandOver(ctx context.Context, fleet *v1beta1.LimiterFleet) (time.Duration, error) {
	terminating := func(spec rediscluster.Spec) bool {
		return slices.ContainsFunc(spec.Members, func(m rediscluster.Member) bool { return m.Terminating })
	}
	spec, ok, err := r.fastPathSpec(ctx, fleet, terminating)
	if !ok {
		return 0, err
	}
	res, err := rediscluster.HandOver(ctx, spec, r.redisOptions(fleet)...)
	r.recordRedisActions(ctx, fleet, res.Actions)
	r.handOvers.add(client.ObjectKeyFromObject(fleet), res.Actions)
	return res.RequeueAfter, err
}

// Rescue is the fast path for a lost master, run by the operator pods that
// do not lead: it reads the fleet's pods and credentials (creating nothing)
// and fails over each dead master that is due (rediscluster.Rescue), with
// commands bounded by timeout. The leader does the same in its full pass;
// Rescue matters when the leader went down with the masters, as on a lost
// node, where waiting for a standby to lead (the Lease's duration) would
// add to the outage.
func (r *Provisioner) Rescue(ctx context.Context, fleet *v1beta1.LimiterFleet, timeout time.Duration) (Rescued, error) {
	spec, ok, err := r.fastPathSpec(ctx, fleet, nil)
	if !ok {
		return Rescued{}, err
	}
	res, err := rediscluster.Rescue(ctx, spec, append(r.redisOptions(fleet), rediscluster.WithTimeout(timeout))...)
	r.recordRedisActions(ctx, fleet, res.Actions)
	return Rescued{After: res.RequeueAfter, Actions: res.Actions, Lost: lostSummary(res.Status.Lost, time.Now())}, err
}

// Rescued is what a Rescue did and saw.
type Rescued struct {
	// After is when to look again (0: nothing is dead).
	After time.Duration
	// Actions are the CLUSTER FAILOVERs sent.
	Actions []string
	// Lost tells each lost primary's failover, as RedisReady does, or "".
	Lost string
}

// StandbyRedisReady is the RedisReady condition an operator pod that does
// not lead writes after its Rescue: False, FailedOver, telling the lost
// primaries, so that the fleet's status says what happened while the
// leader is gone with the masters, not only once a standby leads. Nil
// when there is nothing to tell.
func StandbyRedisReady(fleet *v1beta1.LimiterFleet, rescued Rescued) *metav1.Condition {
	if rescued.Lost == "" {
		return nil
	}
	return &metav1.Condition{Type: v1beta1.RedisReadyCondition, Status: metav1.ConditionFalse, Reason: v1beta1.FailedOverReason,
		ObservedGeneration: fleet.Generation,
		Message:            rescued.Lost + "; " + StandbyNote}
}

// StandbyNote ends the RedisReady message a standby writes.
const StandbyNote = "told by an operator pod that does not lead (the leader's passes tell the rest once one leads)"

// fastPathSpec is the engine's Spec of an operator-run Redis Cluster with
// the operator's credentials, from the Secrets the full pass made, only if
// the fleet controls them (the full pass reports anything else); ok is
// false when there is nothing to act on, as when need (if not nil) says the
// members call for nothing: the Secrets are read only after it.
func (r *Provisioner) fastPathSpec(ctx context.Context, fleet *v1beta1.LimiterFleet, need func(rediscluster.Spec) bool) (rediscluster.Spec, bool, error) {
	var spec rediscluster.Spec
	if fleet.Spec.EffectiveStoreType() != v1beta1.StoreCluster {
		return spec, false, nil
	}
	shards, err := r.redisShards(ctx, fleet)
	if err != nil {
		return spec, false, err
	}
	if spec, err = r.redisSpec(ctx, fleet, shards); err != nil || (need != nil && !need(spec)) {
		return spec, false, err
	}
	auth, err := r.OwnedSecret(ctx, fleet, resources.RedisAuthSecretName(fleet))
	if err != nil || auth == nil {
		return spec, false, err
	}
	spec.Username, spec.Password = resources.RedisOperatorUser, string(auth.Data[resources.RedisOperatorPasswordKey])
	if resources.RedisTLSEnabled(fleet) {
		secret, err := r.OwnedSecret(ctx, fleet, resources.RedisTLSSecretName(fleet))
		if err != nil || secret == nil {
			return spec, false, err
		}
		if spec.TLS, err = RedisClientTLS(fleet, secret); err != nil {
			return spec, false, err
		}
	}
	return spec, true, nil
}

// handOvers keeps, per fleet, the commands HandOver sent since the last
// full pass, for that pass's status.redis.lastActions.
type handOvers struct {
	mu sync.Mutex
	m  map[types.NamespacedName][]string
}

func (h *handOvers) add(fleet types.NamespacedName, actions []string) {
	if len(actions) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[types.NamespacedName][]string{}
	}
	h.m[fleet] = append(h.m[fleet], actions...)
}

// take answers and forgets the fleet's commands.
func (h *handOvers) take(fleet types.NamespacedName) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.m[fleet]
	delete(h.m, fleet)
	return a
}
