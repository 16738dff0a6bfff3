package redis

import (
	"testing"
	"time"
)

func testStore(failures int, span time.Duration) *Store {
	return &Store{
		opts:    Options{Breaker: BreakerOptions{Failures: failures, Span: span, Cooldown: time.Hour}},
		metrics: newStoreMetrics(nil),
		log:     logger(nil),
		stop:    make(chan struct{}),
	}
}

// Failures open the breaker only once there are enough of them in a row
// and they span Span: a burst of timeouts from one stall does not.
func TestBreakerNeedsFailuresOverASpan(t *testing.T) {
	s := testStore(3, time.Hour)
	defer func() { close(s.stop); s.bg.Wait() }()
	b := newBreaker(s, "0-16383", "k")
	for range 100 {
		b.record(false)
	}
	if b.State() != BreakerClosed {
		t.Fatalf("100 failures within a moment opened the breaker (span 1h)")
	}

	s.opts.Breaker.Span = time.Nanosecond
	b.record(true) // a success resets the streak
	b.record(false)
	b.record(false)
	if b.State() != BreakerClosed {
		t.Fatalf("2 failures opened a breaker that needs 3")
	}
	b.record(true)
	b.record(false)
	b.record(false)
	if b.State() != BreakerClosed {
		t.Fatalf("a success did not reset the streak")
	}
	b.record(false)
	if b.State() != BreakerOpen {
		t.Fatalf("3 failures in a row over the span: state %v, want open", b.State())
	}
	b.record(true) // only probes close an open breaker
	if b.State() != BreakerOpen {
		t.Fatalf("a late success closed an open breaker")
	}
}
