package redis_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/memory"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
	"github.com/sluice-dev/sluice/limiter/store/redis/redistest"
	"github.com/sluice-dev/sluice/limiter/store/storetest"
)

// Tests run against real redis-server processes, never a fake: one
// standalone server and one 3-primary cluster shared by this package.
var (
	standaloneOnce sync.Once
	standalone     *redistest.Server
	clusterOnce    sync.Once
	cluster        *redistest.Cluster
)

func standaloneAddr(t testing.TB) string {
	standaloneOnce.Do(func() { standalone = redistest.Start(redistest.Shared(t)) })
	if standalone == nil {
		t.Fatal("standalone redis did not start")
	}
	return standalone.Addr
}

func clusterAddrs(t *testing.T) []string {
	clusterOnce.Do(func() { cluster = redistest.StartCluster(redistest.Shared(t), 3) })
	if cluster == nil {
		t.Fatal("redis cluster did not start")
	}
	return cluster.Addrs()
}

func TestMain(m *testing.M) {
	code := m.Run()
	servers := []*redistest.Server{standalone}
	if cluster != nil {
		servers = append(servers, cluster.Nodes...)
	}
	for _, s := range servers {
		if s != nil {
			s.Stop()
			_ = os.RemoveAll(s.Dir)
		}
	}
	os.Exit(code)
}

