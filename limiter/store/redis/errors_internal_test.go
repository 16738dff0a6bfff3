package redis

import (
	"context"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
)

// The predicates the round trip acts on read real replies: NOSCRIPT (sent
// again with EVAL), TRYAGAIN (sent again later), MOVED and ASK (counted as
// redirects); no other reply passes for one of them.
func TestReplyPredicates(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	reply := func(msg string) error {
		return c.Eval(ctx, "return redis.error_reply(ARGV[1])", nil, msg).Err()
	}
	noScript := c.EvalSha(ctx, strings.Repeat("0", 40), nil).Err()
	tryAgain := reply("TRYAGAIN Multiple keys request during rehashing of slot")
	moved := reply("MOVED 3999 127.0.0.1:6381")
	ask := reply("ASK 3999 127.0.0.1:6381")
	scriptErr := c.Eval(ctx, "error('MOVED along')", nil).Err()
	for _, tc := range []struct {
		name                         string
		err                          error
		noScript, tryAgain, redirect bool
	}{
		{"NOSCRIPT", noScript, true, false, false},
		{"TRYAGAIN", tryAgain, false, true, false},
		{"MOVED", moved, false, false, true},
		{"ASK", ask, false, false, true},
		{"script error", scriptErr, false, false, false},
		{"success", c.Ping(ctx).Err(), false, false, false},
	} {
		if got := isNoScript(tc.err); got != tc.noScript {
			t.Errorf("%s (%v): isNoScript %v, want %v", tc.name, tc.err, got, tc.noScript)
		}
		if got := goredis.IsTryAgainError(tc.err); got != tc.tryAgain {
			t.Errorf("%s (%v): TRYAGAIN %v, want %v", tc.name, tc.err, got, tc.tryAgain)
		}
		if got := isRedirect(tc.err); got != tc.redirect {
			t.Errorf("%s (%v): isRedirect %v, want %v", tc.name, tc.err, got, tc.redirect)
		}
	}
}
