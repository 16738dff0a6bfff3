package redis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// TestClusterSeedNotJoined starts stores whose seeds name a cluster node and
// cluster-enabled nodes that have not joined (a seed pod replaced with an
// empty disk, or a node a scale-out is adding): it knows no slot. go-redis
// takes the first node's CLUSTER SLOTS, even an empty one, and then sends
// each command to a random node; the unjoined one answers CLUSTERDOWN Hash
// slot not served. No decision may fail: the store refuses a slot map that
// covers no slot and asks the next node.
func TestClusterSeedNotJoined(t *testing.T) {
	seeds := []string{clusterAddrs(t)[0]}
	for range 4 {
		seeds = append(seeds, redistest.Start(t, "cluster-enabled yes", "cluster-config-file nodes.conf").Addr)
	}
	lim := faultLimit
	// Each store asks its seeds in a random order: with 8 stores, an
	// unjoined node answers first for most of them, and go-redis's retries
	// (each to a random known node) meet an unjoined node again.
	for i := range 8 {
		s := realStore(t, redisstore.Options{Addrs: seeds, Cluster: true})
		// Ready first, as a limiter's /readyz gates its traffic: a seed's
		// DNS name may take the resolver seconds to refuse.
		waitFor(t, settle, "store ready", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return s.Ping(ctx)
		})
		var failed []string
		for k := range 200 {
			var b store.KeyBuilder
			b.Add(fmt.Sprintf("unjoined-%d-%d", i, k))
			if _, err := s.Take(context.Background(), store.Request{Key: b.Key(), Limit: lim, Cost: 1}); err != nil {
				failed = append(failed, err.Error())
			}
		}
		if len(failed) > 0 {
			t.Fatalf("store %d: %d of 200 decisions failed on a healthy cluster, first: %s", i, len(failed), failed[0])
		}
	}
}

// TestClusterSeedsPartlyGone: a limiter starting while its first seeds are
// gone (the fleet's ordinal-0 pods, drained or on a stopped node: their
// DNS names resolve to nothing, or nothing listens) takes the slot map from
// the seeds that answer (the replicas' names, which RedisSeeds lists
// after them), and no decision fails once it is ready.
func TestClusterSeedsPartlyGone(t *testing.T) {
	addrs := clusterAddrs(t)
	closed := redistest.FreeAddr(t, redistest.Host())
	seeds := []string{"f-redis-0-0.f-redis.ns.svc.invalid:6379", "f-redis-1-0.f-redis.ns.svc.invalid:6379", closed, addrs[len(addrs)-1]}
	for i := range 4 {
		s := realStore(t, redisstore.Options{Addrs: seeds, Cluster: true})
		// Ready first, as a limiter's /readyz gates its traffic: a seed's
		// DNS name may take the resolver seconds to refuse.
		waitFor(t, settle, "store ready", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return s.Ping(ctx)
		})
		var failed []string
		for k := range 100 {
			var b store.KeyBuilder
			b.Add(fmt.Sprintf("seeds-%d-%d", i, k))
			if _, err := s.Take(context.Background(), store.Request{Key: b.Key(), Limit: faultLimit, Cost: 1}); err != nil {
				failed = append(failed, err.Error())
			}
		}
		if len(failed) > 0 {
			t.Fatalf("store %d: %d of 100 decisions failed with one seed of %v answering, first: %s", i, len(failed), seeds, failed[0])
		}
	}
}

// The store's status asks what decisions reach: each shard's primary. A
// replica that does not answer (stalled, or its pod's address gone with
// the pod: connections hang) leaves it "ping ok", as every decision is
// still answered; a primary that is down fails it, naming the shard.
func TestStatusAsksEachShardsPrimary(t *testing.T) {
	c := redistest.StartClusterWith(t, redistest.ClusterOptions{Primaries: 3, Replicas: 1, NodeTimeout: time.Minute})
	s := realStore(t, redisstore.Options{Addrs: c.Addrs(), Cluster: true})
	status := func() (string, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return s.Status(ctx)
	}
	waitFor(t, settle, "status ok with a breaker per shard", func() error {
		if detail, ok := status(); !ok || len(s.Breakers()) != 3 {
			return fmt.Errorf("%s (%d breakers)", detail, len(s.Breakers()))
		}
		return nil
	})

	c.Replicas[1][0].Pause(t)
	t.Cleanup(func() { c.Replicas[1][0].Resume(t) })
	if detail, ok := status(); !ok || !strings.Contains(detail, "ping ok") {
		t.Errorf("with shard 1's replica stalled: status %q, ok %v; want ping ok: no decision reaches a replica", detail, ok)
	}
	c.Nodes[2].Stop()
	detail, ok := status()
	if ok || !strings.Contains(detail, "ping failed: shard "+c.RangeName(2)) {
		t.Errorf("with shard 2's primary down: status %q, ok %v; want a failed ping naming shard %s", detail, ok, c.RangeName(2))
	}
	if strings.Contains(detail, "shard "+c.RangeName(0)) || strings.Contains(detail, "shard "+c.RangeName(1)) {
		t.Errorf("status %q names a shard whose primary answers", detail)
	}
	c.Nodes[0].Stop()
	detail, _ = status()
	if !strings.Contains(detail, "ping failed: shard "+c.RangeName(0)+": ") || !strings.Contains(detail, "; shard "+c.RangeName(2)+": ") || strings.Contains(detail, "\n") {
		t.Errorf("with shards 0 and 2's primaries down: status %q; want both named, in shard order, on one line", detail)
	}
}
