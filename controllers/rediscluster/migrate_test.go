package rediscluster_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/controllers/rediscluster"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

var movedKeys = regexp.MustCompile(`\((\d+) keys\)`)

// keysMoved sums the keys the migration notes report.
func keysMoved(actions []string) int {
	n := 0
	for _, a := range actions {
		if m := movedKeys.FindStringSubmatch(a); m != nil {
			k, _ := strconv.Atoi(m[1])
			n += k
		}
	}
	return n
}

// load writes and reads through a cluster client until stopped, counting
// every error it gets.
type load struct {
	written atomic.Int64
	errs    atomic.Int64
	mu      sync.Mutex
	first   []error
	stop    chan struct{}
	done    chan struct{}
}

func startLoad(f *fleet, prefix string, preloaded int) *load {
	l := &load{stop: make(chan struct{}), done: make(chan struct{})}
	c := f.client(f.spec.Password)
	go func() {
		defer close(l.done)
		ctx := context.Background()
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			default:
			}
			err := c.Set(ctx, fmt.Sprintf("live:%d", i), i, 0).Err()
			if err == nil {
				l.written.Store(int64(i + 1))
				var v int
				v, err = c.Get(ctx, fmt.Sprintf("%s:%d", prefix, i%preloaded)).Int()
				if err == nil && v != i%preloaded {
					err = fmt.Errorf("%s:%d = %d", prefix, i%preloaded, v)
				}
			}
			if err != nil {
				l.fail(err)
				if i > 0 && l.written.Load() < int64(i) {
					i-- // write again: every live key must exist
				}
			}
		}
	}()
	return l
}

func (l *load) halt() { close(l.stop); <-l.done }

func (l *load) fail(err error) {
	l.errs.Add(1)
	l.mu.Lock()
	if len(l.first) < 5 {
		l.first = append(l.first, err)
	}
	l.mu.Unlock()
}

// startLimiterLoad decides through the limiter's own Redis store (Lua
// scripts, idempotency records in the counter's slot) over 2000 counters
// until stopped, counting every error.
func startLimiterLoad(t *testing.T, f *fleet) *load {
	var addrs []string
	for _, m := range f.spec.Members {
		addrs = append(addrs, m.Addr)
	}
	opts := redisstore.Options{Addrs: addrs, Cluster: true, Password: f.spec.Password, Timeout: 2 * time.Second}
	if f.admin[0] != "" { // ACL users: the limiters' own
		opts.Username, opts.Password = aclLimiter, aclLimiterPW
	}
	s, err := redisstore.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l := &load{stop: make(chan struct{}), done: make(chan struct{})}
	lim := algo.Limit{Algorithm: algo.GCRA, Limit: 1000000, Period: time.Hour, Burst: 1000000}
	go func() {
		defer close(l.done)
		ctx := context.Background()
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			default:
			}
			var b, idem store.KeyBuilder
			b.Add(fmt.Sprintf("counter-%d", i%2000))
			idem.Add(fmt.Sprintf("request-%d", i))
			if _, err := s.Take(ctx, store.Request{Key: b.Key(), Limit: lim, Cost: 1, Idempotency: idem.Key()}); err != nil {
				l.fail(err)
				continue
			}
			l.written.Add(1)
		}
	}()
	return l
}