func newStandalone(t *testing.T, clock store.Clock) store.Store {
	s, err := redisstore.New(redisstore.Options{Addrs: []string{standaloneAddr(t)}, PinnedClock: clock, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newCluster(t *testing.T, clock store.Clock) store.Store {
	s, err := redisstore.New(redisstore.Options{Addrs: clusterAddrs(t), Cluster: true, PinnedClock: clock, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newMemory(t *testing.T, clock store.Clock) store.Store {
	s := memory.New(memory.Options{Clock: clock, SweepInterval: -1})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformanceStandalone(t *testing.T) { storetest.Run(t, newStandalone) }

func TestConformanceCluster(t *testing.T) { storetest.Run(t, newCluster) }

func TestIdempotencyStandalone(t *testing.T) { storetest.RunIdempotency(t, newStandalone) }

func TestIdempotencyCluster(t *testing.T) { storetest.RunIdempotency(t, newCluster) }

func TestMemoryAndStandaloneAgree(t *testing.T) {
	storetest.RunDifferential(t, newMemory, newStandalone, 400)
}

func TestMemoryAndClusterAgree(t *testing.T) {
	storetest.RunDifferential(t, newMemory, newCluster, 150)
}

// realStore uses Redis TIME, as in production.
func realStore(t *testing.T, opts redisstore.Options) *redisstore.Store {
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Second
	}
	s, err := redisstore.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Every key a script writes has a TTL, with time from Redis TIME.
func TestEveryKeyHasTTL(t *testing.T) {
	s := realStore(t, redisstore.Options{Addrs: []string{standaloneAddr(t)}, KeyPrefix: "ttltest"})
	c := goredis.NewClient(&goredis.Options{Addr: standaloneAddr(t)})
	defer c.Close()
	ctx := context.Background()
	for _, a := range algo.All {
		lim := algo.Limit{Algorithm: a, Limit: 5, Period: time.Minute, Burst: 5}
		key := storetest.KeyFor(t, a.String())
		for range 3 {
			if r, err := s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1}); err != nil || !r.Allowed {
				t.Fatalf("%v: %+v %v", a, r, err)
			}
		}
	}
	keys, err := c.Keys(ctx, "ttltest:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != len(algo.All) {
		t.Fatalf("want one key per algorithm, got %v", keys)
	}
	for _, k := range keys {
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 || ttl > 2*time.Minute {
			t.Errorf("key %s has TTL %v, want within (0, 2m]", k, ttl)
		}
	}
}

// The real clock: a fixed window admits exactly its limit, then denies
// with a retry inside the window.
func TestRedisTimeDrivesDecisions(t *testing.T) {
	s := realStore(t, redisstore.Options{Addrs: []string{standaloneAddr(t)}})
	lim := algo.Limit{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Hour}
	key := storetest.KeyFor(t, "fw")
	for i := range 4 {
		r, err := s.Take(context.Background(), store.Request{Key: key, Limit: lim, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed != (i < 3) {
			t.Fatalf("take %d: allowed=%v", i, r.Allowed)
		}
		if r.ResetAfter <= 0 || r.ResetAfter > time.Hour {
			t.Fatalf("take %d: reset %v outside (0, 1h]", i, r.ResetAfter)
		}
	}
}

// A caller who puts hash tags in descriptor values cannot choose the slot:
// values only reach Redis hashed.
func TestKeysCannotBeSteeredToASlot(t *testing.T) {
	s := realStore(t, redisstore.Options{Addrs: clusterAddrs(t), Cluster: true})
	slots := map[int64]bool{}
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: clusterAddrs(t)})
	defer c.Close()
	for i := range 64 {
		var b store.KeyBuilder
		b.Add("policy")
		b.Add(fmt.Sprintf("{victim}%d", i)) // an attacker's value
		k := s.RedisKey(b.Key())
		if strings.Contains(k, "victim") || strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
			t.Fatalf("key %q leaks the value or has extra braces", k)
		}
		slot, err := c.ClusterKeySlot(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
	}
	if len(slots) < 50 {
		t.Fatalf("64 values sharing a {victim} tag landed in only %d slots", len(slots))
	}
}

// NOSCRIPT falls back to EVAL: flushing the script cache mid-run loses nothing.
func TestNoScriptFallback(t *testing.T) {
	s := realStore(t, redisstore.Options{Addrs: []string{standaloneAddr(t)}})
	c := goredis.NewClient(&goredis.Options{Addr: standaloneAddr(t)})
	defer c.Close()
	ctx := context.Background()
	lim := algo.Limit{Algorithm: algo.GCRA, Limit: 10, Period: time.Minute, Burst: 10}
	key := storetest.KeyFor(t, "noscript")
	for i := range 10 {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		r, err := s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1})
		if err != nil {
			t.Fatalf("take %d after SCRIPT FLUSH: %v", i, err)
		}
		if !r.Allowed || r.Remaining != int64(9-i) {
			t.Fatalf("take %d: %+v", i, r)
		}
	}
}

// Every round trip has a deadline: a paused server costs the timeout, not more.
func TestDeadlineOnEveryCall(t *testing.T) {
	srv := redistest.Start(t)
	s := realStore(t, redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 50 * time.Millisecond})
	ctx := context.Background()
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second, Burst: 10}
	if _, err := s.Take(ctx, store.Request{Key: storetest.KeyFor(t, "a"), Limit: lim, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t) // a stalled node: the connection stays open, nothing answers
	defer srv.Resume(t)
	start := time.Now()
	_, err := s.Take(ctx, store.Request{Key: storetest.KeyFor(t, "b"), Limit: lim, Cost: 1})
	if err == nil {
		t.Fatal("a take against a sleeping server succeeded")
	}
	if d := time.Since(start); d > 800*time.Millisecond {
		t.Fatalf("take waited %v on a sleeping server; the deadline is 50ms", d)
	}
}

// Concurrent decisions on one key from many goroutines admit exactly the
// limit, whatever way they are batched.
func TestBatchedConcurrentTakesAreExact(t *testing.T) {
	for name, opts := range map[string]redisstore.Options{
		"standalone": {Addrs: []string{standaloneAddr(t)}},
		"cluster":    {Addrs: clusterAddrs(t), Cluster: true},
	} {
		t.Run(name, func(t *testing.T) {
			s := realStore(t, opts)
			for _, a := range algo.All {
				lim := algo.Limit{Algorithm: a, Limit: 300, Period: time.Hour, Burst: 300}
				key := storetest.KeyFor(t, a.String())
				var wg sync.WaitGroup
				var mu sync.Mutex
				allowed := 0
				for range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 40 {
							r, err := s.Take(context.Background(), store.Request{Key: key, Limit: lim, Cost: 1})
							if err != nil {
								t.Error(err)
								return
							}
							if r.Allowed {
								mu.Lock()
								allowed++
								mu.Unlock()
							}
						}
					}()
				}
				wg.Wait()
				if allowed != 300 {
					t.Errorf("%v: 640 takes admitted %d, want exactly 300", a, allowed)
				}
			}
		})
	}
}

