package rediscluster_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/controllers/rediscluster"
)

// TestLastMasterOfALostNodeFailsOverAtOneNodeTimeout is the journey's
// node loss as a CI run saw it: every master stopped, two were taken over
// first, and the third master's last pong was later than theirs, so it
// was due only after the two heirs served. With a majority back, the pass
// waited twice the node timeout for it, and Redis's own election (FAIL
// agreed by the heirs, then 0.5-1s more) came first, 2s after the others.
// A master that answers neither the operator nor the cluster is failed
// over one node timeout after it was last heard from, with FORCE now that
// a majority can vote; and while it is silent but not yet due, the pass
// asks to be run again soon.
//
// The replicas never fail over by themselves (cluster-replica-no-failover)
// and the verdicts are taken at a clock the test sets from the anchor's
// own view, so nothing here depends on how fast the machine runs passes.
func TestLastMasterOfALostNodeFailsOverAtOneNodeTimeout(t *testing.T) {
	f := newFleet(t, 240, 3, 1, "cluster-replica-no-failover yes")
	f.reconcileUntil(30*time.Second, converged)
	f.writeKeys("late", 2000)

	// Masters 0 and 1 are lost: no majority.
	f.servers[podName(0, 0)].Pause(t)
	f.servers[podName(1, 0)].Pause(t)
	opts := []rediscluster.Option{rediscluster.WithTracker(f.tracker), rediscluster.WithTimeout(500 * time.Millisecond)}
	rescueUntil := func(what string, done func(rediscluster.Result, error) bool, clockOpts ...rediscluster.Option) []string {
		t.Helper()
		var sent []string
		deadline := time.Now().Add(6*nodeTimeout + 30*time.Second)
		for {
			res, err := rediscluster.Rescue(context.Background(), f.spec, append(slices.Clone(opts), clockOpts...)...)
			sent = append(sent, res.Actions...)
			if done(res, err) {
				return sent
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not done; sent %v; last status %+v, error %v", what, sent, res.Status, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	sent := rescueUntil("shards 0 and 1 taken over", func(res rediscluster.Result, err error) bool {
		return shardServed(0)(res, err) && shardServed(1)(res, err)
	})
	// TAKEOVER for the first due; the other may get FORCE once the first
	// heir serves, a majority again.
	if countTakeovers(sent) == 0 || !hasAction(sent, podName(0, 1)+": CLUSTER FAILOVER") || !hasAction(sent, podName(1, 1)+": CLUSTER FAILOVER") {
		t.Fatalf("want a TAKEOVER, then a promotion of shards 0's and 1's replicas each, sent %v", sent)
	}

	// Master 2 is lost after them; the heirs and 2-1 await its pong.
	f.servers[podName(2, 0)].Pause(t)
	lastPong := f.awaitPingPending(podName(2, 0), 30*time.Second)
	t.Logf("master 2 paused; the cluster last heard from it at %s", lastPong.Format("15:04:05.000"))

	at := func(d time.Duration) rediscluster.Option {
		return rediscluster.WithClock(func() time.Time { return lastPong.Add(d) })
	}
	// Silent, not due: no action, and look again soon.
	res, err := rediscluster.Rescue(context.Background(), f.spec, append(slices.Clone(opts), at(nodeTimeout/2))...)
	if len(res.Actions) != 0 || res.RequeueAfter == 0 || res.RequeueAfter > time.Second {
		t.Fatalf("half a node timeout after master 2 was last heard from: want no action and a requeue within 1s, got actions %v, requeue %v (error %v)",
			res.Actions, res.RequeueAfter, err)
	}
	// Due at one node timeout, FORCE: two of three masters vote.
	res, err = rediscluster.Rescue(context.Background(), f.spec, append(slices.Clone(opts), at(nodeTimeout+nodeTimeout/4))...)
	want := podName(2, 1) + ": CLUSTER FAILOVER FORCE"
	if !slices.Contains(res.Actions, want) {
		t.Fatalf("1.25 node timeouts after master 2 was last heard from, with two masters serving: want %q, got %v (error %v)", want, res.Actions, err)
	}
	rescueUntil("shard 2 served by its heir", shardServed(2))
	f.checkKeys("late", 2000)
}

// awaitPingPending waits until every answering member but pod awaits
// pod's pong (a ping sent, none received since), and returns the latest
// pong any of them received from it: when the cluster last heard from it.
func (f *fleet) awaitPingPending(pod string, within time.Duration) time.Time {
	f.t.Helper()
	clients := f.runningClients(pod)
	deadline := time.Now().Add(within)
	for {
		pending, latest, seen := 0, int64(0), ""
		for other, c := range clients {
			n, err := f.lineAbout(c, pod)
			if err != nil {
				seen = other + ": " + err.Error()
				continue
			}
			if n.PingSent > 0 {
				pending++
			}
			latest = max(latest, n.PongRecv)
			seen = other + " sees " + strings.Join(n.Flags, ",")
		}
		if len(clients) > 0 && pending == len(clients) && latest > 0 {
			return time.UnixMilli(latest)
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("the members do not all await %s's pong within %v: %d of %d do; last seen %s", pod, within, pending, len(clients), seen)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runningClients are clients of the running members but except, by pod.
func (f *fleet) runningClients(except string) map[string]*goredis.Client {
	clients := map[string]*goredis.Client{}
	for _, m := range f.spec.Members {
		if m.Pod != except && f.servers[m.Pod].Running() {
			clients[m.Pod] = f.node(m.Pod)
		}
	}
	return clients
}

// lineAbout is the CLUSTER NODES line about pod of the node c talks to.
func (f *fleet) lineAbout(c *goredis.Client, pod string) (rediscluster.Node, error) {
	var addr string
	for _, m := range f.spec.Members {
		if m.Pod == pod {
			addr = m.Addr
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return rediscluster.Node{}, err
	}
	nodes, err := rediscluster.ParseNodes(out)
	if err != nil {
		return rediscluster.Node{}, err
	}
	if i := slices.IndexFunc(nodes, func(n rediscluster.Node) bool { return n.Addr == addr }); i >= 0 {
		return nodes[i], nil
	}
	return rediscluster.Node{}, fmt.Errorf("does not know %s at %s", pod, addr)
}

// TestTakeoverOutbidsTheLostMastersEpoch: TAKEOVER gives the heir a new
// config epoch only when its own is not already the highest it knows, and
// the heir's claim on the slots wins only above the lost master's epoch.
// A replica left sharing its master's epoch at the cluster's start (Redis
// gives colliding masters epochs of their own, not a master and its
// replica) and taken over first, while that epoch was the highest, claimed
// the slots at the lost master's epoch: every other node kept them with
// the lost master, and a journey run's third shard stayed down for a
// minute. Its own epoch can't be read (CLUSTER NODES shows a replica with
// its master's), so the pass sends the takeover of the master that holds
// the top epoch last, once the others' new epochs have reached its heir,
// and that heir takes a new epoch of its own.
func TestTakeoverOutbidsTheLostMastersEpoch(t *testing.T) {
	f := newFleet(t, 247, 3, 1)
	f.reconcileUntil(30*time.Second, converged)
	f.writeKeys("outbid", 2000)
	// The master with the top epoch among the masters takes the cluster's
	// current epoch, so that its heir does not outbid it: a replica may
	// hold a higher epoch of its own from the cluster's start.
	top, _ := f.topEpochMaster()
	heir := podName(top, 1)
	bumped, err := f.node(podName(top, 0)).Do(context.Background(), "CLUSTER", "BUMPEPOCH").Text()
	if err != nil {
		t.Fatal(err)
	}
	f2 := strings.Fields(bumped) // "BUMPED 6" or "STILL 5"
	epoch, err := strconv.ParseInt(f2[len(f2)-1], 10, 64)
	if err != nil {
		t.Fatalf("CLUSTER BUMPEPOCH: %q", bumped)
	}
	f.awaitEpochKnown(podName(top, 0), epoch, 30*time.Second)
	t.Logf("shard %d's master holds the cluster's current epoch, %d (%s)", top, epoch, bumped)

	for s := range 3 {
		f.servers[podName(s, 0)].Pause(t)
	}
	opts := []rediscluster.Option{rediscluster.WithTracker(f.tracker), rediscluster.WithTimeout(500 * time.Millisecond)}
	deadline := time.Now().Add(6*nodeTimeout + 30*time.Second)
	var sent []string
	for pass := 1; ; pass++ {
		res, err := rediscluster.Rescue(context.Background(), f.spec, opts...)
		sent = append(sent, res.Actions...)
		if i := slices.Index(res.Actions, heir+": CLUSTER FAILOVER TAKEOVER"); i >= 0 && i != len(res.Actions)-1 {
			t.Fatalf("pass %d sent %v: the takeover of %s, whose lost master holds the top epoch, should come after the others", pass, res.Actions, heir)
		}
		if shardServed(0)(res, err) && shardServed(1)(res, err) && shardServed(2)(res, err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not every shard served again: sent %v; last status %+v, error %v", sent, res.Status, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Promoted by its TAKEOVER, or by a FORCE once the others were back
	// (an election, which always gives a new epoch), it took a new epoch.
	log := f.servers[heir].Log()
	i := max(strings.LastIndex(log, "Taking over the master"), strings.LastIndex(log, "failover user request accepted"))
	if i < 0 || !strings.Contains(log[i:], "onfigEpoch set to") {
		t.Fatalf("%s did not take a new epoch with its promotion (sent %v); its log after it: %q", heir, sent, log[max(i, 0):])
	}
	t.Logf("sent %v; %s after its promotion: %q", sent, heir, log[i:min(len(log), i+160)])
	f.checkKeys("outbid", 2000)
}

// node is a client of pod, closed when the test ends.
func (f *fleet) node(pod string) *goredis.Client {
	for _, m := range f.spec.Members {
		if m.Pod == pod {
			c := goredis.NewClient(&goredis.Options{Addr: m.Addr, Username: f.spec.Username, Password: f.spec.Password})
			f.t.Cleanup(func() { _ = c.Close() })
			return c
		}
	}
	f.t.Fatalf("no member %s", pod)
	return nil
}

// awaitEpochKnown waits until every running member knows master's config
// epoch as epoch, and epoch as the cluster's current one.
func (f *fleet) awaitEpochKnown(master string, epoch int64, within time.Duration) {
	f.t.Helper()
	clients := f.runningClients("")
	deadline := time.Now().Add(within)
	want := "cluster_current_epoch:" + strconv.FormatInt(epoch, 10) + "\r\n"
	for {
		seen := ""
		for pod, c := range clients {
			info, _ := c.ClusterInfo(context.Background()).Result()
			n, err := f.lineAbout(c, master)
			if !strings.Contains(info, want) || err != nil || n.ConfigEpoch != epoch {
				seen = fmt.Sprintf("%s: %s's epoch %d, error %v, current epoch not %d yet", pod, master, n.ConfigEpoch, err, epoch)
				break
			}
		}
		if seen == "" {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("not every member knows %s's epoch %d within %v: %s", master, epoch, within, seen)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// topEpochMaster is the shard whose master holds the highest config epoch
// in the first member's view, and that epoch.
func (f *fleet) topEpochMaster() (shard int, epoch int64) {
	f.t.Helper()
	m := f.spec.Members[0]
	out, err := f.node(m.Pod).ClusterNodes(context.Background()).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	nodes, err := rediscluster.ParseNodes(out)
	if err != nil {
		f.t.Fatal(err)
	}
	shard, epoch = -1, -1
	for _, n := range nodes {
		if !n.Master() || n.SlotCount() == 0 || n.ConfigEpoch <= epoch {
			continue
		}
		for _, mm := range f.spec.Members {
			if mm.Addr == n.Addr {
				shard, epoch = mm.Shard, n.ConfigEpoch
			}
		}
	}
	if shard < 0 {
		f.t.Fatalf("no master in %s's view", m.Pod)
	}
	return shard, epoch
}
