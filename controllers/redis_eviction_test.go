package controllers_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/controllers/resources"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// TestAttackRedisEvictionSteeredByTTL: one tenant fills a Redis node
// with long-lived counters (a SlidingLog of an hour, through the limiters'
// own store) while another keeps using shorter-lived ones (a
// SlidingWindow of 10m, whose keys live 20 minutes; 30s was outlasted by a
// round on a loaded machine). Under volatile-ttl the node evicted the keys
// nearest to expiry first: the other tenant's, whatever the
// flood, so its counters restarted and its limits stopped holding. The
// node runs here with the maxmemory-policy the operator renders
// (RedisConfig): a key in use is not evicted ahead of the flood's, so
// the victim's counters keep counting. The flood comes in rounds; before
// each, the previous round's keys have aged past Redis's LRU clock tick
// (1s, waited for on INFO lru_clock) and the victim has used
// its counters.
func TestAttackRedisEvictionSteeredByTTL(t *testing.T) {
	ctx := context.Background()
	policy := ""
	for _, line := range strings.Split(resources.RedisConfig(betaOf(&v1alpha1.LimiterFleet{})), "\n") {
		if v, ok := strings.CutPrefix(line, "maxmemory-policy "); ok {
			policy = v
		}
	}
	if policy == "" {
		t.Fatal("RedisConfig renders no maxmemory-policy")
	}
	const maxMemory = 4 << 20
	srv := redistest.Start(t, "maxmemory "+strconv.Itoa(maxMemory), "maxmemory-policy "+policy)
	admin := srv.Client(t)
	s, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })

	key := func(who string, i int) store.Key {
		var b store.KeyBuilder
		b.Add(t.Name())
		b.Add(who)
		b.Add(strconv.Itoa(i))
		return b.Key()
	}
	victimLim := algo.Limit{Algorithm: algo.SlidingWindow, Limit: 1000, Period: 10 * time.Minute}
	const victims = 20
	used := 0 // units each victim counter has admitted
	useVictims := func(round int) {
		for i := range victims {
			r, err := s.Take(ctx, store.Request{Key: key("victim", i), Limit: victimLim, Cost: 1})
			if err != nil {
				t.Fatalf("round %d: victim %d: %v", round, i, err)
			}
			if want := victimLim.Limit - int64(used+1); !r.Allowed || r.Remaining != want {
				t.Fatalf("round %d: victim counter %d: %+v, want %d remaining: its counter was evicted and restarted (policy %s)",
					round, i, r, want, policy)
			}
		}
		used++
	}
	usedMemory := func() int64 {
		info, err := admin.Info(ctx, "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		t.Fatal("no used_memory in INFO memory")
		return 0
	}
	// The flood: SlidingLog counters of an hour, 2 requests each, from 16
	// clients at once; 500 keys at a time.
	floodLim := algo.Limit{Algorithm: algo.SlidingLog, Limit: 10_000, Period: time.Hour}
	flooded := 0
	floodKeys := func(n int) {
		var g errgroup.Group
		g.SetLimit(16)
		for i := flooded; i < flooded+n; i++ {
			g.Go(func() error {
				for range 2 {
					if _, err := s.Take(ctx, store.Request{Key: key("flood", i), Limit: floodLim, Cost: 1}); err != nil {
						return fmt.Errorf("flood key %d: %w", i, err)
					}
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		flooded += n
	}
	stat := func(section, name string) int64 {
		info, err := admin.Info(ctx, section).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		t.Fatalf("no %s in INFO %s", name, section)
		return 0
	}
	// Fill the node to 90% of maxmemory, then flood in rounds that each
	// make Redis evict a fifth of the keys it holds.
	for usedMemory() < maxMemory*9/10 {
		floodKeys(500)
	}
	lruClock := func() int64 {
		info, err := admin.Info(ctx, "server").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "lru_clock:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		t.Fatal("no lru_clock in INFO server")
		return 0
	}
	// aged waits until the keys written so far are idle 2s or more by the
	// LRU clock (seconds).
	aged := func() {
		start, deadline := lruClock(), time.Now().Add(60*time.Second)
		last := start
		for ; last < start+2; last = lruClock() {
			if time.Now().After(deadline) {
				t.Fatalf("Redis's lru_clock went from %d to %d in 60s, want +2", start, last)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	aged()
	useVictims(0)
	for round := 1; round <= 4; round++ {
		evicted, size := stat("stats", "evicted_keys"), admin.DBSize(ctx).Val()
		for stat("stats", "evicted_keys") < evicted+size/5 {
			floodKeys(500)
		}
		aged()
		useVictims(round)
	}
	evicted := stat("stats", "evicted_keys")
	if evicted < int64(flooded)/4 {
		t.Fatalf("%d of the flood's %d keys evicted: the flood never filled the node", evicted, flooded)
	}
	t.Logf("policy %s: %d flood keys, %d evicted, every victim counter kept (%d bytes used of %d)", policy, flooded, evicted, usedMemory(), maxMemory)
}
