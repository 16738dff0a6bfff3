package rediscluster_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/controllers/rediscluster"
)

// TestTerminatingMasterHandsOver: a deleted master's pod (the fleet
// controller marks its member Terminating while the preStop sleep keeps
// it serving) hands its slots to its synced replica with a coordinated
// CLUSTER FAILOVER, under a client counting all along. Then it stops, as
// SIGTERM stops it. Not one count fails, none acknowledged is lost, and
// the status waits for the pod to be replaced meanwhile.
func TestTerminatingMasterHandsOver(t *testing.T) {
	f := newACLFleet(t, 200, 3, 1)
	f.reconcileUntil(30*time.Second, converged)
	f.writeKeys("handover", 2000)
	c := f.client("")
	ctx := context.Background()
	key := keyOfShard(t, c, 0, 3)

	var acked, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	counted := make(chan struct{})
	go func() {
		defer close(counted)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := c.Incr(ctx, key).Err(); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				time.Sleep(10 * time.Millisecond)
				continue
			}
			acked.Add(1)
		}
	}()
	countedBeyond := func(n int64, what string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for acked.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d counts acknowledged, want %d within 1m; %d failed (first: %v)", what, acked.Load(), n, failed.Load(), firstErr.Load())
			}
			time.Sleep(10 * time.Millisecond) // the counting goroutine's progress
		}
	}
	countedBeyond(200, "before the hand-over")

	f.terminate("redis-0-0")
	start := time.Now()
	res, actions := f.reconcileUntil(30*time.Second, func(res rediscluster.Result, _ error) bool {
		s := slotsPerPrimary(res)
		return s["redis-0-1"] > 0 && s["redis-0-0"] == 0
	})
	took := time.Since(start)
	if !hasAction(actions, "redis-0-1: CLUSTER FAILOVER") || hasAction(actions, "FORCE") || hasAction(actions, "TAKEOVER") {
		t.Fatalf("want one coordinated CLUSTER FAILOVER sent to redis-0-1, got actions:\n%s", strings.Join(actions, "\n"))
	}
	if res.Converged || !strings.Contains(res.Status.WaitingFor, "redis-0-0, terminating") {
		t.Fatalf("while redis-0-0 terminates the cluster is not converged: Converged %v, WaitingFor %q", res.Converged, res.Status.WaitingFor)
	}

	// SIGTERM after the preStop sleep: the old master, now a replica, stops.
	f.servers["redis-0-0"].Stop()
	countedBeyond(acked.Load()+200, "after the old master stopped")
	close(stop)
	<-counted
	t.Logf("hand-over of shard 0's slots: %v; %d counts acknowledged, %d failed; actions %v", took.Round(time.Millisecond), acked.Load(), failed.Load(), actions)
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d counts failed during the hand-over (first: %v)", n, firstErr.Load())
	}
	got, err := c.Get(ctx, key).Int64()
	if err != nil || got != acked.Load() {
		t.Fatalf("%s = %d, %v after the hand-over; %d counts were acknowledged", key, got, err, acked.Load())
	}
	f.checkKeys("handover", 2000)
	f.requireNoDenials()
}

// TestTerminatingMasterWithoutSyncedReplica: a terminating master whose
// only replica is down is not failed over to anyone; it keeps its slots.
func TestTerminatingMasterWithoutSyncedReplica(t *testing.T) {
	f := newACLFleet(t, 210, 3, 1)
	f.reconcileUntil(30*time.Second, converged)
	f.servers["redis-0-1"].Stop()
	f.terminate("redis-0-0")
	for range 5 {
		res, _ := f.reconcile(context.Background())
		if hasAction(res.Actions, "FAILOVER") {
			t.Fatalf("a hand-over with no synced replica: %v", res.Actions)
		}
		if slotsPerPrimary(res)["redis-0-0"] == 0 {
			t.Fatalf("redis-0-0 lost its slots: %+v", res.Status.Primaries)
		}
	}
}

// terminate marks pod's member as being deleted, as the fleet controller
// does once the pod's deletionTimestamp is set.
func (f *fleet) terminate(pod string) {
	for i := range f.spec.Members {
		if f.spec.Members[i].Pod == pod {
			f.spec.Members[i].Terminating = true
			return
		}
	}
	f.t.Fatalf("no member %s", pod)
}

// keyOfShard is a key whose slot is in shard's even share of shards.
func keyOfShard(t *testing.T, c *goredis.ClusterClient, shard, shards int) string {
	t.Helper()
	r := rediscluster.EvenRanges(shards)[shard]
	for i := range 1000 {
		k := fmt.Sprintf("count:%d", i)
		slot, err := c.ClusterKeySlot(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if int(slot) >= r[0] && int(slot) <= r[1] {
			return k
		}
	}
	t.Fatal(errors.New("no key of the shard among 1000"))
	return ""
}

// TestHandOverFastPath: HandOver sends the hand-over and nothing else,
// even while the full pass has other work (here a shard's replica
// missing, which the full pass would only wait for), and nothing at all
// when no pod terminates.
func TestHandOverFastPath(t *testing.T) {
	f := newACLFleet(t, 220, 3, 1)
	f.reconcileUntil(30*time.Second, converged)
	ctx := context.Background()
	opts := rediscluster.WithTracker(f.tracker)
	if res, err := rediscluster.HandOver(ctx, f.spec, opts); err != nil || len(res.Actions) != 0 || res.Converged {
		t.Fatalf("nothing terminating: actions %v, converged %v, err %v; want no action", res.Actions, res.Converged, err)
	}
	f.servers["redis-2-1"].Stop()
	f.terminate("redis-1-0")
	res, err := rediscluster.HandOver(ctx, f.spec, opts)
	if len(res.Actions) != 1 || res.Actions[0] != "redis-1-1: CLUSTER FAILOVER" || res.Status.Operation != rediscluster.OperationHandOver || res.RequeueAfter == 0 {
		t.Fatalf("actions %v, operation %q, requeue %v (err %v); want only redis-1-1: CLUSTER FAILOVER, HandingOver, a requeue", res.Actions, res.Status.Operation, res.RequeueAfter, err)
	}
	// Asked again at once, it does not restart the failover in progress.
	if res, _ := rediscluster.HandOver(ctx, f.spec, opts); len(res.Actions) != 0 {
		t.Fatalf("a second HandOver at once sent %v", res.Actions)
	}
}
