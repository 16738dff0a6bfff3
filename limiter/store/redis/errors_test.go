package redis_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// Failure classes, from errors that real servers and sockets produce: only
// "the shard can't answer" counts; answers that are errors do not.
func TestFailureClass(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	reply := func(msg string) error {
		return c.Eval(ctx, "return redis.error_reply(ARGV[1])", nil, msg).Err()
	}
	// A listener that accepts and never answers: a read times out.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
		}
	}()
	mute := goredis.NewClient(&goredis.Options{Addr: silent.Addr().String(), MaxRetries: -1, ReadTimeout: 50 * time.Millisecond})
	defer mute.Close()
	deadCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	refused := goredis.NewClient(&goredis.Options{Addr: redistest.FreeAddr(t, redistest.Host()), MaxRetries: -1})
	defer refused.Close()
	canceled, cancelNow := context.WithCancel(ctx)
	cancelNow()

	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"success", c.Ping(ctx).Err(), ""},
		{"nil reply", c.Get(ctx, "missing").Err(), ""},
		{"script error", c.Eval(ctx, "error('boom')", nil).Err(), ""},
		{"wrong type", func() error { c.Set(ctx, "s", "x", time.Minute); return c.LPush(ctx, "s", "y").Err() }(), ""},
		{"noscript", c.EvalSha(ctx, strings.Repeat("0", 40), nil).Err(), ""},
		{"caller canceled", c.Ping(canceled).Err(), ""},
		{"CLUSTERDOWN", reply("CLUSTERDOWN The cluster is down"), redisstore.ClassClusterDown},
		{"TRYAGAIN", reply("TRYAGAIN Multiple keys request during rehashing of slot"), redisstore.ClassTryAgain},
		{"MASTERDOWN", reply("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), redisstore.ClassMasterDown},
		{"LOADING", reply("LOADING Redis is loading the dataset in memory"), redisstore.ClassLoading},
		{"read timeout", mute.Ping(ctx).Err(), redisstore.ClassTimeout},
		{"context deadline", mute.Ping(deadCtx).Err(), redisstore.ClassTimeout},
		{"connection refused", refused.Ping(ctx).Err(), redisstore.ClassConnection},
	} {
		if got := redisstore.FailureClass(tc.err); got != tc.want {
			t.Errorf("%s (%v): class %q, want %q", tc.name, tc.err, got, tc.want)
		}
	}
}
