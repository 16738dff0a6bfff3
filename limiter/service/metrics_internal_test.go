package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/limiter/store"
)

// Each store error is counted under its cause; the sentinels are matched
// through wrapping, and a call left unsent (which also wraps
// context.DeadlineExceeded) is queued, not a timeout.
func TestStoreErrorCause(t *testing.T) {
	// A real network timeout: a read from a connection nobody writes to.
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	_ = a.SetReadDeadline(time.Now().Add(time.Millisecond))
	_, netTimeout := a.Read(make([]byte, 1))
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("shard 0-5460: %w", store.ErrUnavailable), CauseUnavailable},
		{fmt.Errorf("redis store: not sent: %w (%w)", store.ErrQueueTimeout, context.DeadlineExceeded), CauseQueued},
		{fmt.Errorf("evalsha: %w", context.DeadlineExceeded), CauseTimeout},
		{netTimeout, CauseTimeout},
		{context.Canceled, CauseCanceled},
		{errors.New("dial tcp 127.0.0.1:6379: connect: connection refused"), CauseError},
		{errors.New("ERR Error running script"), CauseError},
	} {
		if got := storeErrorCauses[causeOf(tc.err)]; got != tc.want {
			t.Errorf("%v: cause %q, want %q", tc.err, got, tc.want)
		}
	}
}
