package redis

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// pipelineCounter counts, by a go-redis hook on each primary's client, the
// pipelines (round trips) sent to that node and the commands in them, by
// the node's port.
type pipelineCounter struct {
	mu    sync.Mutex
	pipes map[string]int
	cmds  map[string]int
}

func (p *pipelineCounter) hook(addr string) goredis.Hook { return nodeHook{p: p, addr: addr} }

type nodeHook struct {
	p    *pipelineCounter
	addr string
}

func (h nodeHook) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (h nodeHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (h nodeHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if !runsScripts(cmds) {
			// The store's warm-up (SCRIPT LOAD after a map load) comes
			// whenever the map loop runs: a CI run counted one as a
			// second pipeline of the round trip.
			return next(ctx, cmds)
		}
		h.p.mu.Lock()
		h.p.pipes[h.addr]++
		h.p.cmds[h.addr] += len(cmds)
		h.p.mu.Unlock()
		return next(ctx, cmds)
	}
}

// runsScripts reports whether a pipeline runs scripts (EVALSHA or EVAL):
// a round trip's.
func runsScripts(cmds []goredis.Cmder) bool {
	for _, c := range cmds {
		if n := c.Name(); n == "evalsha" || n == "eval" {
			return true
		}
	}
	return false
}

func (p *pipelineCounter) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pipes, p.cmds = map[string]int{}, map[string]int{}
}

// evalshaCalls is cmdstat_evalsha's calls on node (INFO commandstats).
func evalshaCalls(t *testing.T, node *redistest.Server) int {
	t.Helper()
	info, err := node.Client(t).Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// A round trip whose decisions are spread over a 3-primary cluster's
// shards is one pipeline per shard (go-redis's cluster pipeline groups the
// script runs by node and sends each node's on its own goroutine): each
// primary gets exactly one pipeline holding the EVALSHAs of its keys, as
// the hook on its client and its own INFO commandstats both say.
func TestRoundTripIsOnePipelinePerShard(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	s, err := New(Options{Addrs: c.Addrs(), Cluster: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	cc := s.client.(*goredis.ClusterClient)
	counter := &pipelineCounter{}
	counter.reset()
	if err := cc.ForEachMaster(context.Background(), func(_ context.Context, n *goredis.Client) error {
		_, port, _ := net.SplitHostPort(n.Options().Addr) // a host name of the test net's
		n.AddHook(counter.hook(port))
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	lim := algo.Limit{Algorithm: algo.TokenBucket, Limit: 1000, Period: time.Second, Burst: 1000}
	const n = 30
	reqs := make([]store.Request, n)
	perShard := make([]int, len(c.Nodes))
	for i := range reqs {
		reqs[i] = store.Request{Key: storetest.KeyFor(t, fmt.Sprint("spread-", i)), Limit: lim, Cost: 1}
		perShard[c.ShardOf(Slot(s.RedisKey(reqs[i].Key)))]++
	}
	for i, k := range perShard {
		if k == 0 {
			t.Fatalf("no key of %d on shard %d (%v): pick other keys", n, i, perShard)
		}
	}
	// A first round trip caches the script on every primary (NOSCRIPT, then EVAL).
	if _, errs := runBatch(s, reqs); firstErr(errs) != nil {
		t.Fatalf("first round trip: %v", firstErr(errs))
	}
	counter.reset()
	before := make([]int, len(c.Nodes))
	for i, node := range c.Nodes {
		before[i] = evalshaCalls(t, node)
	}
	if _, errs := runBatch(s, reqs); firstErr(errs) != nil {
		t.Fatalf("round trip: %v", firstErr(errs))
	}
	counter.mu.Lock()
	defer counter.mu.Unlock()
	for i, node := range c.Nodes {
		addr := node.Addr
		_, port, _ := net.SplitHostPort(addr)
		if got := counter.pipes[port]; got != 1 {
			t.Errorf("shard %d (%s): %d pipelines in one round trip, want 1 (all pipelines %v)", i, addr, got, counter.pipes)
		}
		if got := counter.cmds[port]; got != perShard[i] {
			t.Errorf("shard %d (%s): %d commands in its pipeline, want its %d keys' EVALSHAs", i, addr, got, perShard[i])
		}
		if got := evalshaCalls(t, node) - before[i]; got != perShard[i] {
			t.Errorf("shard %d (%s): cmdstat_evalsha grew by %d, want %d", i, addr, got, perShard[i])
		}
	}
	t.Logf("%d decisions in one round trip: EVALSHAs per shard %v, pipelines per shard %v", n, perShard, counter.pipes)
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// A Take's script arguments cost no allocation: they go into the call's
// own array, and the script's SHA-1 is boxed once, when the package loads
// (in cluster mode each decision is its own EVALSHA, so this was two
// allocations a decision). Counted, not timed.
func TestTakeArgsDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations are not counted under -race")
	}
	s, err := New(Options{Addrs: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	c := &call{req: store.Request{Key: storetest.KeyFor(t, "args"), Cost: 1,
		Limit: algo.Limit{Algorithm: algo.GCRA, Limit: 10, Period: time.Second, Burst: 10, CountDenied: true}}}
	s.prepare(c)
	var args []any
	for _, eval := range []bool{false, true} {
		if allocs := testing.AllocsPerRun(100, func() { args = takeArgs(eval, c) }); allocs != 0 {
			t.Errorf("takeArgs(eval %v): %.1f allocations, want 0", eval, allocs)
		}
		if want := 3 + c.nkeys + c.nargs(); len(args) != want || args[2] != c.nkeys {
			t.Errorf("takeArgs(eval %v): %d arguments %v, want %d with numkeys %d", eval, len(args), args[:3], want, c.nkeys)
		}
	}
	if args[0] != "eval" || args[1] != scripts[algo.GCRA].src {
		t.Errorf("takeArgs(eval): %v, want eval and the script's source", args[:2])
	}
}
