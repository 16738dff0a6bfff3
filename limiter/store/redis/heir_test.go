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

// Issue 43: a shard's breaker closes as soon as its new primary is known.
// The journey's NodeStopped step (the node holding the primaries stopped,
// its packets dropped; the operator's CLUSTER FAILOVER TAKEOVER once the
// cluster flags them) saw the limiters' breakers close 2.2 s after the new
// primaries were named. TestHeirClosesTheBreaker plays it on real
// redis-servers: two of three primaries SIGSTOPped (they time out, as a
// stopped node's do, rather than refuse), a steady decider on every shard,
// and a store with the limiter's defaults (a 20ms deadline, the breaker's
// defaults) but for a cool-down of an hour: a breaker that closes can only
// have been closed by its heir, through the kick. Its chain shows where
// the 2.2 s went: a replica promoted while it saw most primaries lost
// answers CLUSTERDOWN for Redis's rejoin delay (the node timeout, 2 s
// here), and the kick's probes had stopped after 300ms, so the breaker
// waited its cool-down on top (an hour here: it never closed).

// TestHeirClosesTheBreaker logs each victim shard's chain from the
// takeover on (the heir's own cluster_state ok, the store's map names it,
// go-redis routes to it, the breaker closes, the first decision answered)
// and requires that each breaker closes, with an hour's cool-down; that
// at most the one probe in flight when the heir turns ok fails; and that
// no decision on a victim shard meets a refusal from Redis once its
// breaker closed. Two of three primaries stop: the first heir promoted
// saw most primaries lost and waits its rejoin delay; the other most
// often heard of it first, as a replica, and does not.
func TestHeirClosesTheBreaker(t *testing.T) { heirChain(t, time.Hour, 0, 2) }

// TestHeirClosesTheBreakerEveryPrimaryLost is TestHeirClosesTheBreaker
// with every primary stopped, as the journey's node held them all.
func TestHeirClosesTheBreakerEveryPrimaryLost(t *testing.T) { heirChain(t, time.Hour, 0, 1, 2) }

// TestHeirChainWithDefaults is TestHeirClosesTheBreakerEveryPrimaryLost
// with the breaker's own cool-down, as limiters run: its log is the chain
// as the journey meets it.
func TestHeirChainWithDefaults(t *testing.T) { heirChain(t, 0, 0, 1, 2) }

// heirChain runs the heir tests: the primaries of shards victims stop,
// and the store's breakers cool down for cooldown (0: the default).
func heirChain(t *testing.T, cooldown time.Duration, victims ...int) {
	c := redistest.StartClusterWith(t, redistest.ClusterOptions{Primaries: 3, Replicas: 1, NodeTimeout: 2 * time.Second})
	logs := &logBuffer{}
	reg := prometheus.NewRegistry()
	s := realStore(t, redisstore.Options{Addrs: seedsOf(c), Cluster: true, Timeout: 20 * time.Millisecond,
		Registerer: reg, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Breaker: redisstore.BreakerOptions{Cooldown: cooldown}})
	keys := allKeys(t, s, c, 4)
	waitFor(t, settle, "every shard answers", func() error { return allAnswer(s, keys, 3) })
	d := startDecider(s, keys, 10*time.Millisecond)
	defer d.halt()

	for _, i := range victims {
		old := c.Nodes[i]
		old.Pause(t)
		t.Cleanup(old.Stop) // SIGCONT, then SIGKILL
	}
	stopped := time.Now()
	for _, i := range victims {
		waitFor(t, settle, fmt.Sprintf("shard %d's breaker open", i), func() error { return breakerIs(s, c.RangeName(i), false) })
	}
	for _, i := range victims {
		waitFlagged(t, c.Replicas[i][0], c.Nodes[i].Addr)
	}
	chains := make([]*chain, len(victims))
	for j, i := range victims {
		heir := c.Replicas[i][0]
		if _, err := heir.Do("CLUSTER", "FAILOVER", "TAKEOVER"); err != nil {
			t.Fatalf("CLUSTER FAILOVER TAKEOVER on %s: %v", heir.Addr, err)
		}
		chains[j] = &chain{shard: c.RangeName(i), heir: heir.Addr, keys: keysOn(t, s, c, i, 4), took: time.Now(), node: heir.Client(t),
			errs: func() float64 { return errorsOn(reg, c.RangeName(i)) }}
	}
	var wg sync.WaitGroup
	for _, ch := range chains {
		wg.Go(func() { ch.follow(s, settle) })
	}
	wg.Wait()
	d.halt()
	for _, ch := range chains {
		t.Logf("shard %s: takeover done %+dms after the stop; %s", ch.shard, ch.took.Sub(stopped).Milliseconds(), ch)
		if ch.err != nil {
			t.Errorf("shard %s: %v; the store logged:\n%s", ch.shard, ch.err, logs)
			continue
		}
		// One probe at a time: one in flight when the heir turns ok fails
		// at most, and the next is answered (with an hour's cool-down,
		// every probe is the kick's, to the heir).
		if cooldown == time.Hour && ch.refused > 1 {
			t.Errorf("shard %s: %v probes failed after the heir's cluster_state was ok, want at most the one in flight", ch.shard, ch.refused)
		}
		// Closed on an answer, the breaker sends decisions to a heir that
		// answers: none meets CLUSTERDOWN (or any reply that says the
		// shard can't answer). A deadline missed on this loaded machine
		// (and a breaker opened again by such misses) is noise, logged.
		_, fails := d.counts(ch.closed)
		fails = slices.DeleteFunc(fails, func(f failed) bool { return !slices.Contains(ch.keys, f.key) })
		noise := slices.DeleteFunc(slices.Clone(fails), func(f failed) bool { return !missed(f.err) })
		fails = slices.DeleteFunc(fails, func(f failed) bool { return missed(f.err) })
		if len(noise) > 0 {
			t.Logf("shard %s: %d decisions missed the deadline after its breaker closed: %s", ch.shard, len(noise), describe(noise, ch.closed))
		}
		if len(fails) > 0 {
			t.Errorf("shard %s: %d decisions failed after its breaker closed: %s", ch.shard, len(fails), describe(fails, ch.closed))
		}
	}
	_, fails := d.counts(chains[0].took)
	t.Logf("decisions failed from the first takeover on: %s", describe(fails, chains[0].took))
	t.Logf("slot map loads by trigger: %s", loadsByTrigger(t, reg))
}

