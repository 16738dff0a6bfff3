package server_test

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/memory"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// storeKind makes one kind of store whose time is clock.
type storeKind struct {
	name string
	new  func(t *testing.T, clock store.Clock) store.Store
}

// storeKinds starts a redis-server and a 3-primary Redis Cluster for t, and
// returns the three kinds of store: the embedded memory store, Redis and
// Redis Cluster.
func storeKinds(t *testing.T) []storeKind {
	t.Helper()
	standalone := redistest.Start(t)
	cluster := redistest.StartCluster(t, 3)
	redis := func(opts redisstore.Options) func(t *testing.T, clock store.Clock) store.Store {
		return func(t *testing.T, clock store.Clock) store.Store {
			opts.PinnedClock, opts.Timeout = clock, 2*time.Second
			st, err := redisstore.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st
		}
	}
	return []storeKind{
		{"memory", func(t *testing.T, clock store.Clock) store.Store {
			m := memory.New(memory.Options{Clock: clock, SweepInterval: -1})
			t.Cleanup(func() { _ = m.Close() })
			return m
		}},
		{"redis", redis(redisstore.Options{Addrs: []string{standalone.Addr}})},
		{"redis-cluster", redis(redisstore.Options{Addrs: cluster.Addrs(), Cluster: true})},
	}
}
