package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testwait"
	"github.com/sluice-dev/sluice/limiter/store/redis"
)

// openRedis opens the limiter's Redis store for url, closed at the end.
func openRedis(t *testing.T, url string) *redis.Store {
	t.Helper()
	st, _, _, err := openStore(Config{Store: url, RedisTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st.(*redis.Store)
}

// TestStoreCheckWaitsForTheStoreToWarmUp: a new limiter is not ready
// while its Redis Cluster store has not found its shards, within the
// warm-up; it is once it has, and from then on a store that stops
// answering leaves it ready (degraded: the failure modes decide). A store
// that never answers makes it ready after the warm-up.
func TestStoreCheckWaitsForTheStoreToWarmUp(t *testing.T) {
	ctx := context.Background()
	cluster := redistest.StartCluster(t, 3)
	rs := openRedis(t, "redis-cluster://"+strings.Join(cluster.Addrs(), ","))
	check := storeCheck(rs, time.Hour)
	deadline := testwait.New(time.Minute)
	for {
		detail, err := check(ctx)
		if err == nil {
			if !rs.Warm() || !strings.Contains(detail, "ping ok") {
				t.Fatalf("ready with the store warm %v: %s", rs.Warm(), detail)
			}
			break
		}
		if !strings.Contains(err.Error(), "warming up") || rs.Warm() {
			t.Fatalf("not ready with the store warm %v: %v", rs.Warm(), err)
		}
		if deadline.Passed(t.Logf) {
			t.Fatalf("not ready %v after start with every shard up; last: %v", deadline.Waited(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, s := range cluster.All() {
		s.Stop()
	}
	if detail, err := check(ctx); err != nil || !strings.Contains(detail, "degraded") {
		t.Errorf("once warm, with Redis gone: %q, %v; want ready, degraded", detail, err)
	}

	down := "redis-cluster://" + redistest.FreeAddr(t, redistest.Host()) // nothing listens
	if detail, err := storeCheck(openRedis(t, down), time.Hour)(ctx); err == nil || !strings.Contains(err.Error(), "warming up") {
		t.Errorf("a new limiter whose store does not answer, within the warm-up: %q, %v; want not ready, warming up", detail, err)
	}
	if detail, err := storeCheck(openRedis(t, down), 0)(ctx); err != nil || !strings.Contains(detail, "degraded") {
		t.Errorf("a limiter whose store never answered, after the warm-up: %q, %v; want ready, degraded", detail, err)
	}
	// A standalone server's store is warm once its server holds a
	// connection of the store's and its scripts; one that does not
	// answer never is.
	if openRedis(t, "redis://"+redistest.FreeAddr(t, redistest.Host())).Warm() {
		t.Error("a standalone store whose server does not answer is warm")
	}
	standalone := openRedis(t, "redis://"+redistest.Start(t).Addr)
	awaitCheck(t, "a standalone store warm", storeCheck(standalone, time.Hour), func(_ string, err error) bool { return err == nil && standalone.Warm() })
}

// TestWarmUpEndsWithAPrimaryDown: a new limiter whose cluster has one
// primary stopped (SIGSTOP: it takes connections and never answers) is
// not ready while it warms up, and ready, degraded, once its warm-up bound
// passed, though its store is still not warm: a dead primary never keeps
// a pod unready past the bound. Once the primary answers again, the store
// warms.
func TestWarmUpEndsWithAPrimaryDown(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	stopped := cluster.Nodes[1]
	stopped.Pause(t)
	t.Cleanup(func() { stopped.Resume(t) })
	rs := openRedis(t, "redis-cluster://"+strings.Join(cluster.Addrs(), ","))
	check := storeCheck(rs, 3*time.Second)
	if _, err := check(context.Background()); err == nil || !strings.Contains(err.Error(), "warming up") {
		t.Fatalf("at start, with a primary stopped: %v; want not ready, warming up", err)
	}
	awaitCheck(t, "ready after the warm-up bound", check, func(detail string, err error) bool { return err == nil })
	if rs.Warm() {
		t.Fatal("the store is warm with a primary stopped")
	}
	stopped.Resume(t)
	awaitCheck(t, "the store warm once the primary answers", check, func(string, error) bool { return rs.Warm() })
}

// awaitCheck polls check until done reports true of its answer, failing
// with the last answer.
func awaitCheck(t *testing.T, what string, check func(context.Context) (string, error), done func(string, error) bool) {
	t.Helper()
	deadline := testwait.New(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		detail, err := check(ctx)
		cancel()
		if done(detail, err) {
			return
		}
		if deadline.Passed(t.Logf) {
			t.Fatalf("%s: not within %v; last seen: %q, %v", what, deadline.Waited(), detail, err)
		}
		time.Sleep(50 * time.Millisecond) // polling the store under test
	}
}
