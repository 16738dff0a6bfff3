// Package redisfleet runs the operator's own Redis Cluster of each LimiterFleet in
// mode Cluster (spec.store.type: Cluster): see Provisioner.
package redisfleet

import (
	"context"
	"maps"
	"net"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/rediscluster"
)

// Provisioner runs the Redis Cluster of fleets in mode Cluster: their auth
// and TLS Secrets (auth.go, tls.go), the objects controllers/resources
// builds for it, and one pass of the controllers/rediscluster engine per
// reconcile (reconcile.go); status.go and dataloss.go turn what a pass saw
// into status.redis, RedisReady and RedisDataLoss. The operator's
// RedisFleetReconciler (controllers/redisfleet_controller.go) holds one and
// calls Reconcile once a pass; its redis-handover controller and the
// standbys' failover watch call HandOver and Rescue.
type Provisioner struct {
	client.Client
	Scheme *runtime.Scheme
	// APIReader reads Secrets uncached; nil means Client.
	APIReader client.Reader
	// Recorder records Events for the commands sent to Redis; may be nil.
	Recorder record.EventRecorder
	// RedisDialer, when set, opens connections to Redis pods.
	RedisDialer func(ctx context.Context, network, addr string) (net.Conn, error)
	// DefaultRedisImage is the Redis image of fleets that name none; empty
	// means v1beta1.DefaultRedisImage.
	DefaultRedisImage string
	// Apply server-side applies obj, controlled by fleet (the Redis fleet
	// reconciler's apply). Required.
	Apply func(ctx context.Context, fleet *v1beta1.LimiterFleet, obj client.Object) error
	// Confirm asks every limiter pod of the fleet at once whether it
	// reaches its store, in a request sent after after (the acknowledgement
	// tracker's Confirm). Required.
	Confirm func(fleet types.NamespacedName, after time.Time)

	trackers  trackers
	health    healthSeen
	handOvers handOvers
}

// Forget drops what the provisioner kept of a deleted fleet.
func (r *Provisioner) Forget(fleet types.NamespacedName) {
	r.trackers.forget(fleet)
	r.health.forget(fleet)
	r.handOvers.take(fleet)
}

// trackers holds each Cluster fleet's rediscluster.Tracker (the masters it
// has seen die), kept across passes.
type trackers struct {
	mu sync.Mutex
	m  map[types.NamespacedName]*rediscluster.Tracker
}

// of returns the fleet's tracker, a new one the first time.
func (t *trackers) of(fleet types.NamespacedName) *rediscluster.Tracker {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[types.NamespacedName]*rediscluster.Tracker{}
	}
	tr, ok := t.m[fleet]
	if !ok {
		tr = rediscluster.NewTracker()
		t.m[fleet] = tr
	}
	return tr
}

func (t *trackers) forget(fleet types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, fleet)
}

// healthSeen remembers what the operator last saw of each Cluster fleet's
// Redis: whether it was ok, and since when.
type healthSeen struct {
	mu sync.Mutex
	m  map[types.NamespacedName]health
}

// health is what the operator last saw of a fleet's cluster.
type health struct {
	ok        bool
	settledAt time.Time
}

// settle records whether this pass, at now, found the fleet's cluster ok.
// It returns since when the cluster has been ok as far as this operator
// saw it change (now on a change from not ok; zero when this operator has
// seen it ok all along, or not ok), and whether this pass is that change.
func (h *healthSeen) settle(fleet types.NamespacedName, ok bool, now time.Time) (settledAt time.Time, becameOK bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	next := health{ok: ok}
	if prev, seen := h.m[fleet]; seen {
		switch {
		case ok && !prev.ok:
			next.settledAt, becameOK = now, true
		case ok:
			next.settledAt = prev.settledAt
		}
	}
	if h.m == nil {
		h.m = map[types.NamespacedName]health{}
	}
	h.m[fleet] = next
	return next.settledAt, becameOK
}

func (h *healthSeen) forget(fleet types.NamespacedName) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, fleet)
}

func subset(want, have map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func mergeStrings(dst, src map[string]string) map[string]string {
	if dst == nil {
		dst = map[string]string{}
	}
	maps.Copy(dst, src)
	return dst
}
