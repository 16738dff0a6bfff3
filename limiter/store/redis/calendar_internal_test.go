package redis

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// The limiter computes calendar windows (algo.Calendar.Window) at its own
// time and sends the window and the next one; Redis time picks. A limiter
// whose clock is still in yesterday while Redis has passed midnight counts
// in today's window, and resets when today ends.
func TestCalendarWindowFollowsRedisTime(t *testing.T) {
	srv := redistest.Start(t)
	clock := storetest.NewClock()
	s := newInternal(t, srv.Addr, clock.Now)
	paris, err := algo.LoadTimeZone("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	lim := algo.Limit{Algorithm: algo.FixedWindow, Limit: 2, Burst: 2, Calendar: algo.Calendar{Period: algo.Day, Location: paris}}
	key := storetest.KeyFor(t, "day")
	take := func(limiter, redis time.Time) algo.Result {
		t.Helper()
		clock.Set(limiter)
		c := newCall(s, context.Background(), store.Request{Key: key, Limit: lim, Cost: 1})
		c.argv[4] = redis.UnixMicro() // the script's now
		s.send([]*call{c})
		if c.err != nil {
			t.Fatal(c.err)
		}
		return c.res
	}
	// Midnight in Paris on Sunday March 29, 2026 is 23:00 UTC on the 28th;
	// that day lasts 23 hours.
	midnight := time.Date(2026, 3, 28, 23, 0, 0, 0, time.UTC)
	if r := take(midnight.Add(-time.Second), midnight.Add(-time.Second)); !r.Allowed || r.Remaining != 1 || r.ResetAfter != time.Second {
		t.Fatalf("yesterday: %+v", r)
	}
	// The limiter is a second behind Redis, which is past midnight.
	if r := take(midnight.Add(-time.Second), midnight.Add(2*time.Second)); !r.Allowed || r.Remaining != 1 || r.ResetAfter != 23*time.Hour-2*time.Second {
		t.Fatalf("today by Redis time, yesterday by the limiter's: %+v, want a fresh day of 23 hours", r)
	}
	if r := take(midnight.Add(time.Minute), midnight.Add(time.Minute)); !r.Allowed || r.Remaining != 0 || r.ResetAfter != 23*time.Hour-time.Minute {
		t.Fatalf("today: %+v, want the same window as the call before", r)
	}
	// Two-tier mode never grants a calendar window (the API refuses it).
	if _, err := s.Grant(context.Background(), store.GrantRequest{Key: key, Limit: lim, Cost: 1, Pod: "p", Bound: -1, PodCap: 10, TTL: time.Second}); err == nil {
		t.Fatal("a calendar window was granted")
	}
}
