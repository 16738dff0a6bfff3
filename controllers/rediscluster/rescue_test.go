package rediscluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/controllers/rediscluster"
)

// TestRescueTakesOverEveryDeadMasterAtOnce stalls every master at once
// (SIGSTOP: connections hang, as on a Kubernetes node that stopped with
// them), so no majority is left to elect a replica. Rescue, the failover
// phase alone that the operator's standby pods run, sends TAKEOVER to the
// replica of every dead master in the same pass, one node timeout after
// they were last heard from, and touches nothing else. Before, a pass
// failed over one master and the next pass, again waiting on the dead
// members' timeouts, the next.
func TestRescueTakesOverEveryDeadMasterAtOnce(t *testing.T) {
	f := newFleet(t, 230, 3, 1)
	f.reconcileUntil(30*time.Second, converged)
	f.writeKeys("rescue", 2000)

	stalled := time.Now()
	for s := range 3 {
		f.servers[podName(s, 0)].Pause(t)
	}
	opts := []rediscluster.Option{rediscluster.WithTimeout(500 * time.Millisecond)}
	var took []string
	var passes int
	deadline := time.Now().Add(6*nodeTimeout + 30*time.Second)
	for {
		passes++
		res, err := rediscluster.Rescue(context.Background(), f.spec, append([]rediscluster.Option{rediscluster.WithTracker(f.tracker)}, opts...)...)
		for _, a := range res.Actions {
			if !strings.Contains(a, "CLUSTER FAILOVER TAKEOVER") {
				t.Fatalf("Rescue sent %q: only failovers are its job (pass %d, error %v)", a, passes, err)
			}
		}
		if len(res.Actions) > 0 {
			took = res.Actions
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no takeover within %v of stalling every master; last result %+v, error %v", 6*nodeTimeout+30*time.Second, res.Status, err)
		}
		wait := res.RequeueAfter
		if wait == 0 {
			wait = 200 * time.Millisecond
		}
		time.Sleep(wait)
	}
	sent := time.Since(stalled)
	if len(took) != 3 {
		t.Fatalf("one pass should take over all 3 shards, sent %v", took)
	}
	for s := range 3 {
		if !hasAction(took, podName(s, 1)+": CLUSTER FAILOVER TAKEOVER") {
			t.Errorf("no TAKEOVER to %s: %v", podName(s, 1), took)
		}
	}
	served := func(res rediscluster.Result, err error) bool {
		return shardServed(0)(res, err) && shardServed(1)(res, err) && shardServed(2)(res, err)
	}
	res, _ := f.reconcileUntil(30*time.Second, served, opts...)
	// The status tells the failover: each lost primary, when it was last
	// heard from, and its heir since when, by the operator's TAKEOVER.
	if len(res.Status.Lost) != 3 {
		t.Fatalf("status should name 3 lost primaries, has %+v", res.Status.Lost)
	}
	for _, lp := range res.Status.Lost {
		if lp.Pod != podName(lp.Shard, 0) || lp.Heir != podName(lp.Shard, 1) || lp.By != "TAKEOVER" {
			t.Errorf("lost primary %+v: want pod %s, heir %s, by TAKEOVER", lp, podName(lp.Shard, 0), podName(lp.Shard, 1))
		}
		if lp.LastHeard.IsZero() || lp.LastHeard.After(stalled.Add(time.Second)) || lp.HeirSince.Before(lp.LastHeard) {
			t.Errorf("lost primary %+v: last heard should be before the stall (%v), its heir after", lp, stalled)
		}
	}
	t.Logf("lost primaries in status: %+v", res.Status.Lost)
	t.Logf("every master stalled (node timeout %v): 3 TAKEOVERs in one Rescue pass %v after, pass %d; every slot served by the new masters and cluster_state ok %v after",
		nodeTimeout, sent.Round(time.Millisecond), passes, time.Since(stalled).Round(time.Millisecond))
	f.checkKeys("rescue", 2000)
}

func podName(shard, ordinal int) string {
	return "redis-" + string(rune('0'+shard)) + "-" + string(rune('0'+ordinal))
}
