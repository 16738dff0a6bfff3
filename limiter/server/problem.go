package server

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/sluice-dev/sluice/limiter/service"
)

// ProblemContentType is the media type of problem details (RFC 9457).
const ProblemContentType = "application/problem+json"

// AcceptEntry is the default descriptor entry key that carries a client's
// Accept header over RLS, as an Envoy request_headers action puts it
// (header_name: accept, descriptor_key: accept); a limiter's
// --accept-entry (a fleet's spec.entries.accept) names another. A denied
// RLS request whose entry accepts ProblemContentType gets problem details
// as the body Envoy sends (raw_body). The entry takes part in matching as
// any other: a fleet that declares it accepts no policy that counts on it.
const AcceptEntry = service.DefaultAcceptEntry

// problemTypes are the problem types of draft-ietf-httpapi-ratelimit-headers
// (section 5), by the API's name for each (spec.problem.type; a test
// checks that every name the API knows is here): the type URI and its
// title.
var problemTypes = map[string]struct{ uri, title string }{
	quotaExceeded: {"https://iana.org/assignments/http-problem-types#quota-exceeded",
		"Request cannot be satisfied as assigned quota has been exceeded"},
	"TemporaryReducedCapacity": {"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",
		"Request cannot be satisfied due to temporary server capacity constraints"},
	"AbnormalUsageDetected": {"https://iana.org/assignments/http-problem-types#abnormal-usage-detected",
		"Request not satisfied due to detection of abnormal request pattern"},
}

// quotaExceeded is the problem type of a denial by no policy's choice.
const quotaExceeded = "QuotaExceeded"

// Problem is the problem details body (RFC 9457) of a denial, with the
// draft's extension member "violated-policies".
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// ViolatedPolicies names the visible policies that denied, as
	// RateLimit-Policy names them; empty, never null, when only hidden
	// ones did.
	ViolatedPolicies []string `json:"violated-policies"`
}

// problemFor is the problem details of resp, a denial answered with
// status: the type and detail of the denying policy with the longest wait
// (a hidden one's too: they are not its numbers), and every violated
// visible policy.
func problemFor(resp *service.Response, status int) Problem {
	pt, detail := quotaExceeded, ""
	if p := resp.Reported.Denied; p != nil {
		pt, detail = p.ProblemType, p.ProblemDetail
	}
	if resp.Reported.Refused {
		// What the client sent, and the cap (refuse.go).
		detail = resp.Reported.Reason
	}
	t := problemTypes[pt]
	out := Problem{Type: t.uri, Title: t.title, Status: status, Detail: detail, ViolatedPolicies: make([]string, 0, len(resp.Violated))}
	for _, p := range resp.Violated {
		out.ViolatedPolicies = append(out.ViolatedPolicies, p.ID())
	}
	return out
}

// writeProblem answers code with the decision's rate-limit headers and the
// problem details of resp as the body.
func writeProblem(w http.ResponseWriter, resp *service.Response, headers []*corev3.HeaderValue, code int) {
	body, err := json.Marshal(problemFor(resp, code))
	if err != nil {
		writeError(w, http.StatusInternalServerError, "encoding problem details: "+err.Error())
		return
	}
	h := w.Header()
	for _, hv := range headers {
		h[hv.GetKey()] = append(h[hv.GetKey()], hv.GetValue())
	}
	h.Set("Content-Type", ProblemContentType)
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
}

// acceptsProblem reports whether an Accept header value asks for problem
// details: it names application/problem+json itself (a wildcard is not
// asking) with a weight above 0, at least that of application/json, the
// other answer there is.
func acceptsProblem(accept string) bool {
	if !strings.Contains(strings.ToLower(accept), ProblemContentType) {
		return false // the common case, without parsing
	}
	problem, json := mediaWeight(accept, "application", "problem+json"), mediaWeight(accept, "application", "json")
	return problem.exact && problem.q > 0 && problem.q >= json.q
}

// weight is what an Accept header says of one media type: the weight
// (q, 0 to 1000) of the most specific range that matches it, and whether
// that range names the type itself.
type weight struct {
	q     int
	exact bool
}

// mediaWeight is the weight that accept gives to typ/sub: that of the most
// specific matching media range (typ/sub, then typ/*, then */*), 0 when
// none matches (RFC 9110, section 12.5.1).
func mediaWeight(accept, typ, sub string) weight {
	best, specificity := weight{}, -1
	for _, elem := range strings.Split(accept, ",") {
		params := strings.Split(elem, ";")
		rangeType, rangeSub, ok := strings.Cut(strings.ToLower(strings.TrimSpace(params[0])), "/")
		if !ok {
			continue
		}
		spec := -1
		switch {
		case rangeType == typ && rangeSub == sub:
			spec = 2
		case rangeType == typ && rangeSub == "*":
			spec = 1
		case rangeType == "*" && rangeSub == "*":
			spec = 0
		}
		if spec <= specificity {
			continue
		}
		specificity, best = spec, weight{q: qValue(params[1:]), exact: spec == 2}
	}
	return best
}

// qValue is the weight among a media range's parameters, in thousandths:
// 1000 without one, 0 for a malformed one.
func qValue(params []string) int {
	for _, p := range params {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "q") {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || f < 0 || f > 1 {
			return 0
		}
		return int(f * 1000)
	}
	return 1000
}
