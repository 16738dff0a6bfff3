package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// Every round trip has a deadline: a paused server costs the timeout, not more.
func TestDeadlineOnEveryCall(t *testing.T) {
	srv := redistest.Start(t)
	s := realStore(t, redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 50 * time.Millisecond})
	ctx := context.Background()
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second, Burst: 10}
	// The first decision may meet a cold connection on a busy machine.
	waitFor(t, settle, "a decision within the 50ms deadline", func() error {
		_, err := s.Take(ctx, store.Request{Key: storetest.KeyFor(t, "a"), Limit: lim, Cost: 1})
		return err
	})
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

// A decision over a counter and a new idempotency record in a slot being
// migrated gets TRYAGAIN from Redis (one key is there, the other is not);
// the store sends it again once the slot closes instead of failing it.
func TestTryAgainDuringSlotMigrationIsRetried(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	// The retry runs within the call's deadline: a generous one, so the
	// slot closes before it on a loaded machine.
	s := realStore(t, redisstore.Options{Addrs: c.Addrs(), Cluster: true, Timeout: settle})
	ctx := context.Background()
	// A day's period: the counter's TTL (the time to refill what was
	// taken, 15 minutes) outlives the test on a loaded machine.
	lim := algo.Limit{Algorithm: algo.GCRA, Limit: 100, Period: 24 * time.Hour, Burst: 100}
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
	direct := cc.Eval(ctx, "return redis.call('GET', KEYS[1]) or redis.call('GET', KEYS[2]) or 0", []string{s.RedisKey(key), s.RecordsKey(key)})
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

// While a slot's owner changes, the nodes can disagree for a moment: the
// source has handed the slot over (SETSLOT NODE) before the target has
// taken it, so each answers MOVED to the other. go-redis follows a few
// redirects and gives up with MOVED. The script never ran, so the store
// sends it again until the nodes agree, instead of failing the decision.
func TestRedirectLoopDuringSlotHandOverIsRetried(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	// The retry runs within the call's deadline: a generous one, so the
	// slot closes before it on a loaded machine.
	s := realStore(t, redisstore.Options{Addrs: c.Addrs(), Cluster: true, Timeout: settle})
	ctx := context.Background()
	// A day's period: the counter's TTL (the time to refill what was
	// taken, 15 minutes) outlives the test on a loaded machine.
	lim := algo.Limit{Algorithm: algo.GCRA, Limit: 100, Period: 24 * time.Hour, Burst: 100}
	key := storetest.KeyFor(t, "handed-over")
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
	host, port, _ := strings.Cut(dst.Addr, ":")
	for _, args := range [][]any{
		{dstC, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID},
		{srcC, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID},
		{srcC, "MIGRATE", host, port, "", 0, 5000, "KEYS", s.RedisKey(key)},
		{srcC, "CLUSTER", "SETSLOT", slot, "NODE", dstID},
	} {
		if err := args[0].(*goredis.Client).Do(ctx, args[1:]...).Err(); err != nil {
			t.Fatalf("%v: %v", args[1:], err)
		}
	}
	// Without the store's retry, this is what a limiter would get.
	direct := cc.Eval(ctx, "return redis.call('GET', KEYS[1]) or 0", []string{s.RedisKey(key)})
	if _, moved := goredis.IsMovedError(direct.Err()); !moved {
		t.Fatalf("a script over the handed-over slot got %v, want MOVED", direct.Err())
	}
	go func() {
		time.Sleep(250 * time.Millisecond) // the target takes the slot while the store waits
		for _, n := range c.Nodes {
			_ = n.Client(t).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err()
		}
	}()
	r, err := s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1})
	if err != nil || !r.Allowed || r.Remaining != 98 {
		t.Fatalf("take during the hand-over: %+v, %v", r, err)
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
	// A day's period: the counter's TTL outlives the test on a loaded machine.
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 100, Period: 24 * time.Hour, Burst: 100}
	key := storetest.KeyFor(t, "moving")
	// The first decisions may meet a cold connection on a busy machine; a
	// take that timed out may still have counted, so what is left is the
	// last answered take's.
	var last algo.Result
	waitFor(t, settle, "a decision within the 20ms deadline", func() error {
		r, err := s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1})
		last = r
		return err
	})
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
	// The first decision after the move follows MOVED within the 20ms
	// deadline; on a loaded machine an attempt may still miss it, so it is
	// awaited, and then must have counted on the moved counter (a fresh
	// counter would leave 99; an attempt that timed out may have counted).
	var r algo.Result
	waitFor(t, settle, "a decision after the slot moved", func() (err error) {
		r, err = s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1})
		return err
	})
	if !r.Allowed || r.Remaining > last.Remaining-1 {
		t.Fatalf("the first decision after the slot moved: %+v, want at most %d left (counted on the moved counter)", r, last.Remaining-1)
	}
}
