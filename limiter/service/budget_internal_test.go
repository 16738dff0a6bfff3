package service

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A store budget admits a second's worth at once, then rate per second,
// and refuses the rest, counting each refusal.
func TestStoreBudget(t *testing.T) {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
	b := newStoreBudget("ns", 100, c)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	taken := 0
	for range 150 {
		if b.take(now) {
			taken++
		}
	}
	if taken != 100 || b.refused.Load() != 50 {
		t.Fatalf("at once: %d taken, %d refused; want 100, 50", taken, b.refused.Load())
	}
	// 10 ms later: one more call (100 per second).
	now += int64(10 * time.Millisecond)
	if !b.take(now) || b.take(now) {
		t.Fatal("10ms later: want exactly one more call")
	}
	// A second idle refills the burst, no more.
	now += int64(time.Second)
	taken = 0
	for range 150 {
		if b.take(now) {
			taken++
		}
	}
	if taken != 100 {
		t.Fatalf("after a second idle: %d taken, want 100", taken)
	}
}
