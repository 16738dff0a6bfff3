package server

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/service"
)

// StatusPath is the status peek: GET it with the query
// domain=D&key=value&key2=value2. Every query parameter but domain is a
// descriptor entry; entry.KEY=value names the entry KEY too, for keys such
// as "domain" itself that can't be given plainly.
const StatusPath = "/v1/ratelimit/status"

// entryParamPrefix marks a query parameter as a descriptor entry whatever
// its key.
const entryParamPrefix = "entry."

// StatusResponse is the JSON body of a status peek.
type StatusResponse struct {
	Domain string `json:"domain"`
	// Policies are the matching policies, in the snapshot's order; empty,
	// never null, when none matches or the domain is unknown.
	Policies []service.PolicyStatus `json:"policies"`
}

// status answers GET /v1/ratelimit/status with every matching policy's
// limit, remaining quota, reset and algorithm, consuming nothing.
func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	domain, entries, err := parseStatusQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	policies, err := s.svc.Peek(r.Context(), domain, entries)
	if err != nil {
		writeError(w, httpStatus(err), err.Error())
		return
	}
	writeJSON(w, http.StatusOK, StatusResponse{Domain: domain, Policies: policies})
}

// parseStatusQuery reads the domain and the descriptor entries, sorted by
// key, from a status query. Each is given once.
func parseStatusQuery(raw string) (string, []compiled.Entry, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return "", nil, fmt.Errorf("invalid query: %v", err)
	}
	domains := q["domain"]
	switch {
	case len(domains) == 0 || domains[0] == "":
		return "", nil, fmt.Errorf("the domain query parameter is required, as in %s?domain=payments-api&user_id=alice", StatusPath)
	case len(domains) > 1:
		return "", nil, fmt.Errorf("%d domain query parameters: give one (a descriptor key named domain is given as %sdomain=VALUE)", len(domains), entryParamPrefix)
	}
	seen := map[string]string{}
	var entries []compiled.Entry
	for param, values := range q {
		if param == "domain" {
			continue
		}
		key := strings.TrimPrefix(param, entryParamPrefix)
		switch {
		case key == "":
			return "", nil, fmt.Errorf("query parameter %q has an empty descriptor key", param)
		case len(values) > 1:
			return "", nil, fmt.Errorf("descriptor key %q is given %d times: give each key once", key, len(values))
		case seen[key] != "":
			return "", nil, fmt.Errorf("descriptor key %q is given twice, as %q and %q: give each key once", key, seen[key], param)
		}
		seen[key] = param
		entries = append(entries, compiled.Entry{Key: key, Value: values[0]})
	}
	if len(entries) == 0 {
		return "", nil, fmt.Errorf("no descriptor entries: add key=value query parameters, as in %s?domain=%s&user_id=alice",
			StatusPath, url.QueryEscape(domains[0]))
	}
	slices.SortFunc(entries, func(a, b compiled.Entry) int { return strings.Compare(a.Key, b.Key) })
	return domains[0], entries, nil
}
