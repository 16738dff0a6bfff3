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
// replica of each dead master one node timeout after it was last heard
// from, every one due in the same pass, and touches nothing else; once
// two shards are back, a majority may elect the third's replica first
// (or Rescue FORCEs it, when its master was heard from last).
// Before, a pass failed over one master and the next pass, again waiting
// on the dead members' timeouts, the next.
func TestRescueTakesOverEveryDeadMasterAtOnce(t *testing.T) {
	f := newFleet(t, 230, 3, 1)
	f.reconcileUntil(30*time.Second, converged)
	f.writeKeys("rescue", 2000)

	stalled := time.Now()
	for s := range 3 {
		f.servers[podName(s, 0)].Pause(t)
	}
	opts := []rediscluster.Option{rediscluster.WithTracker(f.tracker), rediscluster.WithTimeout(500 * time.Millisecond)}
	served := func(res rediscluster.Result, err error) bool {
		return shardServed(0)(res, err) && shardServed(1)(res, err) && shardServed(2)(res, err)
	}
	var took []string
	var res rediscluster.Result
	within := 6*nodeTimeout + 30*time.Second
	for pass := 1; ; pass++ {
		var err error
		res, err = rediscluster.Rescue(context.Background(), f.spec, opts...)
		for _, a := range res.Actions {
			// A master whose last pong came later than the others' may be
			// due only after two shards are back; with that majority to
			// vote, FORCE is the right call for it.
			majority := countTakeovers(took) >= 2
			if !strings.Contains(a, "CLUSTER FAILOVER TAKEOVER") && !(majority && strings.Contains(a, "CLUSTER FAILOVER FORCE")) {
				t.Fatalf("Rescue sent %q with %d takeovers before it: only takeovers are its job while no majority is left (pass %d, error %v)",
					a, countTakeovers(took), pass, err)
			}
		}
		if len(res.Actions) > 0 {
			t.Logf("pass %d, %v after the stall: %v", pass, time.Since(stalled).Round(time.Millisecond), res.Actions)
		}
		took = append(took, res.Actions...)
		if served(res, err) && len(res.Status.Lost) == 3 && res.Status.Lost[0].Heir != "" && res.Status.Lost[1].Heir != "" && res.Status.Lost[2].Heir != "" {
			break
		}
		if time.Since(stalled) > within {
			t.Fatalf("not every shard served within %v of stalling every master; sent %v; last status %+v, error %v", within, took, res.Status, err)
		}
		wait := res.RequeueAfter
		if wait == 0 {
			wait = 200 * time.Millisecond
		}
		time.Sleep(wait)
	}
	t.Logf("every master stalled (node timeout %v): every slot served by the new masters and cluster_state ok %v after; takeovers %v",
		nodeTimeout, time.Since(stalled).Round(time.Millisecond), took)
	if len(took) == 0 {
		t.Fatal("no TAKEOVER: with no majority left, no election could promote a replica")
	}
	// The status tells the failover: each lost primary, when it was last
	// heard from, and its heir, seen when, after a TAKEOVER or elected.
	for _, lp := range res.Status.Lost {
		if lp.Pod != podName(lp.Shard, 0) || lp.Heir != podName(lp.Shard, 1) {
			t.Errorf("lost primary %+v: want pod %s, heir %s", lp, podName(lp.Shard, 0), podName(lp.Shard, 1))
		}
		if sent := hasAction(took, podName(lp.Shard, 1)+": CLUSTER FAILOVER TAKEOVER"); (lp.By == "TAKEOVER") != sent {
			t.Errorf("lost primary %+v: By should say TAKEOVER exactly when one was sent (%v)", lp, took)
		}
		if lp.LastHeard.IsZero() || lp.LastHeard.After(stalled.Add(time.Second)) || lp.HeirSince.Before(lp.LastHeard) {
			t.Errorf("lost primary %+v: last heard should be before the stall (%v), its heir seen after", lp, stalled)
		}
	}
	t.Logf("lost primaries in status: %+v", res.Status.Lost)
	f.checkKeys("rescue", 2000)
}

func podName(shard, ordinal int) string {
	return "redis-" + string(rune('0'+shard)) + "-" + string(rune('0'+ordinal))
}

func countTakeovers(actions []string) int {
	n := 0
	for _, a := range actions {
		if strings.Contains(a, "CLUSTER FAILOVER TAKEOVER") {
			n++
		}
	}
	return n
}
