package app

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/service"
)

// Readiness checks of the failure handling. None fails once the limiter
// has started: a limiter whose store is down still answers, by each
// policy's failure mode, and taking it out of its Service would leave
// gateways with no answer at all. The details say what runs degraded.

// storeWarmup bounds how long a new limiter stays unready while its store
// warms up (storeCheck).
const storeWarmup = 10 * time.Second

// warmer is the store as storeCheck reads it: *redis.Store.
type warmer interface {
	Status(ctx context.Context) (string, bool)
	Warm() bool
}

// warmup is a new limiter's wait for its store: warming while the
// store is not ready to decide (redis.Store.Warm: a cluster's slot map
// loaded, and every primary holding a connection of the store's and its
// scripts), for at most d after start (Redis, or one primary, may be down:
// the failure modes decide then). While warming, /readyz fails (check) and
// gRPC health says NOT_SERVING (server.Options.Warming): on a rolling
// update, or when a stopped node's pods come back, the calls go to pods
// that can decide instead of to one that fails its first decisions while
// it finds Redis, dials it and loads its scripts within a decision's
// deadline. After that it never fails.
type warmup struct {
	rs     warmer
	start  time.Time
	d      time.Duration
	warmed atomic.Bool // the store was warm once: a failover's new primary warming does not count
}

func newWarmup(rs warmer, d time.Duration) *warmup {
	return &warmup{rs: rs, start: time.Now(), d: d}
}

// warming reports that the store has not been warm yet, within d: once
// warm, a new primary warming after a failover leaves the limiter ready.
func (w *warmup) warming() bool {
	if w.warmed.Load() || time.Since(w.start) >= w.d {
		return false
	}
	if w.rs.Warm() {
		w.warmed.Store(true)
		return false
	}
	return true
}

// check reports the Redis store: ping and breakers; not ready while
// warming.
func (w *warmup) check(ctx context.Context) (string, error) {
	detail, ok := w.rs.Status(ctx)
	if !ok {
		detail = "degraded, decisions follow each policy's failureMode: " + detail
	}
	if w.warming() {
		return "", fmt.Errorf("warming up: not ready until the store is warm (its shards known, each primary dialled, the scripts loaded there), at most %v after start: %s", w.d, detail)
	}
	return detail, nil
}

// storeCheck is the readiness check of a new warmup of rs.
func storeCheck(rs warmer, warmup time.Duration) server.ReadinessChecker {
	return newWarmup(rs, warmup).check
}

// degradedCheck lists the policies decided by their failure mode.
func degradedCheck(svc *service.Service) server.ReadinessChecker {
	return func(context.Context) (string, error) { return svc.DegradedDetail(), nil }
}

// enforcementCheck says whether the kill switch is on, and whose.
func enforcementCheck(svc *service.Service) server.ReadinessChecker {
	return func(context.Context) (string, error) { return svc.EnforcementDetail(), nil }
}
