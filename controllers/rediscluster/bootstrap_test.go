package rediscluster_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/controllers/rediscluster"
)

// TestBootstrapThenIdle forms 3 shards x 1 replica from nothing, then checks
// that a pass over the converged cluster sends no mutating command.
func TestBootstrapThenIdle(t *testing.T) {
	f := newFleet(t, 100, 3, 1)
	start := time.Now()
	res, actions := f.reconcileUntil(30*time.Second, converged)
	took := time.Since(start)
	t.Logf("bootstrap of 3 shards x 1 replica: converged in %v after %d mutating commands", took.Round(time.Millisecond), len(actions))
	for _, a := range actions {
		t.Log("  ", a)
	}
	if res.Status.ClusterState != "ok" || res.Status.SlotsAssigned != 16384 || len(res.Status.Primaries) != 3 || len(res.Status.Replicas) != 3 {
		t.Fatalf("status %+v", res.Status)
	}
	for pod, n := range slotsPerPrimary(res) {
		if n < 5461 || n > 5462 {
			t.Errorf("%s serves %d slots", pod, n)
		}
	}
	for _, r := range res.Status.Replicas {
		if r.Link != "connected" || r.Shard != podShard(r.Pod) {
			t.Errorf("replica %+v", r)
		}
	}
	again, err := f.reconcile(context.Background())
	if err != nil || !again.Converged || len(again.Actions) != 0 || again.RequeueAfter != 0 {
		t.Fatalf("second pass: converged %v, actions %v, requeue %v, err %v", again.Converged, again.Actions, again.RequeueAfter, err)
	}
	// Another operator replica, with the pods listed the other way round
	// and no tracker: still nothing to do.
	reversed := f.spec
	reversed.Members = nil
	for i := len(f.spec.Members) - 1; i >= 0; i-- {
		reversed.Members = append(reversed.Members, f.spec.Members[i])
	}
	again, err = rediscluster.Reconcile(context.Background(), reversed)
	if err != nil || !again.Converged || len(again.Actions) != 0 {
		t.Fatalf("pass over the pods reversed: converged %v, actions %v, err %v", again.Converged, again.Actions, err)
	}
	f.writeKeys("boot", 1000)
	f.checkKeys("boot", 1000)

	// A replica moved to another shard by hand goes back to its own.
	ids := map[string]string{}
	for _, p := range again.Status.Primaries {
		ids[p.Pod] = p.NodeID
	}
	c := goredis.NewClient(&goredis.Options{Addr: f.spec.Members[1].Addr})
	defer c.Close()
	if err := c.Do(context.Background(), "CLUSTER", "REPLICATE", ids["redis-1-0"]).Err(); err != nil {
		t.Fatal(err)
	}
	_, actions = f.reconcileUntil(30*time.Second, converged)
	if want := "redis-0-1: CLUSTER REPLICATE " + ids["redis-0-0"]; !hasAction(actions, want) {
		t.Fatalf("want %q, got %v", want, actions)
	}
	f.checkKeys("boot", 1000)
}

func podShard(pod string) int { return int(pod[len("redis-")] - '0') }
