package redis_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// Issue 43, item 2: limiters follow a Redis Cluster failover at once. The
// stores here never probe on their own (a cool-down of an hour) and never
// load the slot map on a timer (an hour too): a shard decided by Redis
// again after its primary went can only be the store's doing on the
// failures it met, never a cool-down or a periodic load that happened to
// come first.

// failoverStore is a cluster store whose breakers open after 3 failures
// and then wait an hour to probe, and whose slot map is loaded on a timer
// once an hour.
func failoverStore(t *testing.T, addrs []string) (*redisstore.Store, *prometheus.Registry, *logBuffer) {
	reg := prometheus.NewRegistry()
	logs := &logBuffer{}
	s := realStore(t, redisstore.WithMapRefresh(redisstore.Options{Addrs: addrs, Cluster: true,
		Timeout: 300 * time.Millisecond, Registerer: reg, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Breaker: redisstore.BreakerOptions{Failures: 3, Cooldown: time.Hour}}, time.Hour))
	return s, reg, logs
}

// logBuffer is a store's log, read while the store writes it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// line is the first line of the log holding every one of parts, or "".
func (l *logBuffer) line(parts ...string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for line := range strings.SplitSeq(l.buf.String(), "\n") {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			return line
		}
	}
	return ""
}

// loads is sluice_redis_slotmap_loads_total for trigger.
func loads(t *testing.T, reg *prometheus.Registry, trigger string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_redis_slotmap_loads_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label(m, "trigger") == trigger {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// loadsByTrigger lists sluice_redis_slotmap_loads_total, for the log.
func loadsByTrigger(t *testing.T, reg *prometheus.Registry) string {
	var out []string
	for _, m := range mustFamily(t, reg, "sluice_redis_slotmap_loads_total").GetMetric() {
		out = append(out, fmt.Sprintf("%s %v", label(m, "trigger"), m.GetCounter().GetValue()))
	}
	return strings.Join(out, ", ")
}

// healthyTaker decides keys of healthy shards and keeps what failed: a
// decision refused by a breaker is a failure; one that missed its deadline
// on a busy machine is noise, logged.
type healthyTaker struct {
	s                   *redisstore.Store
	keys                []store.Key
	unavailable, missed []string
}

func (h *healthyTaker) take() {
	for _, k := range h.keys {
		if _, err, _ := take(h.s, k); errors.Is(err, store.ErrUnavailable) {
			h.unavailable = append(h.unavailable, err.Error())
		} else if err != nil {
			h.missed = append(h.missed, err.Error())
		}
	}
}

func (h *healthyTaker) check(t *testing.T) {
	t.Helper()
	if len(h.unavailable) > 0 {
		t.Errorf("%d decisions on healthy shards refused by a breaker: %v", len(h.unavailable), h.unavailable[0])
	}
	if len(h.missed) > 0 {
		t.Logf("%d decisions on healthy shards missed the deadline on this machine: %v", len(h.missed), h.missed[0])
	}
}

// failover takes shard 0's primary away with fault, waits for its breaker
// to open, promotes its replica with CLUSTER FAILOVER TAKEOVER (it needs
// no answer from the old primary), and waits for the shard's keys to be
// decided by the new primary. It logs how long each step took.
func failover(t *testing.T, what string, fault func(old *redistest.Server)) {
	c := redistest.StartClusterWith(t, redistest.ClusterOptions{Primaries: 3, Replicas: 1, NodeTimeout: 5 * time.Second})
	s, reg, logs := failoverStore(t, c.Addrs())
	victim := keysOn(t, s, c, 0, 4)
	h := &healthyTaker{s: s, keys: append(keysOn(t, s, c, 1, 2), keysOn(t, s, c, 2, 2)...)}
	waitFor(t, settle, "every shard answers", func() error { return allAnswer(s, append(slices.Clone(victim), h.keys...), 3) })

	old, heir := c.Nodes[0], c.Replicas[0][0]
	fault(old)
	start := time.Now()
	opened := waitFor(t, settle, "shard 0's breaker open", func() error {
		h.take()
		_, err, _ := take(s, victim[0])
		return unavailable(err)
	})
	if _, err := heir.Do("CLUSTER", "FAILOVER", "TAKEOVER"); err != nil {
		t.Fatalf("CLUSTER FAILOVER TAKEOVER on %s: %v", heir.Addr, err)
	}
	c.WaitFailover(t, 0, old, settle)
	promoted := time.Now()
	resumed := waitFor(t, settle, "shard 0 decided by "+heir.Addr, func() error {
		h.take()
		_, err, _ := take(s, victim[1])
		return err
	})
	t.Logf("%s: breaker open %v after the fault; the replica promoted %v after it; shard 0 decided by it %v after the cluster agreed (cool-down 1h, periodic load 1h)",
		what, opened.Round(time.Millisecond), promoted.Sub(start).Round(time.Millisecond), resumed.Round(time.Millisecond))
	for _, k := range victim {
		if _, err, _ := take(s, k); err != nil {
			t.Errorf("after the failover: %v", err)
		}
	}
	h.check(t)
	// The log tells the limiter's side of the failover's timeline: the
	// new primary taken from the slot map, then the shard's first
	// decision on it.
	for _, msg := range []string{"Redis shard has a new primary", "Redis shard decides again, on its new primary"} {
		if line := logs.line(msg, "primary="+heir.Addr); line == "" {
			t.Errorf("no log line %q naming primary=%s; the store logged:\n%s", msg, heir.Addr, logs)
		} else {
			t.Log(line)
		}
	}
	t.Logf("slot map loads by trigger: %s", loadsByTrigger(t, reg))
	if n := loads(t, reg, "timer"); n != 1 {
		t.Errorf("%v slot map loads on the timer, want 1 (at start): the failover was found on a timer", n)
	}
}

// A primary stops answering (SIGSTOP: its connections stay open, nothing
// answers, every decision times out) and its replica takes over.
func TestFailoverPausedPrimary(t *testing.T) {
	failover(t, "paused primary", func(old *redistest.Server) { old.Pause(t) })
}

// A primary is killed (its address refuses connections) and its replica
// takes over.
func TestFailoverKilledPrimary(t *testing.T) {
	failover(t, "killed primary", func(old *redistest.Server) { old.Stop() })
}

// A MOVED reply (a slot handed to another shard) and a CLUSTERDOWN reply
// (a slot no shard serves) each have the slot map loaded at once, and the
// store's shards follow: the moved slot's breaker is the new owner's.
func TestSlotMapLoadedOnMovedAndClusterDown(t *testing.T) {
	c := redistest.StartClusterWith(t, redistest.ClusterOptions{Primaries: 3})
	reg := prometheus.NewRegistry()
	s := realStore(t, redisstore.WithMapRefresh(redisstore.Options{Addrs: c.Addrs(), Cluster: true, Registerer: reg,
		Breaker: redisstore.BreakerOptions{Failures: 1 << 30, Span: time.Hour}}, time.Hour))
	moving, unserved := keysOn(t, s, c, 0, 1)[0], keysOn(t, s, c, 2, 1)[0]
	// Neither key is written before its slot changes hands: a node keeps a
	// slot that holds keys.
	waitFor(t, settle, "every shard answers", func() error {
		return allAnswer(s, append(keysOn(t, s, c, 1, 2), keysOn(t, s, c, 0, 3)[1:]...), 3)
	})

	slot := redisstore.Slot(s.RedisKey(moving))
	to, err := c.Nodes[1].Do("CLUSTER", "MYID")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []*redistest.Server{c.Nodes[1], c.Nodes[0], c.Nodes[2]} {
		if _, err := n.Do("CLUSTER", "SETSLOT", slot, "NODE", to); err != nil {
			t.Fatalf("CLUSTER SETSLOT %d NODE %v on %s: %v", slot, to, n.Addr, err)
		}
	}
	before := loads(t, reg, "moved")
	if _, err, _ := take(s, moving); err != nil {
		t.Fatalf("the moved slot's key: %v (go-redis follows MOVED)", err)
	}
	waitFor(t, settle, "a slot map load on MOVED", func() error {
		if n := loads(t, reg, "moved"); n <= before {
			return fmt.Errorf("%v loads on MOVED", n)
		}
		return shardHas(s, strconv.Itoa(slot)+",")
	})

	slot = redisstore.Slot(s.RedisKey(unserved))
	for _, n := range c.Nodes {
		if _, err := n.Do("CLUSTER", "DELSLOTS", slot); err != nil {
			t.Fatalf("CLUSTER DELSLOTS %d on %s: %v", slot, n.Addr, err)
		}
	}
	before = loads(t, reg, "clusterdown")
	if _, err, _ := take(s, unserved); err == nil || !strings.Contains(err.Error(), "CLUSTERDOWN") {
		t.Fatalf("a key of a slot no shard serves: %v, want CLUSTERDOWN", err)
	}
	waitFor(t, settle, "a slot map load on CLUSTERDOWN", func() error {
		if n := loads(t, reg, "clusterdown"); n <= before {
			return fmt.Errorf("%v loads on CLUSTERDOWN", n)
		}
		return nil
	})
	if n := loads(t, reg, "timer"); n != 1 {
		t.Errorf("%v slot map loads on the timer, want 1 (at start)", n)
	}
}

// shardHas is nil when a shard's name (its slot ranges) starts with
// prefix.
func shardHas(s *redisstore.Store, prefix string) error {
	var names []string
	for _, b := range s.Breakers() {
		if strings.HasPrefix(b.Shard, prefix) {
			return nil
		}
		names = append(names, b.Shard)
	}
	return fmt.Errorf("no shard named %s...: %v", prefix, names)
}

// A primary that stops answering (SIGSTOP, behind a proxy that counts the
// connections made to it) is dialled by decisions until its breaker opens,
// each decision waiting no longer than its deadline; the slot map loads,
// every 100ms while the breaker is open, stop asking it once it did not
// answer; and once its replica has taken over, nothing dials it again.
func TestDeadPrimaryNotDialledAgain(t *testing.T) {
	c := redistest.StartClusterWith(t, redistest.ClusterOptions{Primaries: 3, Replicas: 1, NodeTimeout: 5 * time.Second, Proxied: []int{0}})
	s, reg, _ := failoverStore(t, c.Addrs())
	victim := keysOn(t, s, c, 0, 3)
	waitFor(t, settle, "every shard answers", func() error {
		return allAnswer(s, append(slices.Clone(victim), keysOn(t, s, c, 1, 2)...), 3)
	})
	p, old, heir := c.Proxies[0], c.Nodes[0], c.Replicas[0][0]
	old.Pause(t)
	var slowest time.Duration
	waitFor(t, settle, "shard 0's breaker open", func() error {
		_, err, d := take(s, victim[0])
		slowest = max(slowest, d)
		return unavailable(err)
	})
	atOpen := p.Accepted()
	// The first load that asks the stopped node waits out its deadline
	// (at most 1s); 20 loads are 2s of them at least.
	base := loads(t, reg, "open")
	awaitLoads := func(n float64) {
		waitFor(t, settle, "slot map loads while the breaker is open", func() error {
			if got := loads(t, reg, "open"); got < base+n {
				return fmt.Errorf("%v loads", got-base)
			}
			return nil
		})
	}
	awaitLoads(20)
	known := p.Accepted()
	awaitLoads(40)
	if n := p.Accepted(); n != known {
		t.Errorf("the stopped primary was dialled %d times more during 20 slot map loads after it was known dead", n-known)
	}
	if _, err := heir.Do("CLUSTER", "FAILOVER", "TAKEOVER"); err != nil {
		t.Fatalf("CLUSTER FAILOVER TAKEOVER on %s: %v", heir.Addr, err)
	}
	c.WaitFailover(t, 0, old, settle)
	waitFor(t, settle, "shard 0 decided by "+heir.Addr, func() error {
		_, err, _ := take(s, victim[1])
		return err
	})
	for range 50 {
		for _, k := range victim {
			if _, err, _ := take(s, k); err != nil {
				t.Fatalf("after the failover: %v", err)
			}
		}
	}
	if n := p.Accepted(); n != known {
		t.Errorf("the old primary was dialled %d times more after it was known dead (failover and 150 decisions since)", n-known)
	}
	t.Logf("slowest decision before the breaker opened: %v (deadline 300ms); dials of the stopped primary: %d until its breaker opened, %d until known dead, none after",
		slowest.Round(time.Millisecond), atOpen, known)
	if slowest > 300*time.Millisecond+2*time.Second {
		t.Errorf("a decision waited %v on a stopped primary; the deadline is 300ms", slowest)
	}
}
