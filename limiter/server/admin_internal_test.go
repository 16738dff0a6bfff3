package server

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

// Shutting down ends every long-poll, whether it began before or after.
func TestWaitForVersionEndsAtShutdown(t *testing.T) {
	st := memory.New(memory.Options{})
	defer st.Close()
	svc := service.New(st, service.Options{})
	s := &Server{svc: svc, loads: newLoads(nil)}

	done := make(chan bool, 1)
	go func() { done <- s.waitForVersion(context.Background(), "never", time.Hour) }()
	s.loads.stop()
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("waitForVersion: false, want true (answer the client)")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("waitForVersion still waiting after stop")
	}
	if !s.waitForVersion(context.Background(), "never", time.Hour) {
		t.Fatal("waitForVersion after stop: false")
	}

	// A client that leaves ends its wait too, with nothing to answer.
	s.loads = newLoads(nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s.waitForVersion(ctx, "never", time.Hour) {
		t.Fatal("waitForVersion with a cancelled context: true")
	}
}
