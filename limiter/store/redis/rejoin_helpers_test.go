package redis_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// The parts of the rejoin tests (rejoin_test.go): a steady stream of
// decisions, a watch on a node's own view, and stores built while a node
// restarts.

// failed is one decision that failed, and when; key is the decision's
// (zero when the failure was no decision's).
type failed struct {
	at  time.Time
	err error
	key store.Key
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
					d.failed = append(d.failed, failed{time.Now(), err, k})
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
	once       sync.Once
	mu         sync.Mutex
	changes    []string
}

// watchView starts a watch that ends by halt, or with t.
func watchView(t *testing.T, addr string, slot int64, t0 time.Time) *viewWatch {
	w := &viewWatch{stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() { w.halt() })
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, DialerRetries: 1, DisableIdentity: true})
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
	w.once.Do(func() { close(w.stop) })
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
		r.failed = append(r.failed, failed{at: time.Now(), err: err})
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
				r.failed = append(r.failed, failed{at: time.Now(), err: err})
			}
		}
		time.Sleep(10 * time.Millisecond) // a few hundred decisions a second
	}
	return r
}

// maxFresh bounds the fresh stores alive at once: a store that never knows
// its shards lives up to settle, and a tick's new store must not pile up
// thousands of them on a machine that is slow to bring the node back.
const maxFresh = 16

// freshStores builds stores every tick until stopped (or t ends, so that
// a failed wait never leaves it building stores for the next tests), at
// most maxFresh alive at once, half seeded with every node (as a limiter
// is), half with the restarting node alone (the worst case: its answer is
// the only one), and returns their runs.
func freshStores(t *testing.T, c *redistest.Cluster, restarting string, keys []store.Key, tick time.Duration) (stop func() []freshRun) {
	quit := make(chan struct{})
	alive := make(chan struct{}, maxFresh)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var runs []freshRun
	wg.Go(func() {
		for i := 0; ; i++ {
			name, seeds := "every node", seedsOf(c)
			if !slices.Contains(seeds, restarting) {
				seeds = append(seeds, restarting) // its new address, as its pod's name resolves to
			}
			if i%2 == 1 {
				name, seeds = "the restarting node alone", []string{restarting}
			}
			select {
			case <-quit:
				return
			case alive <- struct{}{}:
			}
			wg.Go(func() {
				defer func() { <-alive }()
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
	var once sync.Once
	stop = func() []freshRun {
		once.Do(func() { close(quit) })
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return runs
	}
	t.Cleanup(func() { stop() })
	return stop
}
