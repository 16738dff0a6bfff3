package redisfleet

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/controllers/rediscluster"
)

// When the next pass comes: the engine's ask when it is sooner, even after
// an error, as when a Kubernetes node stopped with two masters on it and the
// engine watches the first one's promotion deadline.
func TestRequeueAfter(t *testing.T) {
	unreachable := errors.New("redis node f-redis-0-0: Unreachable")
	for _, tc := range []struct {
		name      string
		err       error
		asked     time.Duration
		converged bool
		want      time.Duration
	}{
		{"a node stopped, a promotion due", unreachable, 200 * time.Millisecond, false, 200 * time.Millisecond},
		{"no node answers", unreachable, 500 * time.Millisecond, false, 500 * time.Millisecond},
		{"a node stopped, nothing due", unreachable, 0, false, redisRequeueFailing},
		{"an error, a later ask", unreachable, time.Minute, false, redisRequeueFailing},
		{"converging, an ask", nil, 200 * time.Millisecond, false, 200 * time.Millisecond},
		{"converging", nil, 0, false, redisRequeueConverging},
		{"converged", nil, 0, true, redisResync},
	} {
		rs := &Scope{Err: tc.err, Result: rediscluster.Result{RequeueAfter: tc.asked, Converged: tc.converged}}
		if got := requeueAfter(rs); got != tc.want {
			t.Errorf("%s: requeue after %v, want %v", tc.name, got, tc.want)
		}
	}
}
