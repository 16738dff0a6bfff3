package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/tracing"
)

// CheckPath is the HTTP rate-limit check: POST a JSON RateLimitRequest.
const CheckPath = "/v1/ratelimit/check"

// A ReadinessChecker reports on one thing the limiter needs to serve, for
// /readyz. A non-nil error makes the limiter unready and is shown as the
// check's detail; otherwise detail is shown (it may be empty).
type ReadinessChecker func(ctx context.Context) (detail string, err error)

// Readiness is the JSON body of /readyz.
type Readiness struct {
	// Ready is true when every check passed: the answer is 200, else 503.
	Ready bool `json:"ready"`
	// SnapshotVersion is the loaded snapshot's version, empty before one is.
	SnapshotVersion string `json:"snapshotVersion,omitempty"`
	// Checks are the results by check name. "snapshot" is always there.
	Checks map[string]Check `json:"checks"`
}

// Check is the result of one readiness check.
type Check struct {
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

var responseJSON = protojson.MarshalOptions{EmitDefaultValues: true}

func (s *Server) routes() http.Handler {
	mux := s.newDrainingMux()
	mux.HandleFunc("POST "+CheckPath, timed(s.metrics.http, s.check))
	mux.HandleFunc(CheckPath, methodNotAllowed(http.MethodPost))
	mux.HandleFunc("POST "+ReleasePath, timed(s.metrics.http, s.release))
	mux.HandleFunc(ReleasePath, methodNotAllowed(http.MethodPost))
	mux.HandleFunc("POST "+SettlePath, timed(s.metrics.http, s.settle))
	mux.HandleFunc(SettlePath, methodNotAllowed(http.MethodPost))
	s.gatewayRoutes(mux.ServeMux)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/healthz", methodNotAllowed(http.MethodGet, http.MethodHead))
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("/readyz", methodNotAllowed(http.MethodGet, http.MethodHead))
	// The admin plane is not here: its paths are answered 404, as any
	// unknown path, with a pointer for whoever looks.
	for _, p := range []string{limiterwire.AdminPathPrefix, limiterwire.MetricsPath} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			writeError(w, http.StatusNotFound, r.URL.Path+" is served on the admin listener (--admin-addr), not on the data plane")
		})
	}
	return mux
}

// adminRoutes are the admin plane: what the operator and Prometheus read.
func (s *Server) adminRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+limiterwire.SnapshotPath, s.adminSnapshot)
	mux.HandleFunc(limiterwire.SnapshotPath, methodNotAllowed(http.MethodGet, http.MethodHead))
	mux.HandleFunc("GET "+limiterwire.StatsPath, s.adminStats)
	mux.HandleFunc(limiterwire.StatsPath, methodNotAllowed(http.MethodGet, http.MethodHead))
	mux.HandleFunc("GET "+limiterwire.ExplainPath, s.adminExplain)
	mux.HandleFunc(limiterwire.ExplainPath, methodNotAllowed(http.MethodGet, http.MethodHead))
	mux.HandleFunc("GET "+limiterwire.TopPath, s.adminTop)
	mux.HandleFunc(limiterwire.TopPath, methodNotAllowed(http.MethodGet, http.MethodHead))
	mux.Handle("GET "+limiterwire.MetricsPath, promhttp.HandlerFor(s.opts.Metrics, promhttp.HandlerOpts{
		ErrorLog:          slogPrinter{s.log},
		Registry:          s.opts.Metrics,
		EnableOpenMetrics: true,
	}))
	mux.HandleFunc(limiterwire.MetricsPath, methodNotAllowed(http.MethodGet, http.MethodHead))
	if st := s.opts.RegionStatus; st != nil {
		mux.HandleFunc("GET "+limiterwire.RegionsPath, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(st())
		})
		mux.HandleFunc(limiterwire.RegionsPath, methodNotAllowed(http.MethodGet, http.MethodHead))
	}
	return mux
}

// check answers POST /v1/ratelimit/check: 200 when the request is within
// its limits, 429 when over or refused (a cost above a cap, an over-long
// value, a bad Idempotency-Key...: see service/refuse.go), with the
// decision's rate-limit headers and the JSON RateLimitResponse as the body.
// Only a body that is not a RateLimitRequest, or one that selects no policy
// (an empty domain, no descriptors), is answered 400. Any Content-Type is
// taken as JSON, so that `curl -d` works as is.
func (s *Server) check(w http.ResponseWriter, r *http.Request) {
	r, sp := startHTTP(s.opts.Tracer, r, tracing.SpanCheck)
	defer sp.End()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than the maximum of %d bytes", mbe.Limit))
			return
		}
		writeError(w, http.StatusBadRequest, "reading request body: "+err.Error())
		return
	}
	req, err := decodeCheckRequest(body, func(req *rlsv3.RateLimitRequest) error { return validateRLS(s.svc, req) })
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	sr := getRequest(req)
	defer putRequest(sr)
	idem, err := idempotencyKey(r.Header)
	if err != nil {
		// What the client sent: a denial, never an error (refuse.go).
		s.svc.RefuseInto(&sr.req, err.Error(), &sr.resp)
	} else {
		sr.req.IdempotencyKey = idem
		if err := s.svc.DecideInto(r.Context(), &sr.req, &sr.resp); err != nil {
			sp.Fail(err)
			writeError(w, httpStatus(err), err.Error())
			return
		}
	}
	traceDecision(sp, sr.req.Domain, &sr.resp)
	if sr.resp.Lease != "" {
		// The application ends the request with it (release, settle).
		w.Header().Set(HeaderLease, sr.resp.Lease)
	}
	if sr.resp.FailureMode != "" {
		// What the application's client does when it can't reach us.
		w.Header().Set(HeaderFailureMode, string(sr.resp.FailureMode))
	}
	s.answer(w, r, &sr.resp, http.StatusTooManyRequests)
}

