package redis

import (
	"context"
	"fmt"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// PodsKey is the Redis key of the pods holding grants on counter k (two-tier
// mode): the counter's key, and so its slot, then ":p".
func (s *Store) PodsKey(k store.Key) string { return s.RedisKey(k) + ":p" }

// Grant implements store.Granter with one run of the grant script
// (scripts/grant.lua), batched and guarded by the shard's breaker like Take.
func (s *Store) Grant(ctx context.Context, req store.GrantRequest) (store.Grant, error) {
	if !slices.Contains(grantable, req.Limit.Algorithm) {
		return store.Grant{}, fmt.Errorf("redis store: %v can't be granted", req.Limit.Algorithm)
	}
	if !req.Limit.Grantable() {
		return store.Grant{}, fmt.Errorf("redis store: a limit with a calendar, a reserve or a penalty can't be granted")
	}
	c := &call{req: store.Request{Key: req.Key, Limit: req.Limit}, grantReq: &req}
	if err := s.decide(ctx, c); err != nil {
		return store.Grant{}, err
	}
	return c.grant, nil
}

// grantCmd queues one grant call on p.
func (s *Store) grantCmd(ctx context.Context, p goredis.Pipeliner, r *store.GrantRequest, eval bool) *goredis.Cmd {
	var now int64
	if s.opts.PinnedClock != nil {
		now = s.opts.PinnedClock().UnixMicro()
	}
	var argv [grantArgs]any
	argv[argLimit-1], argv[argPeriod-1], argv[argBurst-1], argv[argCost-1], argv[argNow-1] = r.Limit.Limit, r.Limit.PeriodMicros(), r.Limit.Burst, r.Cost, now
	argv[grantAlgorithm-1], argv[grantWant-1], argv[grantCredit-1], argv[grantCreditWindow-1] = int(r.Limit.Algorithm), max(0, r.Want), max(0, r.Credit), r.CreditWindow
	argv[grantPod-1], argv[grantBound-1], argv[grantPodCap-1] = r.Pod, r.Bound, max(0, r.PodCap)
	argv[grantTTL-1], argv[grantHorizon-1] = max(1, r.TTL.Microseconds()), max(0, r.Horizon.Microseconds())
	return p.Do(ctx, append(append(grantScript.call(eval, 2, 2+grantArgs), s.RedisKey(r.Key), s.PodsKey(r.Key)), argv[:]...)...)
}

// parseGrant reads grant.lua's reply {allowed, remaining, reset_us,
// retry_us, granted, lifetime_us, window, pods}.
func parseGrant(cmd *goredis.Cmd) (store.Grant, error) {
	var buf [8]int64
	v, err := int64s(buf[:0], cmd)
	if err != nil {
		return store.Grant{}, fmt.Errorf("redis store: %w", err)
	}
	if len(v) != 8 {
		return store.Grant{}, fmt.Errorf("redis store: grant script returned %d values, want 8", len(v))
	}
	l := store.Grant{
		Result: algo.Result{
			Allowed:    v[0] == 1,
			Remaining:  v[1],
			ResetAfter: time.Duration(v[2]) * time.Microsecond,
			RetryAfter: time.Duration(v[3]) * time.Microsecond,
		},
		Granted:  v[4],
		Lifetime: time.Duration(v[5]) * time.Microsecond,
		Window:   v[6],
		Pods:     v[7],
	}
	if v[3] < 0 {
		l.Result.RetryAfter = algo.Never
	}
	return l, nil
}

var _ store.Granter = (*Store)(nil)
