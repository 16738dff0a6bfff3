package redis_test

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testnet"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// Issue 43: the tail at a lost node's return. A node that held a primary
// stops; its replica takes over; when the node comes back, the old primary
// starts again from its own nodes.conf, on its old address, believing for a
// moment that it still owns its slots (an old config epoch) until the
// cluster tells it otherwise and it rejoins as a replica. A limiter that
// took its slot map from it then, or routed a shard to it, would fail that
// shard's decisions: the journey saw failures come back at the node's
// return. These tests restart such a primary under a steady stream of
// decisions (and build new stores while it restarts) and require that none
// fails from the restart on.

// rejoinStore is a cluster store with the limiter's defaults but a
// deadline generous for a loaded machine, seeded with addrs.
func rejoinStore(addrs []string, logs *logBuffer) (*redisstore.Store, *prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	s, err := redisstore.New(redisstore.Options{Addrs: addrs, Cluster: true, Timeout: time.Second,
		Registerer: reg, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	return s, reg, err
}

// TestRejoinOfAFailedPrimary: shard 0's primary is killed and its replica
// takes over (CLUSTER FAILOVER TAKEOVER, once the cluster flags it failed);
// once every shard decides again, the old primary starts again from its own
// dir (nodes.conf, append-only file) on its old address. From the restart
// on, no decision of the store that lived through it fails, and neither
// does any of the stores built while the old primary restarts, once they
// know their shards.
func TestRejoinOfAFailedPrimary(t *testing.T) { rejoin(t, "") }

// TestRejoinOfAFailedPrimaryOnANewAddress is TestRejoinOfAFailedPrimary
// with the old primary started again on another address, as a stopped
// node's pod comes back with a new IP: the cluster learns it from the
// node's own gossip.
func TestRejoinOfAFailedPrimaryOnANewAddress(t *testing.T) { rejoin(t, testnet.Addr(77, 6379)) }

// rejoin runs the rejoin tests: the old primary starts again on newAddr,
// or on its own address when it is "".
func rejoin(t *testing.T, newAddr string) {
	c := redistest.StartClusterWith(t, redistest.ClusterOptions{Primaries: 3, Replicas: 1, NodeTimeout: rejoinNodeTimeout,
		Extra: rejoinExtra})
	logs := &logBuffer{}
	s, reg, err := rejoinStore(seedsOf(c), logs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	keys := allKeys(t, s, c, 4)
	waitFor(t, settle, "every shard answers", func() error { return allAnswer(s, keys, 3) })
	d := startDecider(s, keys, 30*time.Millisecond) // 12 keys: 400 decisions a second
	defer d.halt()

	old := c.Nodes[0]
	killed := time.Now()
	failOver(t, c, old)
	back := waitFor(t, settle, "every shard decided again", func() error { return allAnswer(s, keys, 3) })

	addr := cmp.Or(newAddr, old.Addr)
	restarted := time.Now()
	w := watchView(t, addr, int64(c.Ranges[0][0]), restarted)
	stopFresh := freshStores(t, c, addr, keys, 25*time.Millisecond)
	now := old
	if newAddr == "" {
		old.Restart(t)
	} else {
		now = redistest.StartNode(t, newAddr, old.Dir, rejoinNodeTimeout, rejoinExtra...)
	}
	answering := time.Since(restarted)
	c.WaitHealthy(t, settle)
	waitReplica(t, now)
	healthy := time.Since(restarted)
	runs := stopFresh()
	// On past the next periodic slot map load, which asks the rejoined node too.
	timers := loads(t, reg, "timer")
	waitFor(t, settle, "a periodic slot map load after the rejoin", func() error {
		if n := loads(t, reg, "timer"); n <= timers {
			return fmt.Errorf("%v periodic loads", n)
		}
		return nil
	})
	d.halt()
	t.Logf("the old primary's own view from its restart on %s:\n\t%s", addr, w.halt())
	taken, fails := d.counts(restarted)
	_, before := d.counts(killed)
	t.Logf("killed at -%v; every shard decided again %v after the takeover; restarted: answering PING +%v, a synced replica +%v; "+
		"%d decisions failed between the kill and the restart (%s); slot map loads by trigger: %s",
		restarted.Sub(killed).Round(time.Millisecond), back.Round(time.Millisecond), answering.Round(time.Millisecond),
		healthy.Round(time.Millisecond), len(before)-len(fails), describe(before[:len(before)-len(fails)], killed), loadsByTrigger(t, reg))
	if len(fails) > 0 {
		t.Errorf("%d of the decisions after the restart failed (%d taken in all): %s", len(fails), taken, describe(fails, restarted))
	}
	checkFresh(t, runs, restarted)
}

// The rejoin tests' cluster: the operator's default node timeout, and the
// append-only file a pod's volume keeps.
var (
	rejoinNodeTimeout = 2 * time.Second
	rejoinExtra       = []string{"appendonly yes", "appendfsync everysec"}
)

// waitReplica waits until s is a replica whose link to its primary is up.
func waitReplica(t *testing.T, s *redistest.Server) {
	waitFor(t, settle, s.Addr+" a synced replica", func() error {
		v, err := s.Do("INFO", "replication")
		if info := fmt.Sprint(v); err != nil || !strings.Contains(info, "role:slave") || !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("%v %s", err, info)
		}
		return nil
	})
}

// failOver kills old, waits until the cluster flags it failed (as after a
// node's loss), then has its replica take over and waits until the cluster
// agrees.
func failOver(t *testing.T, c *redistest.Cluster, old *redistest.Server) {
	old.Stop()
	heir := c.Replicas[0][0]
	waitFor(t, settle, "the cluster flags "+old.Addr+" failed", func() error {
		v, err := heir.Do("CLUSTER", "NODES")
		if err != nil {
			return err
		}
		for line := range strings.SplitSeq(fmt.Sprint(v), "\n") {
			if f := strings.Fields(line); len(f) > 2 && strings.HasPrefix(f[1], old.Addr+"@") {
				if flags := strings.Split(f[2], ","); !slices.Contains(flags, "fail") {
					return fmt.Errorf("flags %s", f[2])
				}
				return nil
			}
		}
		return errors.New("not listed")
	})
	if _, err := heir.Do("CLUSTER", "FAILOVER", "TAKEOVER"); err != nil {
		t.Fatalf("CLUSTER FAILOVER TAKEOVER on %s: %v", heir.Addr, err)
	}
	c.WaitFailover(t, 0, old, settle)
}

// checkFresh fails the test for a fresh store that never knew its shards
// or failed a decision once it did, and logs a summary of the others.
func checkFresh(t *testing.T, runs []freshRun, t0 time.Time) {
	t.Helper()
	if len(runs) == 0 {
		t.Fatal("no store was built while the old primary restarted")
	}
	summary, failing := summarizeFresh(runs, t0)
	for _, f := range failing {
		t.Error(f)
	}
	for _, line := range summary {
		t.Log(line)
	}
}

// summarizeFresh tells, per kind of seeds, the fresh stores that failed no
// decision, and each that failed one or never knew its shards.
func summarizeFresh(runs []freshRun, t0 time.Time) (summary, failing []string) {
	type tally struct {
		n, taken          int
		first, last       int64
		slowest, quickest time.Duration
	}
	sums := map[string]*tally{}
	var order []string
	for _, r := range runs {
		at := r.built.Sub(t0).Milliseconds()
		line := fmt.Sprintf("store built at %+dms, seeded with %s: ", at, r.seeds)
		switch {
		case r.warm < 0:
			failing = append(failing, fmt.Sprintf("%snever knew its shards; its log:\n%s", line, r.logs))
			continue
		case len(r.failed) > 0:
			failing = append(failing, fmt.Sprintf("%sknew its shards in %v, then %d of %d decisions failed: %s; its log:\n%s", line,
				r.warm.Round(time.Millisecond), len(r.failed), r.taken, describe(r.failed, t0), r.logs))
			continue
		}
		s := sums[r.seeds]
		if s == nil {
			s = &tally{first: at, quickest: r.warm}
			sums[r.seeds] = s
			order = append(order, r.seeds)
		}
		s.n, s.taken, s.last = s.n+1, s.taken+r.taken, at
		s.slowest, s.quickest = max(s.slowest, r.warm), min(s.quickest, r.warm)
	}
	for _, seeds := range order {
		s := sums[seeds]
		summary = append(summary, fmt.Sprintf("%d stores seeded with %s, built from %+dms to %+dms: each knew its shards in %v to %v, then none of their %d decisions failed",
			s.n, seeds, s.first, s.last, s.quickest.Round(time.Millisecond), s.slowest.Round(time.Millisecond), s.taken))
	}
	return summary, failing
}