// Callers that give up while waiting (their context ends), some of them
// handed the next round trip, strand nobody: later calls are decided, and
// Close returns.
func TestAbandonedCallersStrandNobody(t *testing.T) {
	srv := redistest.Start(t)
	s, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 300 * time.Millisecond, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 1000, Period: time.Second, Burst: 1000}
	key := storetest.KeyFor(t, "k")
	srv.Pause(t) // the round trip in flight stalls; the others queue
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Some give up at once, others about when the stalled round
			// trip times out and hands its slot on.
			wait := time.Duration(1+i%8) * time.Millisecond
			if i%2 == 1 {
				wait = time.Duration(280+i) * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			_, _ = s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1})
		}()
	}
	wg.Wait()
	srv.Resume(t)
	waitFor(t, 10*time.Second, "a decision after the callers gave up", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1})
		return err == nil
	})
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10s: a round trip slot was stranded")
	}
	if _, err := s.Take(context.Background(), store.Request{Key: key, Limit: lim, Cost: 1}); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("take after Close: %v, want an error saying the store is closed", err)
	}
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in      string
		addrs   []string
		cluster bool
		tls     bool
		err     string
	}{
		{in: "rediss://cache.example.com:6380", addrs: []string{"cache.example.com:6380"}, tls: true},
		{in: "rediss-cluster://a:1,b:2", addrs: []string{"a:1", "b:2"}, cluster: true, tls: true},
		{in: "redis://127.0.0.1:6379", addrs: []string{"127.0.0.1:6379"}},
		{in: "redis://u:p%40ss@127.0.0.1:6379/2", addrs: []string{"127.0.0.1:6379"}},
		{in: "redis-cluster://a:1,b:2,c:3", addrs: []string{"a:1", "b:2", "c:3"}, cluster: true},
		{in: "127.0.0.1:6379", err: "want redis://"},
		{in: "redis+tls://x:1", err: `unknown scheme "redis+tls", want redis, rediss, redis-cluster or rediss-cluster`},
		{in: "redis://host", err: "has no port"},
		{in: "redis://a:1,b:2", err: "use redis-cluster://"},
		{in: "redis://a:1/x", err: "bad database"},
		{in: "redis-cluster://", err: "no address"},
	} {
		o, err := redisstore.ParseURL(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(o.Addrs) != fmt.Sprint(tc.addrs) || o.Cluster != tc.cluster || (o.TLS != nil) != tc.tls {
			t.Errorf("%s: got %+v %v", tc.in, o, err)
		}
	}
	if o, _ := redisstore.ParseURL("redis://u:p%40ss@h:1/2"); o.Username != "u" || o.Password != "p@ss" || o.DB != 2 {
		t.Errorf("credentials not parsed: %+v", o)
	}
}

