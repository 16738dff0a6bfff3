package server

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/sluice-dev/sluice/api/limiterwire"
)

// topQuery is TopPath's query, checked.
type topQuery struct {
	n         int
	sort      string
	namespace string
}

// parseTopQuery reads TopPath's query: each parameter at most once, n
// within its bounds, sort one of the orders; nothing else.
func parseTopQuery(raw string) (topQuery, error) {
	q := topQuery{n: limiterwire.TopDefaultPolicies, sort: limiterwire.TopSortDecisions}
	values, err := url.ParseQuery(raw)
	if err != nil {
		return q, fmt.Errorf("invalid query: %v", err)
	}
	for param, vs := range values {
		if len(vs) > 1 {
			return q, fmt.Errorf("query parameter %q is given %d times: give it once", param, len(vs))
		}
		switch v := vs[0]; param {
		case "n":
			if q.n, err = strconv.Atoi(v); err != nil || q.n < 1 || q.n > limiterwire.TopMaxPolicies {
				return q, fmt.Errorf("n=%q: want a number of policies from 1 to %d", v, limiterwire.TopMaxPolicies)
			}
		case "sort":
			if v != limiterwire.TopSortDecisions && v != limiterwire.TopSortLimited {
				return q, fmt.Errorf("sort=%q: want %s or %s", v, limiterwire.TopSortDecisions, limiterwire.TopSortLimited)
			}
			q.sort = v
		case "namespace":
			if v == "" || len(v) > 63 {
				return q, fmt.Errorf("namespace=%q: want a namespace name", v)
			}
			q.namespace = v
		default:
			return q, fmt.Errorf("unknown query parameter %q: want n, sort or namespace", param)
		}
	}
	return q, nil
}

// adminTop answers limiterwire.TopPath: the loaded policies ranked by
// their decisions (or denials) since the process started, those the caller
// may see (Options.PolicyAccess, reviewed once per namespace, at most
// limiterwire.TopMaxNamespaceReviews namespaces a call), the first n.
func (s *Server) adminTop(w http.ResponseWriter, r *http.Request) {
	q, err := parseTopQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	stats := s.AdminStats()
	ranked := make([]limiterwire.TopPolicy, 0, len(stats.Policies))
	for _, p := range stats.Policies {
		if q.namespace != "" && p.Namespace != q.namespace {
			continue
		}
		ranked = append(ranked, limiterwire.TopPolicy{Namespace: p.Namespace, Name: p.Name,
			Decisions: p.Allowed + p.Limited + p.ShadowLimited + p.SoftLimited + p.FailedOpen + p.FailedClosed + p.Penalized + p.Refused,
			Allowed:   p.Allowed, Limited: p.Limited, ShadowLimited: p.ShadowLimited, SoftLimited: p.SoftLimited,
			FailedOpen: p.FailedOpen, FailedClosed: p.FailedClosed, Penalized: p.Penalized, Refused: p.Refused,
			Hottest: p.Hottest, HottestSince: p.HottestSince})
	}
	key := func(p limiterwire.TopPolicy) int64 {
		if q.sort == limiterwire.TopSortLimited {
			return p.Limited + p.Penalized
		}
		return p.Decisions
	}
	slices.SortStableFunc(ranked, func(a, b limiterwire.TopPolicy) int {
		return cmp.Or(cmp.Compare(key(b), key(a)), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	out := limiterwire.Top{StartedAt: stats.StartedAt, Sort: q.sort, Policies: []limiterwire.TopPolicy{}}
	if snap := s.svc.Snapshot(); snap != nil {
		out.SnapshotVersion = snap.Version
	}
	seen := map[string]bool{} // by namespace: may the caller see its policies?
	for _, p := range ranked {
		if len(out.Policies) == q.n {
			break
		}
		visible, known := seen[p.Namespace]
		if !known {
			if len(seen) == limiterwire.TopMaxNamespaceReviews {
				out.Incomplete = true
				break
			}
			visible = true // no PolicyAccess: a standalone limiter's open admin plane
			if s.opts.PolicyAccess != nil {
				if visible, err = s.opts.PolicyAccess(r, p.Namespace); err != nil {
					// Not naming the namespace: it may be one the caller may not know of.
					writeError(w, http.StatusServiceUnavailable, "could not review your access to the policies: "+err.Error())
					return
				}
			}
			seen[p.Namespace] = visible
		}
		if visible {
			out.Policies = append(out.Policies, p)
		}
	}
	writeJSON(w, http.StatusOK, out)
}
