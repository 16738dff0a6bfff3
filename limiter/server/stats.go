package server

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"

	"github.com/sluice-dev/sluice/api/limiterwire"
)

// bootID is random per process.
func newBootID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// AdminStats returns what limiterwire.StatsPath answers.
func (s *Server) AdminStats() limiterwire.Stats {
	ps := s.svc.PolicyStats()
	tiers := s.svc.LocalTierStats()
	bounds := s.svc.RegionBounds()
	out := limiterwire.Stats{BootID: s.bootID, StartedAt: s.startedAt, Policies: make([]limiterwire.PolicyStats, len(ps))}
	for i, p := range ps {
		out.Policies[i] = limiterwire.PolicyStats{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Generation: p.Generation,
			Allowed: p.Allowed, Limited: p.Limited, ShadowLimited: p.ShadowLimited,
			FailedOpen: p.FailedOpen, FailedClosed: p.FailedClosed, LocalFallback: p.LocalFallback, NearLimit: p.NearLimit,
			SoftLimited: p.SoftLimited, Released: p.Released, NotHeld: p.NotHeld, Penalized: p.Penalized,
			Refused: p.Refused}
		if !p.HottestSince.IsZero() {
			since := p.HottestSince
			out.Policies[i].HottestSince = &since
			out.Policies[i].Hottest = make([]limiterwire.HotValue, len(p.Hottest))
			for j, h := range p.Hottest {
				out.Policies[i].Hottest[j] = limiterwire.HotValue{Value: h.Value, Requests: h.Requests, Limited: h.Limited, Error: h.Error}
			}
		}
		if lt, ok := tiers[p.Namespace+"/"+p.Name]; ok {
			out.Policies[i].LocalTier = &limiterwire.LocalTier{OvershootBound: lt.OvershootBound, Pods: lt.Pods,
				Local: lt.Local, Grants: lt.Grants, CachedDenials: lt.CachedDenials, Exact: lt.Exact}
		}
		if b, ok := bounds[p.Namespace+"/"+p.Name]; ok {
			out.Policies[i].Regions = &limiterwire.RegionsBound{Bound: b.Bound, ReachBound: b.ReachBound, Regions: b.Regions}
		}
	}
	return out
}

func (s *Server) adminStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.AdminStats())
}
