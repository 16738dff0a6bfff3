// Package adminauth guards a limiter's admin plane on Kubernetes, the way
// controller-runtime's secure metrics filter
// (sigs.k8s.io/controller-runtime/pkg/metrics/filters) and
// kube-rbac-proxy guard /metrics: each call carries a bearer token, which
// the API server authenticates (TokenReview), and the user it names must be
// allowed the call's path and verb as a non-resource URL
// (SubjectAccessReview), such as
//
//	rules:
//	  - nonResourceURLs: ["/v1/admin/*", "/metrics"]
//	    verbs: ["get"]
//
// A call without a token is answered 401, one whose user lacks the
// permission 403, and one the API server could not review 503. The
// limiter's ServiceAccount needs to create tokenreviews and
// subjectaccessreviews (the built-in ClusterRole system:auth-delegator).
//
// With Options.Audience, a call must carry a token issued for that
// audience (a projected ServiceAccount token, which the API server itself
// refuses): the TokenReview asks for it and the answer must name it. Paths
// in Options.APIAudiencePaths (/metrics, which Prometheus scrapes with an
// ordinary token) are reviewed for the API server's own audiences instead.
//
// Reviews are cached: a token's user for TokenTTL, an authorization for
// AllowTTL (DenyTTL when denied), so that the operator's polls cost the
// API server nothing most of the time. A token the API server refused is
// not cached, so that nobody can flush the cache with made-up tokens; the
// reviews in flight are bounded instead.
package adminauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
)

// Defaults of Options.
const (
	DefaultTokenTTL      = time.Minute
	DefaultAllowTTL      = time.Minute
	DefaultDenyTTL       = 10 * time.Second
	DefaultReviewTimeout = 5 * time.Second
	// DefaultMaxInFlight bounds the reviews sent to the API server at once.
	DefaultMaxInFlight = 8
	// maxCacheEntries bounds each cache; a full cache drops its expired
	// entries, then everything.
	maxCacheEntries = 4096
)

// Options configure an Authorizer.
type Options struct {
	// TokenTTL is how long a token's review is trusted; 0 means 1m.
	TokenTTL time.Duration
	// AllowTTL and DenyTTL are how long an authorization is trusted; 0
	// means 1m and 10s.
	AllowTTL, DenyTTL time.Duration
	// ReviewTimeout bounds each review; 0 means 5s.
	ReviewTimeout time.Duration
	// MaxInFlight bounds the reviews in flight; 0 means 8.
	MaxInFlight int
	// Registerer receives sluice_admin_requests_total; nil registers none.
	Registerer prometheus.Registerer
	// Logger logs reviews that failed; nil means slog.Default().
	Logger *slog.Logger
	// Now is the cache's clock; nil means time.Now.
	Now func() time.Time
	// Audience, when set, is the audience a caller's token must be issued
	// for (TokenReview spec.audiences, required in status.audiences).
	Audience string
	// APIAudiencePaths are the paths whose tokens are reviewed for the API
	// server's audiences, not Audience (e.g. /metrics for Prometheus).
	APIAudiencePaths []string
}

// Authorizer authenticates and authorizes admin plane calls against the
// API server. It is safe for concurrent use.
type Authorizer struct {
	tokens authnclient.TokenReviewInterface
	sars   authzclient.SubjectAccessReviewInterface
	opts   Options
	log    *slog.Logger
	sem    chan struct{}
	calls  *prometheus.CounterVec

	mu      sync.Mutex
	users   map[[32]byte]cached[authnv1.UserInfo] // by token hash
	allowed map[[32]byte]cached[bool]             // by user, path and verb
}

type cached[T any] struct {
	v       T
	expires time.Time
}

// Results of admin calls, the "result" label of sluice_admin_requests_total.
const (
	resultAllowed         = "allowed"
	resultUnauthenticated = "unauthenticated"
	resultForbidden       = "forbidden"
	resultError           = "error"
)