// A decision over a counter and a new idempotency record in a slot being
// migrated gets TRYAGAIN from Redis (one key is there, the other is not);
// the store sends it again once the slot closes instead of failing it.
func TestTryAgainDuringSlotMigrationIsRetried(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	s := realStore(t, redisstore.Options{Addrs: c.Addrs(), Cluster: true})
	ctx := context.Background()
	lim := algo.Limit{Algorithm: algo.GCRA, Limit: 100, Period: time.Minute, Burst: 100}
	key := storetest.KeyFor(t, "migrating")
	if _, err := s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs()})
	defer cc.Close()
	slot, err := cc.ClusterKeySlot(ctx, s.RedisKey(key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	src := c.Nodes[c.ShardOf(int(slot))]
	dst := c.Nodes[(c.ShardOf(int(slot))+1)%3]
	srcC, dstC := src.Client(t), dst.Client(t)
	srcID, _ := srcC.Do(ctx, "CLUSTER", "MYID").Text()
	dstID, _ := dstC.Do(ctx, "CLUSTER", "MYID").Text()
	for _, cmd := range [][]any{{dstC, "IMPORTING", srcID}, {srcC, "MIGRATING", dstID}} {
		if err := cmd[0].(*goredis.Client).Do(ctx, "CLUSTER", "SETSLOT", slot, cmd[1], cmd[2]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var idem store.KeyBuilder
	idem.Add("request-1")
	req := store.Request{Key: key, Limit: lim, Cost: 1, Idempotency: idem.Key()}
	// Without the store's retry, this is what a limiter would get.
	direct := cc.Eval(ctx, "return redis.call('GET', KEYS[1]) or redis.call('GET', KEYS[2]) or 0", []string{s.RedisKey(key), s.RecordKey(key, idem.Key())})
	if err := direct.Err(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
		t.Fatalf("a script over both keys of the migrating slot got %v, want TRYAGAIN", err)
	}
	go func() {
		time.Sleep(250 * time.Millisecond) // the migration closes while the store waits
		_ = srcC.Do(ctx, "CLUSTER", "SETSLOT", slot, "STABLE").Err()
		_ = dstC.Do(ctx, "CLUSTER", "SETSLOT", slot, "STABLE").Err()
	}()
	r, err := s.Take(ctx, req)
	if err != nil || !r.Allowed || r.Remaining != 98 {
		t.Fatalf("take during the migration: %+v, %v", r, err)
	}
}

// A slot that moved to another node is followed at once, within the
// production deadline (20ms): the store's map still routes the key to the
// old node, which answers MOVED; the new node has never seen the script
// (NOSCRIPT, then EVAL, routed stale again). go-redis's default backoff
// between redirects (10 to 30ms) used to outlast the deadline, so every
// limiter answered by failureMode right after each slot moved in a
// scale-out.
func TestMovedSlotIsFollowedWithinTheDeadline(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	s := realStore(t, redisstore.Options{Addrs: c.Addrs(), Cluster: true, Timeout: 20 * time.Millisecond})
	ctx := context.Background()
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 100, Period: time.Minute, Burst: 100}
	key := storetest.KeyFor(t, "moving")
	eventuallyTake := func() {
		// The first decisions may meet a cold connection on a busy machine.
		for i := 0; ; i++ {
			if _, err := s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1}); err == nil {
				return
			} else if i == 50 {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	eventuallyTake()
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs()})
	defer cc.Close()
	slot, err := cc.ClusterKeySlot(ctx, s.RedisKey(key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	src := c.Nodes[c.ShardOf(int(slot))]
	dst := c.Nodes[(c.ShardOf(int(slot))+1)%3]
	srcC, dstC := src.Client(t), dst.Client(t)
	srcID, _ := srcC.Do(ctx, "CLUSTER", "MYID").Text()
	dstID, _ := dstC.Do(ctx, "CLUSTER", "MYID").Text()
	host, port, _ := strings.Cut(dst.Addr, ":")
	for _, step := range []struct {
		c    *goredis.Client
		args []any
	}{
		{dstC, []any{"CLUSTER", "SETSLOT", slot, "IMPORTING", srcID}},
		{srcC, []any{"CLUSTER", "SETSLOT", slot, "MIGRATING", dstID}},
		{srcC, []any{"MIGRATE", host, port, "", 0, 5000, "KEYS", s.RedisKey(key)}},
		{dstC, []any{"CLUSTER", "SETSLOT", slot, "NODE", dstID}},
		{srcC, []any{"CLUSTER", "SETSLOT", slot, "NODE", dstID}},
		{c.Nodes[(c.ShardOf(int(slot))+2)%3].Client(t), []any{"CLUSTER", "SETSLOT", slot, "NODE", dstID}},
	} {
		if err := step.c.Do(ctx, step.args...).Err(); err != nil {
			t.Fatalf("%v: %v", step.args, err)
		}
	}
	if n, _ := dstC.Exists(ctx, s.RedisKey(key)).Result(); n != 1 {
		t.Fatal("the counter did not move")
	}
	r, err := s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1})
	if err != nil || !r.Allowed || r.Remaining != 98 {
		t.Fatalf("the first decision after the slot moved: %+v, %v", r, err)
	}
}
