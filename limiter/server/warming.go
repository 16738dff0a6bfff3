package server

import (
	"context"
	"time"
)

// Warming: gRPC health says SERVING only when the limiter can decide: a
// snapshot is loaded and Options.Warming (its store finding its shards)
// has reported false once. A client that balances calls over the pods by
// their gRPC health (a gateway's round_robin with health checks, as
// docs/guides/envoy.md sets it up) may reach a pod that is not in its
// Service's endpoints yet: its address known from before, a restarted
// node's pod on a reused IP. Its /readyz keeps it out of the Service; its
// gRPC health must keep such clients away too, or they get its first
// decisions, which the failure modes decide while the store is not warm.

// warmPoll is how often Run asks Options.Warming until it reports false.
const warmPoll = 50 * time.Millisecond

// updateServing sets gRPC health from what the server knows now. Updates
// are serialized, so that a stale one cannot overwrite a later one; once
// shutting down, health ignores them.
func (s *Server) updateServing() {
	s.servingMu.Lock()
	defer s.servingMu.Unlock()
	setServing(s.health, s.svc.Snapshot() != nil && s.warm)
}

// awaitWarm asks Options.Warming every warmPoll until it reports false,
// then lets gRPC health say SERVING; it returns early when ctx ends.
func (s *Server) awaitWarm(ctx context.Context) {
	start := time.Now()
	t := time.NewTicker(warmPoll)
	defer t.Stop()
	for s.opts.Warming() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	s.servingMu.Lock()
	s.warm = true
	s.servingMu.Unlock()
	s.updateServing()
	s.log.Info("Warm-up over: gRPC health follows the snapshot now", "after", time.Since(start).Round(time.Millisecond))
}