// New returns an Authorizer that reviews tokens with the API server of cfg.
func New(cfg *rest.Config, opts Options) (*Authorizer, error) {
	authn, err := authnclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	authz, err := authzclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if opts.TokenTTL <= 0 {
		opts.TokenTTL = DefaultTokenTTL
	}
	if opts.AllowTTL <= 0 {
		opts.AllowTTL = DefaultAllowTTL
	}
	if opts.DenyTTL <= 0 {
		opts.DenyTTL = DefaultDenyTTL
	}
	if opts.ReviewTimeout <= 0 {
		opts.ReviewTimeout = DefaultReviewTimeout
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	a := &Authorizer{
		tokens:  authn.TokenReviews(),
		sars:    authz.SubjectAccessReviews(),
		opts:    opts,
		log:     opts.Logger,
		sem:     make(chan struct{}, opts.MaxInFlight),
		users:   map[[32]byte]cached[authnv1.UserInfo]{},
		allowed: map[[32]byte]cached[bool]{},
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_admin_requests_total",
			Help: "Calls to the admin plane (/v1/admin/*, /metrics) by result: allowed, unauthenticated (401), forbidden (403) or error (the API server could not review them, 503).",
		}, []string{"result"}),
	}
	for _, r := range []string{resultAllowed, resultUnauthenticated, resultForbidden, resultError} {
		a.calls.WithLabelValues(r)
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(a.calls)
	}
	return a, nil
}

// Wrap guards next: it runs only for calls whose token's user may get
// their path.
func (a *Authorizer) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The review is of the path as sent; one with dot segments or
		// repeated slashes would be reviewed under one name and routed
		// (after a redirect) under another. No admin path has them.
		if r.URL.Path != path.Clean(r.URL.Path) || r.URL.RawPath != "" {
			a.refuse(w, http.StatusNotFound, resultForbidden, "Not found: the admin plane serves clean paths only")
			return
		}
		token, ok := bearerToken(r)
		if !ok {
			a.refuse(w, http.StatusUnauthorized, resultUnauthenticated, "Unauthorized: send a ServiceAccount token as Authorization: Bearer")
			return
		}
		user, ok, err := a.authenticate(r.Context(), token, a.audienceOf(r.URL.Path))
		switch {
		case err != nil:
			a.log.Error("Admin plane: token review failed", "error", err)
			a.refuse(w, http.StatusServiceUnavailable, resultError, "Authentication failed: the API server could not review the token")
			return
		case !ok:
			msg := "Unauthorized: the API server does not accept the token"
			if aud := a.audienceOf(r.URL.Path); aud != "" {
				msg += " for the audience " + strconv.Quote(aud)
			}
			a.refuse(w, http.StatusUnauthorized, resultUnauthenticated, msg)
			return
		}
		verb := strings.ToLower(r.Method)
		if r.Method == http.MethodHead {
			verb = "get"
		}
		allowed, err := a.authorize(r.Context(), user, r.URL.Path, verb)
		switch {
		case err != nil:
			a.log.Error("Admin plane: access review failed", "user", user.Username, "error", err)
			a.refuse(w, http.StatusServiceUnavailable, resultError, "Authorization failed: the API server could not review the call")
			return
		case !allowed:
			a.refuse(w, http.StatusForbidden, resultForbidden,
				fmt.Sprintf("Forbidden: user %q may not %s the non-resource URL %s", user.Username, verb, r.URL.Path))
			return
		}
		a.calls.WithLabelValues(resultAllowed).Inc()
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
	})
}

// userKey is the context key of the user Wrap reviewed.
type userKey struct{}

func (a *Authorizer) refuse(w http.ResponseWriter, code int, result, msg string) {
	a.calls.WithLabelValues(result).Inc()
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice-limiter-admin"`)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = fmt.Fprintln(w, msg)
}

// bearerToken is the token of an "Authorization: Bearer" header.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "Bearer") && token != ""
}

