package redis_test

import (
	"context"
	"fmt"
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

// aclNodes are the directives of a node whose only users are an admin for
// the test's own hands and "store", with ACLRules and nothing more.
func aclNodes(rules string) []string {
	return []string{
		"user default off resetpass -@all",
		"user admin on >admin-pw ~* &* +@all",
		"user store on >store-pw " + rules,
	}
}

// aclDenials reads a node's ACL LOG: every command or key the server
// refused since it started, as "reason object (username)".
func aclDenials(t *testing.T, s *redistest.Server) []string {
	t.Helper()
	v, err := s.Client(t).Do(context.Background(), "ACL", "LOG").Slice()
	if err != nil {
		t.Fatalf("ACL LOG on %s: %v", s.Addr, err)
	}
	var out []string
	for _, e := range v {
		f := map[string]any{}
		switch e := e.(type) {
		case map[any]any: // RESP3
			for k, v := range e {
				f[fmt.Sprint(k)] = v
			}
		case []any: // RESP2: field, value, ...
			for i := 0; i+1 < len(e); i += 2 {
				f[fmt.Sprint(e[i])] = e[i+1]
			}
		}
		out = append(out, fmt.Sprintf("%v %v (%v)", f["reason"], f["object"], f["username"]))
	}
	return out
}

// TestStoreRunsUnderItsACLUser: a store whose user has ACLRules and no
// more passes the conformance table, idempotency and the grant script on a
// standalone server and a cluster, and no server refused any of its
// commands or keys. A command the store or a script starts to send
// without its rule fails this test.
func TestStoreRunsUnderItsACLUser(t *testing.T) {
	rules := redisstore.ACLRules("")
	admin := func(s *redistest.Server) { s.Username, s.Password = "admin", "admin-pw" }

	single := redistest.Start(t, aclNodes(rules)...)
	admin(single)
	cluster := redistest.StartClusterWith(t, redistest.ClusterOptions{Primaries: 3, Extra: aclNodes(rules), Username: "admin", Password: "admin-pw"})

	for _, tc := range []struct {
		name    string
		opts    redisstore.Options
		servers []*redistest.Server
	}{
		{"standalone", redisstore.Options{Addrs: []string{single.Addr}}, []*redistest.Server{single}},
		{"cluster", redisstore.Options{Addrs: cluster.Addrs(), Cluster: true}, cluster.All()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := func(c store.Clock) redisstore.Options {
				o := tc.opts
				o.Username, o.Password, o.Timeout, o.PinnedClock = "store", "store-pw", 2*time.Second, c
				return o
			}
			newStore := func(t *testing.T, c store.Clock) store.Store {
				s, err := redisstore.New(opts(c))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
			t.Run("conformance", func(t *testing.T) { storetest.Run(t, newStore) })
			t.Run("idempotency", func(t *testing.T) { storetest.RunIdempotency(t, newStore) })
			t.Run("grant", func(t *testing.T) { storetest.Run(t, newExactGrant(opts)) })
			t.Run("holds", func(t *testing.T) {
				storetest.RunHolds(t, func(t *testing.T, c store.Clock) store.Holder { return newStore(t, c).(store.Holder) })
			})
			t.Run("time from Redis", func(t *testing.T) {
				s := newStore(t, nil)
				r, err := s.Take(context.Background(), store.Request{Key: storetest.KeyFor(t, "k"),
					Limit: algo.Limit{Algorithm: algo.TokenBucket, Limit: 5, Period: time.Second, Burst: 5}, Cost: 1})
				if err != nil || !r.Allowed || r.Remaining != 4 {
					t.Fatalf("take %+v, %v", r, err)
				}
				if err := s.(*redisstore.Store).Ping(context.Background()); err != nil {
					t.Fatalf("ping: %v", err)
				}
			})
			t.Run("breaker probe", func(t *testing.T) {
				o := opts(nil)
				o.Timeout, o.Breaker = 200*time.Millisecond, redisstore.BreakerOptions{Failures: 2, Span: time.Nanosecond, Cooldown: 50 * time.Millisecond}
				s, err := redisstore.New(o)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				probeAfterStall(t, s, tc.servers)
			})
			if tc.opts.Cluster {
				t.Run("slot in migration", func(t *testing.T) { takeDuringMigration(t, cluster, newStore(t, nil)) })
			}
			for _, s := range tc.servers {
				if d := aclDenials(t, s); len(d) > 0 {
					t.Errorf("%s refused the store: %s", s.Addr, strings.Join(d, "; "))
				}
			}
		})
	}

	// The user can run nothing else, on no other key.
	c := goredis.NewClient(&goredis.Options{Addr: single.Addr, Username: "store", Password: "store-pw", MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	for _, cmd := range [][]any{{"FLUSHALL"}, {"CONFIG", "GET", "*"}, {"KEYS", "*"}, {"SHUTDOWN"}, {"CLUSTER", "RESET"}, {"GET", "other:key"}} {
		if err := c.Do(ctx, cmd...).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Errorf("%v as the store's user: %v, want NOPERM", cmd, err)
		}
	}
}

// TestScriptCommandsSeesEveryCall: every redis.call and redis.pcall in the
// scripts names its command literally, so ACLCommands reads them all.
func TestScriptCommandsSeesEveryCall(t *testing.T) {
	src := "local x = redis.call('GET', KEYS[1])\nredis.pcall( 'ZADD', k, 1, 'a')\nreturn redis.call('TIME')"
	if got := strings.Join(redisstore.ScriptCommands(src), ","); got != "get,zadd,time" {
		t.Fatalf("ScriptCommands = %s", got)
	}
	cmds := strings.Join(redisstore.ACLCommands(), " ")
	for _, want := range []string{"evalsha", "eval", "ping", "cluster|slots", "time", "get", "set", "pexpire", "zadd"} {
		if !strings.Contains(" "+cmds+" ", " "+want+" ") {
			t.Errorf("ACLCommands %s lacks %s", cmds, want)
		}
	}
	for _, banned := range []string{"flushall", "flushdb", "config", "keys", "shutdown", "cluster|reset", "debug", "del"} {
		if strings.Contains(" "+cmds+" ", " "+banned+" ") {
			t.Errorf("ACLCommands allows %s", banned)
		}
	}
}

// takeDuringMigration takes from a new counter whose slot is MIGRATING from
// its shard to the next: the owner answers ASK, and the store's client
// follows it with ASKING on the importing node, as while the operator
// moves slots to new shards. The slot's migration is then finished.
func takeDuringMigration(t *testing.T, cluster *redistest.Cluster, s store.Store) {
	ctx := context.Background()
	key := storetest.KeyFor(t, "migrating")
	slot := int(redisstore.Slot(s.(*redisstore.Store).RedisKey(key)))
	from := cluster.ShardOf(slot)
	src, dst := cluster.Nodes[from].Client(t), cluster.Nodes[(from+1)%len(cluster.Nodes)].Client(t)
	srcID, err := src.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	dstID, err := dst.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		c    *goredis.Client
		args []any
	}{
		{dst, []any{"CLUSTER", "SETSLOT", slot, "IMPORTING", srcID}},
		{src, []any{"CLUSTER", "SETSLOT", slot, "MIGRATING", dstID}},
	} {
		if err := step.c.Do(ctx, step.args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.Take(ctx, store.Request{Key: key, Limit: algo.Limit{Algorithm: algo.TokenBucket, Limit: 5, Period: time.Second, Burst: 5}, Cost: 1})
	if err != nil || !r.Allowed {
		t.Errorf("take from a counter whose slot %d is migrating: %+v, %v", slot, r, err)
	}
	if n, err := dst.ClusterCountKeysInSlot(ctx, int(slot)).Result(); err != nil || n != 1 {
		t.Errorf("the importing node holds %d keys of slot %d (%v), want the new counter", n, slot, err)
	}
	for _, c := range []*goredis.Client{dst, src} {
		if err := c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// probeAfterStall stalls the servers (SIGSTOP) until a decision's breaker
// opens, resumes them, and waits for the breaker's probe to close it: the
// probe and the slot map reload run as the store's user too.
func probeAfterStall(t *testing.T, s *redisstore.Store, servers []*redistest.Server) {
	ctx := context.Background()
	key := storetest.KeyFor(t, "stalled")
	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 5, Period: time.Second, Burst: 5}
	if _, err := s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1}); err != nil {
		t.Fatal(err) // the slot map is loaded
	}
	open := func() bool {
		for _, b := range s.Breakers() {
			if b.State != redisstore.BreakerClosed {
				return true
			}
		}
		return false
	}
	for _, srv := range servers {
		srv.Pause(t)
	}
	for i := 0; !open(); i++ {
		if i == 20 {
			t.Fatal("no breaker opened with the servers stalled")
		}
		_, _ = s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1})
	}
	for _, srv := range servers {
		srv.Resume(t)
	}
	deadline := time.Now().Add(settle)
	for open() {
		if time.Now().After(deadline) {
			t.Fatalf("breakers %+v still open %v after the servers resumed", s.Breakers(), settle)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