// TestScaleOut raises 3 shards to 4 under reads and writes, on nodes with
// ACL users as the operator renders them: the slots spread evenly, no key
// is lost, the clients get no error (neither CROSSSLOT nor any other), and
// no node refused the operator (MIGRATE between nodes as its user),
// replication or the limiters' store anything. Lowering shards again is
// rejected.
func TestScaleOut(t *testing.T) {
	f := newACLFleet(t, 150, 3, 1)
	f.reconcileUntil(30*time.Second, converged)
	const n = 20000
	f.writeKeys("pre", n)

	f.add(3, 0, 156)
	f.add(3, 1, 157)
	f.spec.Shards = 4
	l := startLoad(f, "pre", n)
	ll := startLimiterLoad(t, f)
	start := time.Now()
	res, actions := f.reconcileUntil(5*time.Minute, converged) // a bound, not a target: the took figure is logged
	took := time.Since(start)
	l.halt()
	ll.halt()
	t.Logf("scale-out 3->4 shards: converged after %v, %d keys migrated; meanwhile %d SET+GET with %d errors %v, and %d limiter store decisions with %d errors %v",
		took.Round(time.Millisecond), keysMoved(actions), l.written.Load(), l.errs.Load(), l.first, ll.written.Load(), ll.errs.Load(), ll.first)
	if l.errs.Load() > 0 || ll.errs.Load() > 0 {
		t.Errorf("clients got errors during the migration: %v; limiter store: %v", l.first, ll.first)
	}
	for pod, s := range slotsPerPrimary(res) {
		if s != 4096 {
			t.Errorf("%s serves %d slots, want 4096", pod, s)
		}
	}
	f.checkKeys("pre", n)
	f.checkKeys("live", int(l.written.Load()))
	f.requireNoDenials()

	f.spec.Shards = 3
	_, err := f.reconcile(context.Background())
	var scaleIn *rediscluster.ScaleInError
	if !errors.As(err, &scaleIn) || scaleIn.Have != 4 || !strings.Contains(err.Error(), "scale-in from 4 to 3 Redis shards is not supported") {
		t.Fatalf("scale-in: %v", err)
	}
}

// openSlots lists the "[slot->-id]" / "[slot-<-id]" entries of every node.
func openSlots(t *testing.T, f *fleet) []string {
	t.Helper()
	var open []string
	for _, m := range f.spec.Members {
		c := goredis.NewClient(&goredis.Options{Addr: m.Addr, Username: f.spec.Username, Password: f.spec.Password})
		s, err := c.ClusterNodes(context.Background()).Result()
		_ = c.Close()
		if err != nil {
			t.Fatalf("CLUSTER NODES on %s: %v", m.Pod, err)
		}
		for _, line := range strings.Split(s, "\n") {
			if strings.Contains(line, "myself") && strings.Contains(line, "[") {
				open = append(open, m.Pod+": "+line[strings.Index(line, "["):])
			}
		}
	}
	return open
}