// decide makes the decision and answers 200, or denyStatus when over the
// limit, with the decision's rate-limit headers and, as the body, the JSON
// RateLimitResponse that RLS would answer; or, for a denial that the
// client's Accept header asks problem details of, those (problem.go).
func (s *Server) decide(w http.ResponseWriter, r *http.Request, req *service.Request, resp *service.Response, denyStatus int) {
	if err := s.svc.DecideInto(r.Context(), req, resp); err != nil {
		writeError(w, httpStatus(err), err.Error())
		return
	}
	s.answer(w, r, resp, denyStatus)
}

// answer writes a decision as decide does.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, resp *service.Response, denyStatus int) {
	code := http.StatusOK
	if resp.OverLimit {
		code = denyStatus
		if st := penaltyStatus(resp); st != 0 {
			code = st // spec.penalty.status
		}
		if acceptsProblem(strings.Join(r.Header.Values("Accept"), ",")) {
			writeProblem(w, resp, headers(resp, s.rls.jitter), code)
			return
		}
	}
	s.writeDecision(w, toRLS(resp, s.rls.jitter), code)
}

// writeDecision answers code with the decision's rate-limit headers and the
// JSON RateLimitResponse as the body.
func (s *Server) writeDecision(w http.ResponseWriter, resp *rlsv3.RateLimitResponse, code int) {
	out, err := responseJSON.Marshal(resp)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "encoding response: "+err.Error())
		return
	}
	h := w.Header()
	for _, hv := range resp.ResponseHeadersToAdd {
		// Keep the service's spelling (X-RateLimit-Limit, not
		// X-Ratelimit-Limit); header names are case-insensitive anyway.
		h[hv.GetKey()] = append(h[hv.GetKey()], hv.GetValue())
	}
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(out)
}

// IdempotencyKeyHeader names a check: a retry with the same key within the
// limiter's TTL gets the first decision again and consumes nothing.
const IdempotencyKeyHeader = "Idempotency-Key"

// idempotencyKey reads the Idempotency-Key header: at most one, not empty,
// at most service.MaxIdempotencyKeyLength bytes.
func idempotencyKey(h http.Header) (string, error) {
	vs := h.Values(IdempotencyKeyHeader)
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1:
		return "", fmt.Errorf("%d %s headers: send one", len(vs), IdempotencyKeyHeader)
	case vs[0] == "":
		return "", fmt.Errorf("%s header is empty: send a key, or leave the header out", IdempotencyKeyHeader)
	}
	if err := service.ValidateIdempotencyKey(vs[0]); err != nil {
		return "", fmt.Errorf("%s header: %v", IdempotencyKeyHeader, err)
	}
	return vs[0], nil
}

// visiblePolicies counts snap's policies that are not hidden.
func visiblePolicies(snap *compiled.Snapshot) int {
	n := 0
	for _, p := range snap.Policies {
		if !p.Hidden {
			n++
		}
	}
	return n
}

// httpStatus maps an error of the service to HTTP.
func httpStatus(err error) int {
	if errors.Is(err, service.ErrInvalidArgument) {
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// readyz answers 200 when a snapshot is loaded and every readiness check
// passes, else 503; the body says why either way.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	out := Readiness{Ready: true, Checks: map[string]Check{}}
	if snap := s.svc.Snapshot(); snap != nil {
		out.SnapshotVersion = snap.Version
		// Hidden policies are hidden on every data-plane path: not counted.
		out.Checks["snapshot"] = Check{OK: true, Detail: fmt.Sprintf("version %s, %d policies", snap.Version, visiblePolicies(snap))}
	} else {
		out.Checks["snapshot"] = Check{Detail: "no policies loaded yet"}
	}
	if s.shuttingDown.Load() {
		out.Checks["server"] = Check{Detail: "shutting down"}
	}
	for name, check := range s.opts.Readiness {
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.ReadinessTimeout)
		detail, err := check(ctx)
		cancel()
		if err != nil {
			detail = err.Error()
		}
		out.Checks[name] = Check{OK: err == nil, Detail: detail}
	}
	for _, c := range out.Checks {
		out.Ready = out.Ready && c.OK
	}
	code := http.StatusOK
	if !out.Ready {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, out)
}

func methodNotAllowed(allowed ...string) http.HandlerFunc {
	allow := ""
	for i, m := range allowed {
		if i > 0 {
			allow += ", "
		}
		allow += m
	}
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s: use %s", r.Method, r.URL.Path, allow))
	}
}

// errorBody is the JSON body of every HTTP error.
type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorBody{Error: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encoding response"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