// missed reports a decision that missed its deadline, or was refused by
// a breaker (opened again by such misses).
func missed(err error) bool {
	return errors.Is(err, store.ErrUnavailable) || redisstore.FailureClass(err) == redisstore.ClassTimeout
}

// breakerIs is nil when shard's breaker is closed (closed true) or not.
func breakerIs(s *redisstore.Store, shard string, closed bool) error {
	for _, b := range s.Breakers() {
		if b.Shard == shard {
			if (b.State == redisstore.BreakerClosed) == closed {
				return nil
			}
			return fmt.Errorf("breaker %s", b.State)
		}
	}
	return fmt.Errorf("no shard %s", shard)
}

// waitFlagged waits until heir's view flags the node at addr failed, or
// suspected (fail?): with most primaries stopped, no majority agrees on
// fail, and the operator takes over on the suspicion.
func waitFlagged(t *testing.T, heir *redistest.Server, addr string) {
	waitFor(t, settle, heir.Addr+" flags "+addr+" failed", func() error {
		v, err := heir.Do("CLUSTER", "NODES")
		if err != nil {
			return err
		}
		for line := range strings.SplitSeq(fmt.Sprint(v), "\n") {
			if f := strings.Fields(line); len(f) > 2 && strings.HasPrefix(f[1], addr+"@") {
				if !strings.Contains(f[2], "fail") {
					return fmt.Errorf("flags %s", f[2])
				}
				return nil
			}
		}
		return errors.New("not listed")
	})
}

// chain is one victim shard's way back, each step's time.
type chain struct {
	shard, heir string
	keys        []store.Key // the decider's on the shard
	took        time.Time   // CLUSTER FAILOVER TAKEOVER answered: the heir is primary
	node        *goredis.Client
	// errs counts the shard's failed round trips; while its breaker is
	// open, its probes alone: refused is how many failed from the heir's
	// cluster_state ok to the breaker's closing.
	errs    func() float64
	refused float64

	// ok is when the heir's own cluster_state was first ok: a promoted
	// replica that was among a minority of primaries answers CLUSTERDOWN
	// until its rejoin delay (the node timeout) has passed.
	ok, named, routed, closed, decided time.Time
	err                                error
}

// follow polls the store until a decision on the shard is answered,
// noting when each step of the chain was first seen, or until within.
func (ch *chain) follow(s *redisstore.Store, within time.Duration) {
	for {
		now := time.Now()
		if ch.ok.IsZero() {
			if info, err := ch.node.ClusterInfo(context.Background()).Result(); err == nil && strings.Contains(info, "cluster_state:ok") {
				ch.ok = now
				ch.refused = -ch.errs()
			}
		}
		if ch.named.IsZero() && slices.Contains(redisstore.Primaries(s), ch.heir) {
			ch.named = now
		}
		if ch.routed.IsZero() && redisstore.RoutesTo(s, s.RedisKey(ch.keys[0]), ch.heir) {
			ch.routed = now
		}
		if ch.closed.IsZero() && breakerIs(s, ch.shard, true) == nil {
			ch.closed = now
			if ch.ok.IsZero() { // it answered the probe: ok since this poll's start
				ch.ok, ch.refused = now, -ch.errs()
			}
			ch.refused += ch.errs()
		}
		if !ch.closed.IsZero() {
			if _, err, _ := take(s, ch.keys[0]); err == nil {
				ch.decided = time.Now()
				return
			}
		}
		if now.Sub(ch.took) > within {
			ch.err = fmt.Errorf("no decision answered within %v of the takeover: %s", within, ch)
			return
		}
		time.Sleep(time.Millisecond) // polling the store under test
	}
}

// errorsOn is sluice_redis_errors_total of shard, every class.
func errorsOn(reg *prometheus.Registry, shard string) float64 {
	mfs, _ := reg.Gather()
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "sluice_redis_errors_total" {
			for _, m := range mf.GetMetric() {
				if label(m, "shard") == shard {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

func (ch *chain) String() string {
	at := func(what string, t time.Time) string {
		if t.IsZero() {
			return what + " never"
		}
		return fmt.Sprintf("%s %+dms", what, t.Sub(ch.took).Milliseconds())
	}
	steps := strings.Join([]string{at("the heir's cluster_state ok", ch.ok), at("the store's map names the heir", ch.named), at("go-redis routes to it", ch.routed),
		at("breaker closed", ch.closed), at("first decision answered", ch.decided)}, ", ")
	if !ch.closed.IsZero() {
		steps += fmt.Sprintf("; %v probes failed between the heir's ok and the closing", ch.refused)
	}
	return steps
}
