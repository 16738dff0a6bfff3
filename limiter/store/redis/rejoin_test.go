package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/store"
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

// failed is one decision that failed, and when.
type failed struct {
	at  time.Time
	err error
}

// decider takes decisions on keys, a round of them every tick, until
// stopped, and keeps each that failed.
type decider struct {
	s    *redisstore.Store
	keys []store.Key
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu     sync.Mutex
	taken  int
	failed []failed
}

func startDecider(s *redisstore.Store, keys []store.Key, tick time.Duration) *decider {
	d := &decider{s: s, keys: keys, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(d.done)
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-d.stop:
				return
			case <-t.C:
			}
			for _, k := range d.keys {
				_, err, _ := take(d.s, k)
				d.mu.Lock()
				d.taken++
				if err != nil {
					d.failed = append(d.failed, failed{time.Now(), err})
				}
				d.mu.Unlock()
			}
		}
	}()
	return d
}

// halt stops d and waits for its last round; it may be called again.
func (d *decider) halt() {
	d.once.Do(func() { close(d.stop) })
	<-d.done
}

// counts are the decisions taken and those that failed at or after from.
func (d *decider) counts(from time.Time) (taken int, fails []failed) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, f := range d.failed {
		if !f.at.Before(from) {
			fails = append(fails, f)
		}
	}
	return d.taken, fails
}

// describe lists failures with their time after t0, by error, for logs.
func describe(fails []failed, t0 time.Time) string {
	byErr := map[string][]string{}
	var order []string
	for _, f := range fails {
		e := f.err.Error()
		if _, ok := byErr[e]; !ok {
			order = append(order, e)
		}
		byErr[e] = append(byErr[e], fmt.Sprintf("%+dms", f.at.Sub(t0).Milliseconds()))
	}
	var out []string
	for _, e := range order {
		at := byErr[e]
		if len(at) > 6 {
			at = append(at[:3], "...", at[len(at)-1])
		}
		out = append(out, fmt.Sprintf("%d× %q at %s", len(byErr[e]), e, strings.Join(at, ",")))
	}
	return strings.Join(out, "; ")
}

// allKeys are n keys on each shard of c.
func allKeys(t *testing.T, s *redisstore.Store, c *redistest.Cluster, n int) []store.Key {
	var keys []store.Key
	for i := range c.Nodes {
		keys = append(keys, keysOn(t, s, c, i, n)...)
	}
	return keys
}

// seedsOf are every node's address, as a limiter's seeds name every Redis
// pod of the fleet.
func seedsOf(c *redistest.Cluster) []string {
	var seeds []string
	for _, n := range c.All() {
		seeds = append(seeds, n.Addr)
	}
	return seeds
}

// viewWatch polls a node's own view (its role, its cluster_state, and whom
// it names as the primary of slot) and keeps each change, with its time.
type viewWatch struct {
	stop, done chan struct{}
	mu         sync.Mutex
	changes    []string
}

func watchView(addr string, slot int64, t0 time.Time) *viewWatch {
	w := &viewWatch{stop: make(chan struct{}), done: make(chan struct{})}
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, DisableIdentity: true})
	go func() {
		defer close(w.done)
		defer func() { _ = c.Close() }()
		last := ""
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(time.Millisecond): // polling the node under watch
			}
			if v := nodeView(c, slot); v != last {
				last = v
				w.mu.Lock()
				w.changes = append(w.changes, fmt.Sprintf("%+dms %s", time.Since(t0).Milliseconds(), v))
				w.mu.Unlock()
			}
		}
	}()
	return w
}

// nodeView is what the node at c says of itself and of slot's primary.
func nodeView(c *goredis.Client, slot int64) string {
	ctx := context.Background()
	role, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return "down: " + err.Error()
	}
	info, err := c.ClusterInfo(ctx).Result()
	state := "?"
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_state:"); ok {
			state = v
		}
	}
	if err != nil {
		state = err.Error()
	}
	owner := "none"
	slots, err := c.ClusterSlots(ctx).Result()
	for _, r := range slots {
		if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
			owner = r.Nodes[0].Addr
		}
	}
	if err != nil {
		owner = err.Error()
	}
	return fmt.Sprintf("role %v, cluster_state %s, slot %d's primary %s", role[0], state, slot, owner)
}

func (w *viewWatch) halt() string {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.changes, "\n\t")
}

// freshRun is one store built while the old primary restarts: when it was
// built, whom it was seeded with, how long it took to know its shards, and
// the decisions it took from then and those that failed.
type freshRun struct {
	built  time.Time
	seeds  string
	warm   time.Duration // -1: never warm
	taken  int
	failed []failed
	logs   *logBuffer
}

