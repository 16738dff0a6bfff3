package server

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"time"
)

// AdminStatsPath gives each policy's decision counts since this process
// started: GET it for an AdminStats. The counts only grow while the process
// runs; BootID changes when it restarts, so that a reader (the operator's
// collector) can turn them into deltas without counting a restart as a
// reset or twice.
const AdminStatsPath = "/v1/admin/stats"

// AdminStats is the JSON body of AdminStatsPath.
type AdminStats struct {
	// BootID is random, chosen when the process started.
	BootID string `json:"bootID"`
	// StartedAt is when the process started counting (RFC 3339).
	StartedAt time.Time `json:"startedAt"`
	// Policies are the loaded snapshot's policies, sorted by namespace and
	// name. A policy's counts carry over new snapshots while its UID stays.
	Policies []AdminPolicyStats `json:"policies"`
}

// AdminPolicyStats are one policy's decision counts since StartedAt.
type AdminPolicyStats struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
	// Generation is the generation of the policy loaded now.
	Generation    int64 `json:"generation,omitempty"`
	Allowed       int64 `json:"allowed"`
	Limited       int64 `json:"limited"`
	ShadowLimited int64 `json:"shadowLimited"`
	FailedOpen    int64 `json:"failedOpen"`
	FailedClosed  int64 `json:"failedClosed"`
	LocalFallback int64 `json:"localFallback"`
	// NearLimit counts allowed decisions that left under 20% of the limit.
	NearLimit int64 `json:"nearLimit"`
	// Hottest are the policy's hottest descriptor values in the complete
	// interval that started at HottestSince, values hashed or truncated;
	// only when the limiter runs with --top-descriptors.
	Hottest      []AdminHotValue `json:"hottest,omitempty"`
	HottestSince *time.Time      `json:"hottestSince,omitempty"`
	// LocalTier is set for a policy in two-tier mode (spec.localTier).
	LocalTier *AdminLocalTier `json:"localTier,omitempty"`
}

// AdminLocalTier are a two-tier policy's figures on this pod.
type AdminLocalTier struct {
	// OvershootBound is the most units the fleet may admit above the
	// exact algorithm over any interval: 0 for window algorithms, else
	// maxOvershoot, or pods × the per-pod cap without it.
	OvershootBound int64 `json:"overshootBound"`
	// Pods is the most pods seen leasing one of the policy's keys lately.
	Pods int64 `json:"pods"`
	// Decisions by path: spent from a lease, one store call, the
	// over-limit cache, passed through exactly.
	Local         int64 `json:"local"`
	Leases        int64 `json:"leases"`
	CachedDenials int64 `json:"cachedDenials"`
	Exact         int64 `json:"exact"`
}

// AdminHotValue is one of a policy's hottest descriptor values. Requests
// and Limited are upper bounds, at most Error over the true counts.
type AdminHotValue struct {
	Value    string `json:"value"`
	Requests int64  `json:"requests"`
	Limited  int64  `json:"limited"`
	Error    int64  `json:"error,omitempty"`
}

// bootID is random per process.
func newBootID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// AdminStats returns what AdminStatsPath answers.
func (s *Server) AdminStats() AdminStats {
	ps := s.svc.PolicyStats()
	tiers := s.svc.LocalTierStats()
	out := AdminStats{BootID: s.bootID, StartedAt: s.startedAt, Policies: make([]AdminPolicyStats, len(ps))}
	for i, p := range ps {
		out.Policies[i] = AdminPolicyStats{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Generation: p.Generation,
			Allowed: p.Allowed, Limited: p.Limited, ShadowLimited: p.ShadowLimited,
			FailedOpen: p.FailedOpen, FailedClosed: p.FailedClosed, LocalFallback: p.LocalFallback, NearLimit: p.NearLimit}
		if !p.HottestSince.IsZero() {
			since := p.HottestSince
			out.Policies[i].HottestSince = &since
			out.Policies[i].Hottest = make([]AdminHotValue, len(p.Hottest))
			for j, h := range p.Hottest {
				out.Policies[i].Hottest[j] = AdminHotValue{Value: h.Value, Requests: h.Requests, Limited: h.Limited, Error: h.Error}
			}
		}
		if lt, ok := tiers[p.Namespace+"/"+p.Name]; ok {
			out.Policies[i].LocalTier = &AdminLocalTier{OvershootBound: lt.OvershootBound, Pods: lt.Pods,
				Local: lt.Local, Leases: lt.Leases, CachedDenials: lt.CachedDenials, Exact: lt.Exact}
		}
	}
	return out
}

func (s *Server) adminStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.AdminStats())
}
