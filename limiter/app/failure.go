package app

import (
	"context"
	"fmt"
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

// storeCheck reports the Redis store: ping and breakers. A new limiter is
// not ready until its store knows its shards (a cluster's slot map loaded:
// its nodes answered), or until warmup has passed (Redis may be down: the
// failure modes decide then): on a rolling update the old pods keep the
// calls until the new one can make decisions, instead of it failing its
// first ones while it finds and dials Redis. After that it never fails.
func storeCheck(rs warmer, warmup time.Duration) server.ReadinessChecker {
	start := time.Now()
	return func(ctx context.Context) (string, error) {
		detail, ok := rs.Status(ctx)
		if !ok {
			detail = "degraded, decisions follow each policy's failureMode: " + detail
		}
		if !rs.Warm() && time.Since(start) < warmup {
			return "", fmt.Errorf("warming up: not ready until the store knows its shards, at most %v after start: %s", warmup, detail)
		}
		return detail, nil
	}
}

// degradedCheck lists the policies decided by their failure mode.
func degradedCheck(svc *service.Service) server.ReadinessChecker {
	return func(context.Context) (string, error) { return svc.DegradedDetail(), nil }
}

// enforcementCheck says whether the kill switch is on, and whose.
func enforcementCheck(svc *service.Service) server.ReadinessChecker {
	return func(context.Context) (string, error) { return svc.EnforcementDetail(), nil }
}
