package service

import "github.com/sluice-dev/sluice/limiter/algo"

// checkCapacity refuses, before any store call, a request with a
// descriptor whose cost exceeds the capacity of an enforcing policy it
// matches: the burst of a TokenBucket or GCRA, the limit of a window. No
// such request can ever be allowed; answering it with InvalidArgument
// names the policy instead of a denial that never ends, and spends no
// store work on it. A cost up to the domain's least capacity (the common
// case: 1) is passed without matching. Shadow policies, and every policy
// while enforcement is off, never deny, so they refuse nothing.
func (s *Service) checkCapacity(l *loaded, req *Request) error {
	d := l.snap.Domain(req.Domain)
	if d == nil {
		return nil
	}
	for i := range req.Descriptors {
		desc := &req.Descriptors[i]
		cost := descriptorCost(req, desc)
		if cost <= d.MinCapacity() || !s.enforcing(l) {
			continue
		}
		for _, p := range d.AppendMatches(nil, desc.Entries) {
			if p.Shadow || cost <= p.Limit.Burst {
				continue
			}
			what := "rate.limit"
			if p.Limit.Algorithm.UsesBurst() {
				what = "burst"
			}
			if p.Limit.Algorithm == algo.SlidingLog {
				what = "rate.limit: a SlidingLog logs one entry per unit"
			}
			return invalidf("descriptors[%d]: cost %d exceeds the capacity %d of policy %s (its %s): it could never be allowed",
				i, cost, p.Limit.Burst, p.ID(), what)
		}
	}
	return nil
}