// audienceOf is the audience a token for urlPath must be issued for; ""
// for the API server's own.
func (a *Authorizer) audienceOf(urlPath string) string {
	if slices.Contains(a.opts.APIAudiencePaths, urlPath) {
		return ""
	}
	return a.opts.Audience
}

// authenticate returns the user of token, from the cache or a
// TokenReview for audience ("": the API server's own); ok is false when
// the API server does not accept it, or not for audience.
func (a *Authorizer) authenticate(ctx context.Context, token, audience string) (authnv1.UserInfo, bool, error) {
	key := sha256.Sum256([]byte(audience + "\x00" + token))
	if u, ok := lookup(a, a.users, key); ok {
		return u, true, nil
	}
	if err := a.acquire(ctx); err != nil {
		return authnv1.UserInfo{}, false, err
	}
	defer a.release()
	ctx, cancel := context.WithTimeout(ctx, a.opts.ReviewTimeout)
	defer cancel()
	spec := authnv1.TokenReviewSpec{Token: token}
	if audience != "" {
		spec.Audiences = []string{audience}
	}
	tr, err := a.tokens.Create(ctx, &authnv1.TokenReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return authnv1.UserInfo{}, false, err
	}
	if !tr.Status.Authenticated || (audience != "" && !slices.Contains(tr.Status.Audiences, audience)) {
		return authnv1.UserInfo{}, false, nil
	}
	store(a, a.users, key, tr.Status.User, a.opts.TokenTTL)
	return tr.Status.User, true, nil
}

// authorize says whether user may verb the non-resource URL urlPath, from the
// cache or a SubjectAccessReview.
func (a *Authorizer) authorize(ctx context.Context, user authnv1.UserInfo, urlPath, verb string) (bool, error) {
	key := accessKey(user, urlPath, verb)
	if ok, found := lookup(a, a.allowed, key); found {
		return ok, nil
	}
	if err := a.acquire(ctx); err != nil {
		return false, err
	}
	defer a.release()
	extra := make(map[string]authzv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	ctx, cancel := context.WithTimeout(ctx, a.opts.ReviewTimeout)
	defer cancel()
	sar, err := a.sars.Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: urlPath, Verb: verb},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	allowed := sar.Status.Allowed && !sar.Status.Denied
	ttl := a.opts.DenyTTL
	if allowed {
		ttl = a.opts.AllowTTL
	}
	store(a, a.allowed, key, allowed, ttl)
	return allowed, nil
}

// accessKey hashes everything a SubjectAccessReview is asked.
func accessKey(user authnv1.UserInfo, urlPath, verb string) [32]byte {
	h := sha256.New()
	add := func(s string) { _, _ = fmt.Fprintf(h, "%d:%s", len(s), s) }
	add(user.Username)
	add(user.UID)
	add(urlPath)
	add(verb)
	groups := slices.Clone(user.Groups)
	slices.Sort(groups)
	for _, g := range groups {
		add(g)
	}
	keys := make([]string, 0, len(user.Extra))
	for k := range user.Extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		add(k)
		for _, v := range user.Extra[k] {
			add(v)
		}
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

var errBusy = errors.New("too many reviews in flight")

func (a *Authorizer) acquire(ctx context.Context) error {
	select {
	case a.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %v", errBusy, ctx.Err())
	}
}

func (a *Authorizer) release() { <-a.sem }

func lookup[T any](a *Authorizer, m map[[32]byte]cached[T], key [32]byte) (T, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := m[key]
	if !ok || !a.opts.Now().Before(e.expires) {
		var zero T
		return zero, false
	}
	return e.v, true
}

func store[T any](a *Authorizer, m map[[32]byte]cached[T], key [32]byte, v T, ttl time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.opts.Now()
	if len(m) >= maxCacheEntries {
		for k, e := range m {
			if !now.Before(e.expires) {
				delete(m, k)
			}
		}
		if len(m) >= maxCacheEntries {
			clear(m)
		}
	}
	m[key] = cached[T]{v: v, expires: now.Add(ttl)}
}
