package redis_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// Issue 43: a new limiter decides its first calls as fast as its
// thousandth. Once the store says it is warm, its first decisions dial no
// connection and meet no NOSCRIPT: each primary already holds a pooled
// connection of the store's and every script it sends. Redis's own
// counters tell (INFO stats, commandstats, errorstats), read through a
// connection the test opened before its baseline.

// nodeCounters are a server's counters the warm-up spares.
type nodeCounters struct {
	conns, evals, noscripts int64
}

func (n nodeCounters) String() string {
	return fmt.Sprintf("%d connections received, %d EVAL, %d NOSCRIPT", n.conns, n.evals, n.noscripts)
}

// counters reads a server's counters through c.
func counters(t *testing.T, c *goredis.Client) nodeCounters {
	t.Helper()
	info, err := c.Info(context.Background(), "stats", "commandstats", "errorstats").Result()
	if err != nil {
		t.Fatalf("INFO on %s: %v", c.Options().Addr, err)
	}
	var n nodeCounters
	for line := range strings.SplitSeq(info, "\r\n") {
		switch {
		case strings.HasPrefix(line, "total_connections_received:"):
			n.conns, _ = strconv.ParseInt(strings.TrimPrefix(line, "total_connections_received:"), 10, 64)
		case strings.HasPrefix(line, "cmdstat_eval:"):
			n.evals = statCount(line, "calls=")
		case strings.HasPrefix(line, "errorstat_NOSCRIPT:"):
			n.noscripts = statCount(line, "count=")
		}
	}
	return n
}

