package controllers

import (
	"context"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/redisfleet"
)

// failoverWatch fails over the dead Redis masters of operator-run
// clusters from the operator pods that do not lead. When a Kubernetes
// node is lost with most of a cluster's masters, no election can promote
// their replicas and only the operator's CLUSTER FAILOVER TAKEOVER brings
// the slots back; if the leader was on that node too, a standby would
// otherwise wait for the Lease to expire and its controllers to start
// before the takeover, and every second of that is a failed or denied
// decision. Each standby looks at every fleet's cluster once a second
// (one connection per Redis node, one read of the fleet's Redis Secret),
// every 200ms while a master answers neither it nor the other nodes, and
// sends the takeover when it is due,
// exactly as the leader's pass would (redisfleet.Provisioner.Rescue). It
// stops once its pod leads: the leader's passes heal from then on.
type failoverWatch struct {
	client  client.Client
	redis   *redisfleet.Provisioner
	elected <-chan struct{}
	// every is how long between looks while nothing awaits a failover.
	every time.Duration
	// timeout bounds each Redis command, the dial included: a dead node
	// must not hold the look up for long.
	timeout time.Duration
}

// NeedLeaderElection is false: the watch is for the pods that do not lead.
func (w *failoverWatch) NeedLeaderElection() bool { return false }

// Start looks until ctx ends or the pod leads.
func (w *failoverWatch) Start(ctx context.Context) error {
	wait := w.every
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.elected:
			return nil
		case <-time.After(wait):
		}
		wait = w.look(ctx)
	}
}

// look rescues every Cluster fleet once and answers when to look again:
// sooner while a dead master awaits its promotion.
func (w *failoverWatch) look(ctx context.Context) time.Duration {
	log := logf.FromContext(ctx).WithName("failover-watch")
	fleets := &v1beta1.LimiterFleetList{}
	if err := w.client.List(ctx, fleets); err != nil {
		log.Error(err, "Listing fleets")
		return w.every
	}
	next := w.every
	for i := range fleets.Items {
		f := &fleets.Items[i]
		if !f.DeletionTimestamp.IsZero() || f.Spec.EffectiveStoreType() != v1beta1.StoreCluster {
			continue
		}
		rescued, err := w.redis.Rescue(ctx, f, w.timeout)
		if len(rescued.Actions) > 0 {
			log.Info("Failed over dead Redis masters while not leading", "fleet", client.ObjectKeyFromObject(f), "actions", rescued.Actions)
		}
		if err != nil && len(rescued.Actions) > 0 {
			log.Error(err, "Failing over dead Redis masters", "fleet", client.ObjectKeyFromObject(f))
		}
		if err := w.tell(ctx, f, rescued); err != nil {
			log.Error(err, "Writing RedisReady while not leading", "fleet", client.ObjectKeyFromObject(f))
		}
		if rescued.After > 0 && rescued.After < next {
			next = rescued.After
		}
	}
	return next
}

// tell writes RedisReady from a pod that does not lead, so that the
// fleet's status tells a failover while the leader is gone with the
// masters: once this pod sent a takeover, and then again while the
// condition is still the one a standby wrote (the heir seen serving, or
// none lost any more). A condition the leader wrote since is left alone:
// a leader that is alive tells the failover itself. It writes as the
// Redis writer (RedisStatusFieldOwner), the condition's only owner: an
// apply of that writer's whole part of the status as read, at the fleet's
// resourceVersion, so it never overwrites a status written meanwhile and
// leaves no other manager's entry behind.
func (w *failoverWatch) tell(ctx context.Context, f *v1beta1.LimiterFleet, rescued redisfleet.Rescued) error {
	cur := meta.FindStatusCondition(f.Status.Conditions, v1beta1.RedisReadyCondition)
	ours := cur != nil && strings.HasSuffix(cur.Message, redisfleet.StandbyNote)
	if len(rescued.Actions) == 0 && !ours {
		return nil
	}
	cond := redisfleet.StandbyRedisReady(f, rescued)
	if cond == nil || (cur != nil && cur.Status == cond.Status && cur.Reason == cond.Reason && cur.Message == cond.Message) {
		return nil
	}
	meta.SetStatusCondition(&f.Status.Conditions, *cond)
	mine := ownedFleetStatus(&f.Status, RedisStatusFieldOwner)
	if err := applyFleetStatusAt(ctx, w.client, f, RedisStatusFieldOwner, mine, f.ResourceVersion); err != nil && !apierrors.IsConflict(err) {
		return err
	}
	return nil
}