// freshStore builds a store seeded with seeds, waits (up to within) until
// it knows its shards, then takes rounds of decisions on keys.
func freshStore(name string, seeds []string, keys []store.Key, rounds int, within time.Duration) freshRun {
	r := freshRun{built: time.Now(), seeds: name, warm: -1, logs: &logBuffer{}}
	s, _, err := rejoinStore(seeds, r.logs)
	if err != nil {
		r.failed = append(r.failed, failed{time.Now(), err})
		return r
	}
	defer func() { _ = s.Close() }()
	for !s.Warm() {
		if time.Since(r.built) > within {
			return r
		}
		time.Sleep(5 * time.Millisecond) // polling the store under test
	}
	r.warm = time.Since(r.built)
	for range rounds {
		for _, k := range keys {
			r.taken++
			if _, err, _ := take(s, k); err != nil {
				r.failed = append(r.failed, failed{time.Now(), err})
			}
		}
		time.Sleep(10 * time.Millisecond) // a few hundred decisions a second
	}
	return r
}

// freshStores builds stores every tick until stopped, half seeded with
// every node (as a limiter is), half with the restarting node alone (the
// worst case: its answer is the only one), and returns their runs.
func freshStores(c *redistest.Cluster, old *redistest.Server, keys []store.Key, tick time.Duration) (stop func() []freshRun) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var runs []freshRun
	wg.Go(func() {
		for i := 0; ; i++ {
			name, seeds := "every node", seedsOf(c)
			if i%2 == 1 {
				name, seeds = "the restarting node alone", []string{old.Addr}
			}
			wg.Go(func() {
				r := freshStore(name, seeds, keys, 20, settle)
				mu.Lock()
				runs = append(runs, r)
				mu.Unlock()
			})
			select {
			case <-quit:
				return
			case <-time.After(tick):
			}
		}
	})
	return func() []freshRun {
		close(quit)
		wg.Wait()
		return runs
	}
}

// TestRejoinOfAFailedPrimary: shard 0's primary is killed and its replica
// takes over (CLUSTER FAILOVER TAKEOVER, once the cluster flags it failed);
// once every shard decides again, the old primary starts again from its own
// dir (nodes.conf, append-only file) on its old address, as a stopped
// node's pod comes back. From the restart on, no decision of the store
// that lived through it fails, and neither does any of the stores built
// while the old primary restarts, once they know their shards.
func TestRejoinOfAFailedPrimary(t *testing.T) {
	c := redistest.StartClusterWith(t, redistest.ClusterOptions{Primaries: 3, Replicas: 1, NodeTimeout: 2 * time.Second,
		Extra: []string{"appendonly yes", "appendfsync everysec"}})
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

	restarted := time.Now()
	w := watchView(old.Addr, int64(c.Ranges[0][0]), restarted)
	stopFresh := freshStores(c, old, keys, 25*time.Millisecond)
	old.Restart(t)
	answering := time.Since(restarted)
	c.WaitHealthy(t, settle) // the old primary a synced replica
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
	t.Logf("the old primary's own view from its restart:\n\t%s", w.halt())
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
	type tally struct {
		n, taken          int
		first, last       int64
		slowest, quickest time.Duration
	}
	sums := map[string]*tally{}
	for _, r := range runs {
		line := fmt.Sprintf("store built at %+dms, seeded with %s: ", r.built.Sub(t0).Milliseconds(), r.seeds)
		switch {
		case r.warm < 0:
			t.Errorf("%snever knew its shards; its log:\n%s", line, r.logs)
			continue
		case len(r.failed) > 0:
			t.Errorf("%sknew its shards in %v, then %d of %d decisions failed: %s; its log:\n%s", line,
				r.warm.Round(time.Millisecond), len(r.failed), r.taken, describe(r.failed, t0), r.logs)
			continue
		}
		at := r.built.Sub(t0).Milliseconds()
		s := sums[r.seeds]
		if s == nil {
			s = &tally{first: at, quickest: r.warm}
			sums[r.seeds] = s
		}
		s.n, s.taken, s.last = s.n+1, s.taken+r.taken, at
		s.slowest, s.quickest = max(s.slowest, r.warm), min(s.quickest, r.warm)
	}
	for seeds, s := range sums {
		t.Logf("%d stores seeded with %s, built from %+dms to %+dms: each knew its shards in %v to %v, then none of their %d decisions failed",
			s.n, seeds, s.first, s.last, s.quickest.Round(time.Millisecond), s.slowest.Round(time.Millisecond), s.taken)
	}
}