// TestMigrationResumes cuts a scale-out short twice, as an operator that
// is killed does: once between passes (the plan persisted in status), once
// in the middle of a pass, and a slot is also left half-migrated by hand.
// The next passes, given the persisted plan, finish with no slot left open
// and every key in place.
func TestMigrationResumes(t *testing.T) {
	f := newFleet(t, 160, 3, 0)
	f.reconcileUntil(30*time.Second, converged)
	const n = 30000
	f.writeKeys("mig", n)
	f.add(3, 0, 163)
	f.spec.Shards = 4

	// Passes with a short budget until one starts migrating.
	var persisted *rediscluster.Migration
	for persisted == nil {
		res, err := f.reconcile(context.Background(), rediscluster.WithMigrationBudget(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		persisted = res.Migration
		if res.Converged {
			t.Fatal("converged before migrating")
		}
	}
	t.Logf("persisted after the first migrating pass: %+v", persisted.Moves)

	// A pass killed mid-way: its result is never persisted.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := f.reconcile(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Logf("the cut pass ended with %v", err)
	}
	f.spec.Migration = persisted

	cutOpen := len(openSlots(t, f))
	t.Logf("the cut pass left %d slot ends open", cutOpen)

	// And a slot of the last move left half-migrated, one key moved.
	mv := persisted.Moves[len(persisted.Moves)-1]
	addrOf := map[int]string{} // no replicas: a shard's only pod is its master
	for _, m := range f.spec.Members {
		addrOf[m.Shard] = m.Addr
	}
	fromC := goredis.NewClient(&goredis.Options{Addr: addrOf[mv.FromShard]})
	toC := goredis.NewClient(&goredis.Options{Addr: addrOf[mv.ToShard]})
	defer fromC.Close()
	defer toC.Close()
	bg := context.Background()
	slot := mv.Last
	for ; slot > mv.First; slot-- {
		if c, err := fromC.ClusterCountKeysInSlot(bg, slot).Result(); err == nil && c > 1 {
			break
		}
	}
	fromID, err1 := fromC.Do(bg, "CLUSTER", "MYID").Text()
	toID, err2 := toC.Do(bg, "CLUSTER", "MYID").Text()
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if err := toC.Do(bg, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := fromC.Do(bg, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err(); err != nil {
		t.Fatal(err)
	}
	keys, err := fromC.ClusterGetKeysInSlot(bg, slot, 10).Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys in slot %d: %v %v", slot, keys, err)
	}
	host, port, _ := strings.Cut(addrOf[mv.ToShard], ":")
	if err := fromC.Migrate(bg, host, port, keys[0], 0, time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if open := openSlots(t, f); len(open) <= cutOpen {
		t.Fatalf("slot %d is not open: %v", slot, open)
	}

	start := time.Now()
	res, actions := f.reconcileUntil(5*time.Minute, converged) // a bound, not a target: the took figure is logged
	t.Logf("resumed: converged after %v, %d keys migrated by the resuming passes", time.Since(start).Round(time.Millisecond), keysMoved(actions))
	if !hasAction(actions, fmt.Sprintf("finished slot %d left open", slot)) {
		t.Errorf("slot %d was not finished first: %v", slot, actions)
	}
	if open := openSlots(t, f); len(open) > 0 {
		t.Fatalf("slots left open: %v", open)
	}
	for pod, s := range slotsPerPrimary(res) {
		if s != 4096 {
			t.Errorf("%s serves %d slots, want 4096", pod, s)
		}
	}
	f.checkKeys("mig", n)
}

// TestKeyWrittenBeforeAnEmptySlotOpensMoves: a slot that held no key when
// the pass counted it gets one before src is told MIGRATING, as a client
// writing at that moment does. The key moves with the slot: the write the
// client was told succeeded is still there, on the slot's new owner.
func TestKeyWrittenBeforeAnEmptySlotOpensMoves(t *testing.T) {
	f := newFleet(t, 196, 3, 0)
	f.reconcileUntil(30*time.Second, converged)
	f.add(3, 0, 199)
	f.spec.Shards = 4

	// The dialer lets the first MIGRATING command through only after a
	// key of its slot was written on the node it goes to.
	setslot := regexp.MustCompile(`SETSLOT\r\n\$\d+\r\n(\d+)\r\n\$9\r\nMIGRATING\r\n`)
	var once sync.Once
	var written string
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &beforeWrite{Conn: c, hook: func(b []byte) {
			m := setslot.FindSubmatch(b)
			if m == nil {
				return
			}
			once.Do(func() {
				slot, _ := strconv.Atoi(string(m[1]))
				written = keyInSlot("late", slot)
				src := goredis.NewClient(&goredis.Options{Addr: addr})
				defer src.Close()
				if err := src.Set(context.Background(), written, "acknowledged", 0).Err(); err != nil {
					t.Errorf("SET %s on %s, which serves slot %d: %v", written, addr, slot, err)
				}
			})
		}}, nil
	}
	f.reconcileUntil(2*time.Minute, converged, rediscluster.WithDialer(dial))
	if written == "" {
		t.Fatal("the pass sent no SETSLOT MIGRATING")
	}
	c := f.client("")
	defer c.Close()
	got, err := c.Get(context.Background(), written).Result()
	if err != nil || got != "acknowledged" {
		t.Fatalf("GET %s (slot %d) after the slot moved: %q, %v; the write was lost", written, redisstore.Slot(written), got, err)
	}
}

// beforeWrite runs hook on each buffer before it is written.
type beforeWrite struct {
	net.Conn
	hook func([]byte)
}

func (c *beforeWrite) Write(b []byte) (int, error) {
	c.hook(b)
	return c.Conn.Write(b)
}

// keyInSlot is the first "<prefix>:<n>" that hashes to slot.
func keyInSlot(prefix string, slot int) string {
	for i := 0; ; i++ {
		if k := fmt.Sprintf("%s:%d", prefix, i); redisstore.Slot(k) == slot {
			return k
		}
	}
}
