package redis

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store"
)

const gatherPolicy = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: users, namespace: default}
spec:
  domain: gather
  descriptors: [{key: user_id}]
  algorithm: FixedWindow
  rate: {limit: 1000000, period: 24h}
`

// sendCounter counts, by a go-redis hook on the store's client (for a
// cluster, the cluster client's, before it splits a pipeline by node),
// the store's round trips.
type sendCounter struct{ n atomic.Int64 }

func (h *sendCounter) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (h *sendCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (h *sendCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// serialStore hides that the store gathers: the service decides a
// request's descriptors one after another, as before issue 42.
type serialStore struct{ store.Store }

// A request of 3 descriptors on 3 counters is one round trip of the store
// when the service gathers its calls, where deciding them one after
// another (the store hidden behind serialStore) is 3; on a 3-primary
// cluster, with the counters on 3 shards, it is one pipeline per primary.
// Round trips are counted, not timed.
func TestRequestDescriptorsShareOneRoundTrip(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.Start(t)
		s, err := New(Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		checkGathered(t, s, nil)
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartClusterWith(t, redistest.ClusterOptions{Primaries: 3})
		s, err := New(Options{Addrs: c.Addrs(), Cluster: true, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		checkGathered(t, s, c)
	})
}

func checkGathered(t *testing.T, s *Store, c *redistest.Cluster) {
	snap, err := config.Parse("inline", []byte(gatherPolicy))
	if err != nil {
		t.Fatal(err)
	}
	users := gatherUsers(t, s, snap, c)
	sends := &sendCounter{}
	s.client.(interface{ AddHook(goredis.Hook) }).AddHook(sends)
	var nodes *pipelineCounter
	if c != nil {
		nodes = &pipelineCounter{}
		nodes.reset()
		if err := s.client.(*goredis.ClusterClient).ForEachMaster(context.Background(), func(_ context.Context, n *goredis.Client) error {
			_, port, _ := net.SplitHostPort(n.Options().Addr)
			n.AddHook(nodes.hook(port))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	req := &service.Request{Domain: "gather"}
	for _, u := range users {
		req.Descriptors = append(req.Descriptors, service.Descriptor{Entries: []compiled.Entry{{Key: "user_id", Value: u}}})
	}
	var last []int64 // each counter's remaining after the serial request
	for _, tc := range []struct {
		name string
		st   store.Store
		want int64
	}{{"serial", serialStore{s}, int64(len(users))}, {"gathered", s, 1}} {
		svc := service.New(tc.st, service.Options{})
		svc.Swap(snap)
		decide(t, svc, req) // caches the script (NOSCRIPT, then EVAL)
		sends.n.Store(0)
		if nodes != nil {
			nodes.reset()
		}
		resp := decide(t, svc, req)
		if got := sends.n.Load(); got != tc.want {
			t.Errorf("%s: a request of %d descriptors took %d round trips, want %d", tc.name, len(users), got, tc.want)
		}
		for i, d := range resp.Decisions {
			switch {
			case !d.Result.Allowed:
				t.Errorf("%s: descriptors[%d] %+v, want allowed", tc.name, i, d.Result)
			case last == nil:
			case d.Result.Remaining != last[i]-2: // the warm-up's unit and its own
				t.Errorf("%s: descriptors[%d] has %d units left, want %d", tc.name, i, d.Result.Remaining, last[i]-2)
			}
		}
		if last == nil {
			for _, d := range resp.Decisions {
				last = append(last, d.Result.Remaining)
			}
		}
		if len(resp.Decisions) != len(users) || resp.OverLimit {
			t.Errorf("%s: %d decisions, over limit %v; want %d allowed", tc.name, len(resp.Decisions), resp.OverLimit, len(users))
		}
		if nodes != nil && tc.want == 1 {
			nodes.mu.Lock()
			for port, n := range nodes.pipes {
				if n != 1 || nodes.cmds[port] != 1 {
					t.Errorf("gathered: primary %s got %d pipelines of %d commands, want 1 of 1 (all %v)", port, n, nodes.cmds[port], nodes.pipes)
				}
			}
			if len(nodes.pipes) != 3 {
				t.Errorf("gathered: pipelines went to %d primaries %v, want 3", len(nodes.pipes), nodes.pipes)
			}
			nodes.mu.Unlock()
		}
		t.Logf("%s: %d descriptors, %d round trips", tc.name, len(users), sends.n.Load())
	}
}

func decide(t *testing.T, svc *service.Service, req *service.Request) service.Response {
	t.Helper()
	resp, err := svc.Decide(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// gatherUsers are 3 users, each its own counter: on a cluster, one on
// each of its 3 shards.
func gatherUsers(t *testing.T, s *Store, snap *compiled.Snapshot, c *redistest.Cluster) []string {
	if c == nil {
		return []string{"ann", "bob", "cat"}
	}
	dom := snap.Domain("gather")
	users := make([]string, 3)
	found := 0
	for i := 0; found < 3 && i < 1000; i++ {
		u := fmt.Sprint("user-", i)
		entries := []compiled.Entry{{Key: "user_id", Value: u}}
		var kb store.KeyBuilder
		shard := c.ShardOf(Slot(s.RedisKey(dom.AppendMatches(nil, entries)[0].CounterKey(&kb, entries))))
		if users[shard] == "" {
			users[shard] = u
			found++
		}
	}
	if found < 3 {
		t.Fatalf("no user on every shard: %v", users)
	}
	return users
}
