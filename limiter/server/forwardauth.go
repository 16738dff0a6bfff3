package server

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/tracing"
)

// ForwardAuthPath is where forward-auth calls go, followed by the domain:
// /v1/forward-auth/{domain}. Any method is accepted, since nginx's
// auth_request subrequest keeps the original request's method.
const ForwardAuthPath = "/v1/forward-auth/"

// MaxForwardAuthHeader bounds every value forward-auth counts (a path's
// once normalized); a longer one is refused: denied with denyStatus and a
// reason, never an error.
const MaxForwardAuthHeader = 1024

// Headers that carry the original request to forward-auth: Traefik's
// X-Forwarded-* and the X-Original-* of nginx's documented auth_request
// setup. The first one present wins.
var (
	methodHeaders = []string{"X-Forwarded-Method", "X-Original-Method"}
	uriHeaders    = []string{"X-Forwarded-Uri", "X-Original-URI"}
	hostHeaders   = []string{"X-Forwarded-Host", "X-Original-Host"}
)

const (
	headerXFF    = "X-Forwarded-For"
	headerRealIP = "X-Real-IP"
)

// Results of forward-auth calls that lacked a value, the "result" label of
// sluice_forward_auth_missing_total.
const (
	missingAllowed = "allowed"
	missingDenied  = "denied"
)

type gatewayMetrics struct {
	missing *prometheus.CounterVec
}

func newGatewayMetrics(reg prometheus.Registerer) *gatewayMetrics {
	m := &gatewayMetrics{
		missing: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_forward_auth_missing_total",
			Help: "Forward-auth calls that lacked a value their domain's mapping needs, answered per its onMissing, by domain and result (allowed or denied).",
		}, []string{"domain", "result"}),
	}
	reg.MustRegister(m.missing)
	return m
}

// gatewayRoutes adds the endpoints gateways and apps call besides the
// check: forward-auth and the status peek.
func (s *Server) gatewayRoutes(mux *http.ServeMux) {
	s.gw = newGatewayMetrics(s.opts.Metrics)
	mux.HandleFunc(ForwardAuthPath+"{domain}", timed(s.metrics.forwardAuth, s.forwardAuth))
	mux.HandleFunc("GET "+StatusPath, timed(s.metrics.status, s.status))
	mux.HandleFunc(StatusPath, methodNotAllowed(http.MethodGet, http.MethodHead))
}

// forwardAuth answers a gateway's forward-auth call: 2xx to let the
// original request through, the mapping's denyStatus to refuse it, with the
// decision's rate-limit headers either way.
func (s *Server) forwardAuth(w http.ResponseWriter, r *http.Request) {
	r, sp := startHTTP(s.opts.Tracer, r, tracing.SpanForwardAuth)
	defer sp.End()
	domain := r.PathValue("domain")
	m := s.svc.Snapshot().ForwardAuthFor(domain)
	if m == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no forwardAuth mapping for domain %q: add one to spec.forwardAuth of the LimiterFleet (or of the policy file's LimiterFleet)", domain))
		return
	}
	if key := s.idempotencyCollision(m); key != "" {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("the forwardAuth mapping of domain %q builds the entry %q, the limiter's idempotency entry (--idempotency-entry): "+
			"a caller would choose its own idempotency key; rename the entry", domain, key))
		return
	}
	if m.Conflict != "" {
		// A mapping that fills an entry that steers the limiter for a
		// policy of its domain (config.ForwardAuthEntryConflict, compiled
		// with the snapshot): a policy file that does so is refused at
		// load, and a fleet's here, where the domain's policies are known.
		writeError(w, http.StatusInternalServerError, m.Conflict)
		return
	}
	entries, missing, refusal, err := forwardAuthEntries(r, m, s.opts.TrustedProxies)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if refusal != "" {
		// What the client sent (an over-long or repeated header, a
		// malformed X-Forwarded-For): a denial, never an error, which the
		// gateway would fail open on (service/refuse.go).
		req := &service.Request{Domain: domain, Descriptors: []service.Descriptor{{Entries: entries}}, NoEnd: true}
		resp := &service.Response{}
		s.svc.RefuseInto(req, refusal, resp)
		traceDecision(sp, domain, resp)
		s.answer(w, r, resp, m.DenyStatus)
		return
	}
	if missing != "" {
		msg := "request lacks " + missing + ", which the forwardAuth mapping of domain " + m.Domain + " needs"
		w.Header().Set(HeaderReason, msg)
		if m.DenyOnMissing {
			s.gw.missing.WithLabelValues(m.Domain, missingDenied).Inc()
			writeError(w, m.DenyStatus, msg+" (onMissing Deny)")
			return
		}
		s.gw.missing.WithLabelValues(m.Domain, missingAllowed).Inc()
		if len(entries) == 0 {
			writeJSON(w, http.StatusOK, map[string]string{"allowed": "true", "reason": msg + " (onMissing Allow)"})
			return
		}
		// onMissing Allow drops the missing entries, not the descriptor:
		// the policies on the entries present still apply.
	}
	req := &service.Request{Domain: domain, Descriptors: []service.Descriptor{{Entries: entries}}, NoEnd: true}
	resp := &service.Response{}
	s.decide(w, r, req, resp, m.DenyStatus)
	traceDecision(sp, domain, resp)
}

