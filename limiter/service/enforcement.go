package service

import (
	"time"

	"github.com/sluice-dev/sluice/limiter/compiled"
)

// Shadow policies and the kill switch: both decide and count as usual, and
// never deny. A shadow policy is invisible to clients (no status, no
// headers); its would-be denials are counted as shadow_limited and logged
// at most once per shadowLogEvery. The kill switch (this pod's, or the
// fleet's in the snapshot) makes every policy a shadow policy.

// SetEnforcement is this pod's kill switch (--enforcement). With it off, or
// with the loaded snapshot's Enforcement Disabled (the fleet's switch),
// every request is allowed: decisions are still made and counted, and
// would-be denials are counted as shadow_limited. It takes effect for the
// next request, without a restart.
func (s *Service) SetEnforcement(enabled bool) {
	s.enforce.Store(enabled)
	s.updateEnforcementGauge()
}

// Enforcing reports whether denials are enforced: this pod's switch is on
// and the loaded snapshot does not disable enforcement.
func (s *Service) Enforcing() bool { return s.enforcing(s.loaded.Load()) }

func (s *Service) enforcing(l *loaded) bool {
	return s.enforce.Load() && (l.snap == nil || l.snap.Enforcement != compiled.EnforcementDisabled)
}

// EnforcementDetail says whether enforcement is on and, when off, which
// switch turned it off.
func (s *Service) EnforcementDetail() string {
	l := s.loaded.Load()
	switch {
	case !s.enforce.Load():
		return "disabled on this pod (--enforcement=disabled): every request allowed, would-be denials counted as shadow_limited"
	case l.snap != nil && l.snap.Enforcement == compiled.EnforcementDisabled:
		return "disabled by the snapshot (the fleet's kill switch): every request allowed, would-be denials counted as shadow_limited"
	}
	return "enabled"
}

func (s *Service) updateEnforcementGauge() {
	v := 0.0
	if s.Enforcing() {
		v = 1
	}
	s.metrics.enforcement.Set(v)
}

// logShadow logs a shadow policy's would-be denial, at most once per
// shadowLogEvery for each policy.
func (s *Service) logShadow(ps *policyState, p *compiled.Policy, domain string) {
	now := time.Now().UnixNano()
	last := ps.lastShadowLog.Load()
	if now-last < int64(shadowLogEvery) || !ps.lastShadowLog.CompareAndSwap(last, now) {
		return
	}
	s.log.Info("Shadow policy would deny", "policy", p.ID(), "domain", domain)
}
