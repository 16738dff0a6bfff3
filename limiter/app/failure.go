package app

import (
	"context"

	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store/redis"
)

// Readiness checks of the failure handling. None fails: a limiter whose
// store is down still answers, by each policy's failure mode, and taking it
// out of its Service would leave gateways with no answer at all. The
// details say what runs degraded.

// storeCheck reports the Redis store: ping and breakers.
func storeCheck(rs *redis.Store) server.ReadinessChecker {
	return func(ctx context.Context) (string, error) {
		detail, ok := rs.Status(ctx)
		if !ok {
			detail = "degraded, decisions follow each policy's failureMode: " + detail
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