// idempotencyCollision is the key of m's descriptors that is the service's
// idempotency entry, or "". Such an entry would be taken out of matching
// and used as the request's idempotency key: a caller who sets the header
// it comes from would choose its own key. Forward-auth refuses the mapping.
func (s *Server) idempotencyCollision(m *compiled.ForwardAuth) string {
	for _, d := range m.Descriptors {
		if d.Key == s.svc.IdempotencyEntry() {
			return d.Key
		}
	}
	return ""
}

// forwardAuthEntries builds the descriptor entries of mapping m from r, a
// path normalized by NormalizePath (folded to lower case with the
// mapping's pathCase Insensitive). The values m needs that r lacks are
// left out of entries and named in missing. What the limiter won't count
// is named in refusal, the first such thing, its entry kept for matching:
// a value longer than MaxForwardAuthHeader (a path's once normalized), a
// path with an encoded slash, a
// header the mapping reads that comes on more than one line (the app
// behind the gateway may read any one of them, or all joined, so no value
// is the one it sees), an X-Forwarded-For that isn't a list of addresses.
// err is for what no client sends (a peer address that doesn't parse).
func forwardAuthEntries(r *http.Request, m *compiled.ForwardAuth, trusted []netip.Prefix) (entries []compiled.Entry, missing, refusal string, err error) {
	entries = make([]compiled.Entry, 0, len(m.Descriptors))
	for _, d := range m.Descriptors {
		var v, want, refused string
		switch d.From {
		case compiled.FromMethod:
			v, want, refused = firstHeader(r.Header, methodHeaders, r.Method)
		case compiled.FromPath:
			v, want, refused = firstHeader(r.Header, uriHeaders, "")
			if v != "" {
				var bad string
				if v, bad = NormalizePath(v, m.FoldPathCase); refused == "" {
					refused = bad
				}
			}
		case compiled.FromHost:
			v, want, refused = firstHeader(r.Header, hostHeaders, r.Host)
		case compiled.FromClientIP:
			v, refused, err = clientIP(r, trusted)
			want = "a client address"
		case compiled.FromHeader:
			v, want, refused = firstHeader(r.Header, []string{d.Header}, "")
		}
		if err != nil {
			return nil, "", "", err
		}
		if refused == "" && len(v) > MaxForwardAuthHeader {
			refused = fmt.Sprintf("the %s value is %d bytes long, the maximum is %d", d.Key, len(v), MaxForwardAuthHeader)
		}
		if refused != "" && refusal == "" {
			refusal = refused
		}
		if v == "" {
			if missing != "" {
				missing += " and "
			}
			missing += want
			continue
		}
		entries = append(entries, compiled.Entry{Key: d.Key, Value: v})
	}
	return entries, missing, refusal, nil
}