// statCount is the number after name in an INFO line of fields.
func statCount(line, name string) int64 {
	_, after, _ := strings.Cut(line, name)
	v, _, _ := strings.Cut(after, ",")
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// missingScripts lists the store's scripts c's server has not cached, or
// the error of asking.
func missingScripts(c *goredis.Client) error {
	shas := redisstore.SentScripts()
	have, err := c.ScriptExists(context.Background(), shas...).Result()
	if err != nil {
		return err
	}
	var missing []string
	for i, ok := range have {
		if !ok {
			missing = append(missing, shas[i][:8])
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s lacks %d of %d scripts: %v", c.Options().Addr, len(missing), len(shas), missing)
	}
	return nil
}

// awaitWarm waits until s says it is warm.
func awaitWarm(t *testing.T, s *redisstore.Store) {
	t.Helper()
	waitFor(t, settle, "the store warm", func() error {
		if !s.Warm() {
			return fmt.Errorf("not warm; primaries %v", redisstore.Primaries(s))
		}
		return nil
	})
}

// decideCold takes every key once, one at a time, and fails the test if
// any server's counters moved from before: a dial or a NOSCRIPT.
func decideCold(t *testing.T, s *redisstore.Store, keys []store.Key, servers []*redistest.Server) {
	t.Helper()
	clients := make([]*goredis.Client, len(servers))
	before := make([]nodeCounters, len(servers))
	for i, srv := range servers {
		clients[i] = srv.Client(t)
		before[i] = counters(t, clients[i])
	}
	for _, k := range keys {
		if _, err, _ := take(s, k); err != nil {
			t.Fatalf("a decision of the warm store: %v", err)
		}
	}
	for i, srv := range servers {
		after := counters(t, clients[i])
		// The test's own INFO connection was dialled before the baseline.
		if after != before[i] {
			t.Errorf("%s: the first decisions of a warm store moved its counters: before %v, after %v; want no dial, no EVAL, no NOSCRIPT",
				srv.Addr, before[i], after)
		} else {
			t.Logf("%s: %v, unchanged by %d decisions", srv.Addr, after, len(keys))
		}
	}
}

// TestWarmStandaloneStoreDecidesWithoutDialOrNoscript: a new standalone
// store is warm once its server holds its scripts; its first decisions
// then dial nothing and send no EVAL.
func TestWarmStandaloneStoreDecidesWithoutDialOrNoscript(t *testing.T) {
	srv := redistest.Start(t)
	s := realStore(t, redisstore.Options{Addrs: []string{srv.Addr}})
	awaitWarm(t, s)
	if err := missingScripts(srv.Client(t)); err != nil {
		t.Fatal(err)
	}
	var keys []store.Key
	for i := range 20 {
		keys = append(keys, storetest.KeyFor(t, fmt.Sprintf("warm standalone %d", i)))
	}
	decideCold(t, s, keys, []*redistest.Server{srv})
}

// TestWarmTLSStoreDecidesWithoutDialOrNoscript: over TLS with a password,
// the warm-up's connection is the one that paid the handshake and AUTH:
// the first decisions of a warm store dial nothing.
func TestWarmTLSStoreDecidesWithoutDialOrNoscript(t *testing.T) {
	const pw = "warm-s3cret"
	srv := redistest.StartTLS(t, "requirepass "+pw)
	srv.Password = pw // the helpers' clients, on the plain port
	ca, err := os.ReadFile(srv.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		t.Fatal("no CA certificate in " + srv.CAFile)
	}
	s := realStore(t, redisstore.Options{Addrs: []string{srv.TLSAddr}, Password: pw,
		TLS: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}})
	awaitWarm(t, s)
	if err := missingScripts(srv.Client(t)); err != nil {
		t.Fatal(err)
	}
	var keys []store.Key
	for i := range 20 {
		keys = append(keys, storetest.KeyFor(t, fmt.Sprintf("warm tls %d", i)))
	}
	decideCold(t, s, keys, []*redistest.Server{srv.Server})
}

// TestWarmClusterStoreDecidesWithoutDialOrNoscript: a new cluster store
// is warm once every primary of its map holds a connection of its and its
// scripts; its first decisions, on every shard, then dial nothing and send
// no EVAL.
func TestWarmClusterStoreDecidesWithoutDialOrNoscript(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	s := realStore(t, redisstore.Options{Addrs: c.Addrs(), Cluster: true})
	awaitWarm(t, s)
	if got := redisstore.Primaries(s); len(got) != 3 {
		t.Fatalf("the store warmed %v, want the 3 primaries", got)
	}
	for _, n := range c.Nodes {
		if err := missingScripts(n.Client(t)); err != nil {
			t.Fatal(err)
		}
	}
	decideCold(t, s, allKeys(t, s, c, 8), c.Nodes)
}

// TestFailoverWarmsTheNewPrimary: after a CLUSTER FAILOVER, the store
// warms the promoted replica as soon as its map names it, before any
// decision is routed there: the shard's first decisions on it dial
// nothing and meet no NOSCRIPT (script caches are not replicated).
func TestFailoverWarmsTheNewPrimary(t *testing.T) {
	c := redistest.StartClusterWith(t, redistest.ClusterOptions{Primaries: 3, Replicas: 1, NodeTimeout: 5 * time.Second})
	s := realStore(t, redisstore.WithMapRefresh(redisstore.Options{Addrs: c.Addrs(), Cluster: true}, 200*time.Millisecond))
	awaitWarm(t, s)
	old, heir := c.Nodes[0], c.Replicas[0][0]
	heirClient := heir.Client(t)
	t.Logf("before the failover, the replica %s: %v", heir.Addr, missingScripts(heirClient))
	if _, err := heir.Do("CLUSTER", "FAILOVER"); err != nil {
		t.Fatalf("CLUSTER FAILOVER on %s: %v", heir.Addr, err)
	}
	c.WaitFailover(t, 0, old, settle)
	waitFor(t, settle, "the store warm with "+heir.Addr+" among its primaries", func() error {
		if ps := redisstore.Primaries(s); !slices.Contains(ps, heir.Addr) {
			return fmt.Errorf("primaries %v", ps)
		}
		if !s.Warm() {
			return fmt.Errorf("not warm; primaries %v", redisstore.Primaries(s))
		}
		return missingScripts(heirClient)
	})
	decideCold(t, s, keysOn(t, s, c, 0, 8), []*redistest.Server{heir})
}

// TestWarmUpDialsNoDeadPrimary: a store started while a primary does not
// answer (SIGSTOP, behind a proxy that counts the connections made to it)
// fails that primary's warm-up; once its breaker is open and the slot map
// loads know the node dead, no warm-up dials it again, through 20 more
// loads (every 100ms while the breaker is open). The store is not warm,
// and the other primaries are.
func TestWarmUpDialsNoDeadPrimary(t *testing.T) {
	c := redistest.StartClusterWith(t, redistest.ClusterOptions{Primaries: 3, Proxied: []int{0}})
	p, old := c.Proxies[0], c.Nodes[0]
	old.Pause(t)
	t.Cleanup(func() { old.Resume(t) })
	s, reg, _ := failoverStore(t, c.Addrs())
	victim := keysOn(t, s, c, 0, 1)[0]
	waitFor(t, settle, "shard 0's breaker open", func() error {
		_, err, _ := take(s, victim)
		return unavailable(err)
	})
	base := loads(t, reg, "open")
	waitFor(t, settle, "the stopped primary's warm-up failed, then 20 slot map loads", func() error {
		if !redisstore.WarmFailed(s, p.Addr) {
			return fmt.Errorf("%s's warm-up not failed yet; primaries %v", p.Addr, redisstore.Primaries(s))
		}
		if got := loads(t, reg, "open"); got < base+20 {
			return fmt.Errorf("%v loads", got-base)
		}
		return nil
	})
	known := p.Accepted()
	base = loads(t, reg, "open")
	waitFor(t, settle, "20 more slot map loads", func() error {
		if got := loads(t, reg, "open"); got < base+20 {
			return fmt.Errorf("%v loads", got-base)
		}
		return nil
	})
	if n := p.Accepted(); n != known {
		t.Errorf("the stopped primary was dialled %d times more during 20 slot map loads after its warm-up failed and it was known dead", n-known)
	}
	if s.Warm() {
		t.Error("the store is warm with a primary stopped")
	}
	for _, n := range c.Nodes[1:] {
		if err := missingScripts(n.Client(t)); err != nil {
			t.Errorf("a primary that answers: %v", err)
		}
	}
	t.Logf("dials of the stopped primary: %d until known dead, none after", known)
}
