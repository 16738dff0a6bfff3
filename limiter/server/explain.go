package server

import (
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/limiter/service"
)

// adminExplain answers limiterwire.ExplainPath: every policy the request
// matches, peeked at cost 0 (nothing is spent), each in full when the
// caller may see its namespace's policies (Options.PolicyAccess), else
// redacted to what a client of the request is told: an enforcing policy's
// denial and wait, and nothing of a shadow or soft one.
func (s *Server) adminExplain(w http.ResponseWriter, r *http.Request) {
	domain, entries, err := parseStatusQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	explained, err := s.svc.Explain(r.Context(), domain, entries)
	if err != nil {
		writeError(w, httpStatus(err), err.Error())
		return
	}
	out := limiterwire.Explanation{Domain: domain, Policies: make([]limiterwire.ExplainedPolicy, 0, len(explained))}
	if snap := s.svc.Snapshot(); snap != nil {
		out.SnapshotVersion = snap.Version
	}
	seen := map[string]bool{} // by namespace: may the caller see its policies?
	for _, e := range explained {
		p := e.Policy
		visible, known := seen[p.Namespace]
		if !known && s.opts.PolicyAccess != nil {
			if visible, err = s.opts.PolicyAccess(r, p.Namespace); err != nil {
				writeError(w, http.StatusServiceUnavailable, "could not review access to the policies of namespace "+p.Namespace+": "+err.Error())
				return
			}
			seen[p.Namespace] = visible
		} else if !known {
			visible = true // no PolicyAccess: a standalone limiter's open admin plane
		}
		if !visible && !p.Enforcing() {
			continue // a shadow or soft policy: a client is never told of it
		}
		out.Policies = append(out.Policies, explainPolicy(e, visible))
	}
	writeJSON(w, http.StatusOK, out)
}

// explainPolicy is e as the caller may see it: in full, or, redacted,
// only whether the (enforcing) policy would deny and for how long.
func explainPolicy(e service.Explained, visible bool) limiterwire.ExplainedPolicy {
	p, r := e.Policy, e.Result
	var retry int64
	if e.WouldDeny() {
		retry = ceilSecs(r.ResetAfter)
	}
	if !visible {
		return limiterwire.ExplainedPolicy{Redacted: true, WouldDeny: e.WouldDeny(), RetryAfterSeconds: retry}
	}
	return limiterwire.ExplainedPolicy{
		Namespace: p.Namespace, Name: p.Name,
		Algorithm: p.Limit.Algorithm.String(), Limit: p.Limit.Limit, PeriodSeconds: ceilSecs(p.Limit.Span(time.Now())), Burst: p.Limit.Capacity(),
		Remaining: r.Remaining, ResetSeconds: ceilSecs(r.ResetAfter), WouldDeny: e.WouldDeny(), RetryAfterSeconds: retry,
		Penalized: r.Penalized, Shadow: p.Shadow, Soft: p.Soft, Hidden: p.Hidden,
		FailureMode: string(p.FailureMode), Reason: e.Reason, Holds: p.Holds(),
	}
}

// ceilSecs is d in whole seconds, rounded up; 0 for less.
func ceilSecs(d time.Duration) int64 {
	return int64((max(0, d) + time.Second - 1) / time.Second)
}