// firstHeader is the value of the first of names that r carries, else
// fallback. want describes the headers for a "missing" message; refused
// says why the value won't be counted (headerValue).
func firstHeader(h http.Header, names []string, fallback string) (v, want, refused string) {
	for _, name := range names {
		v, refused := headerValue(h, name)
		if refused != "" || v != "" {
			return v, "", refused
		}
	}
	return fallback, "header " + strings.Join(names, " or "), ""
}

// headerValue is a header's value, trimmed; refused says why it won't be
// counted: it comes on more than one line (its first line is the value,
// for matching), or, but for a path, which is normalized first, it is
// longer than MaxForwardAuthHeader.
func headerValue(h http.Header, name string) (v, refused string) {
	vs := h.Values(name)
	if len(vs) == 0 {
		return "", ""
	}
	v = strings.TrimSpace(vs[0])
	if len(vs) > 1 {
		return v, fmt.Sprintf("header %s comes on %d lines: send it once (the app may read any of them, so none is counted)",
			http.CanonicalHeaderKey(name), len(vs))
	}
	if len(vs[0]) > MaxForwardAuthHeader && !slices.ContainsFunc(uriHeaders, func(u string) bool { return strings.EqualFold(u, name) }) {
		return v, fmt.Sprintf("header %s is %d bytes long, the maximum is %d", http.CanonicalHeaderKey(name), len(vs[0]), MaxForwardAuthHeader)
	}
	return v, ""
}

// listHeader is a list header's lines joined by ", ", as HTTP does (each
// proxy may add its own line to X-Forwarded-For); refused when longer than
// MaxForwardAuthHeader.
func listHeader(h http.Header, name string) (v, refused string) {
	v = strings.Join(h.Values(name), ", ")
	if len(v) > MaxForwardAuthHeader {
		return "", fmt.Sprintf("header %s is %d bytes long, the maximum is %d", http.CanonicalHeaderKey(name), len(v), MaxForwardAuthHeader)
	}
	return strings.TrimSpace(v), ""
}

// clientIP is the address of the call's peer, unless the peer is a trusted
// proxy: then it is the rightmost X-Forwarded-For address that is not a
// trusted proxy, else X-Real-IP, else the leftmost X-Forwarded-For address.
// A client can prepend anything to X-Forwarded-For, so only what trusted
// proxies appended counts.
func clientIP(r *http.Request, trusted []netip.Prefix) (ip, refused string, err error) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return "", "", fmt.Errorf("peer address %q: %v", r.RemoteAddr, err)
	}
	peer := ap.Addr().Unmap()
	if !isTrusted(peer, trusted) {
		return peer.String(), "", nil
	}
	xff, refused := listHeader(r.Header, headerXFF)
	if refused != "" {
		return peer.String(), refused, nil
	}
	hops := strings.Split(xff, ",")
	var leftmost netip.Addr
	for i := len(hops) - 1; i >= 0 && xff != ""; i-- {
		a, err := parseHop(strings.TrimSpace(hops[i]))
		if err != nil {
			return peer.String(), fmt.Sprintf("header %s: %q is not an IP address", headerXFF, clipValue(strings.TrimSpace(hops[i]))), nil
		}
		if !isTrusted(a, trusted) {
			return a.String(), "", nil
		}
		leftmost = a
	}
	realIP, refused := headerValue(r.Header, headerRealIP)
	if refused != "" {
		return peer.String(), refused, nil
	}
	if realIP != "" {
		a, err := parseHop(realIP)
		if err != nil {
			return peer.String(), fmt.Sprintf("header %s: %q is not an IP address", headerRealIP, clipValue(realIP)), nil
		}
		return a.String(), "", nil
	}
	if leftmost.IsValid() {
		return leftmost.String(), "", nil
	}
	return peer.String(), "", nil
}

// clipValue keeps a client's value short enough to quote in a reason.
func clipValue(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// parseHop parses an address from X-Forwarded-For or X-Real-IP, with or
// without a port, as some proxies add one.
func parseHop(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		ap, perr := netip.ParseAddrPort(s)
		if perr != nil {
			return netip.Addr{}, err
		}
		a = ap.Addr()
	}
	return a.Unmap(), nil
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
