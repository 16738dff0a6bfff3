// Package server holds the limiter's protocol adapters around a
// service.Service, and wires their listeners on two planes. The data plane
// is what clients call: Envoy RLS v3 (rls.go) and gRPC health on one port;
// the HTTP check, forward-auth, status peek, /healthz and /readyz on
// another. The admin plane is what the operator and Prometheus call: the
// admin endpoints and /metrics, on a third port, behind Options.AdminAuth
// (on Kubernetes, TokenReview and SubjectAccessReview; see
// limiter/adminauth). The data port answers 404 there. It holds no
// limiting logic: every adapter maps its request to a service.Request,
// calls Service.Decide (or Peek), and maps the service.Response (rls.go,
// headers.go) or error (ErrInvalidArgument: InvalidArgument, 400) back.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/tracing"
)

// Defaults of Options.
const (
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxHeaderBytes is above what nginx (32 KiB of client header
	// buffers by default) and Traefik (1 MiB) pass to forward-auth: a
	// header block the limiter refused with 431 would be an error the
	// proxy may fail open on.
	DefaultMaxHeaderBytes       = 2 << 20
	DefaultMaxConcurrentStreams = 1024
	DefaultShutdownTimeout      = limiterwire.DefaultShutdownTimeout
	DefaultReadinessTimeout     = time.Second
	// DefaultAdminAddr is Options.AdminAddr's default: loopback only.
	DefaultAdminAddr = "127.0.0.1:0"
)

// Options configure a Server.
type Options struct {
	// GRPCAddr is where Envoy RLS v3 and gRPC health listen (host:port;
	// port 0 picks one).
	GRPCAddr string
	// HTTPAddr is where the HTTP data plane (check, forward-auth, status
	// peek) and the probes listen.
	HTTPAddr string
	// AdminAddr is where the admin plane listens: limiterwire.SnapshotPath,
	// StatsPath and /metrics. Empty means DefaultAdminAddr, on
	// loopback with a port picked by the system.
	AdminAddr string
	// AdminAuth, when set, wraps every admin plane handler: it
	// authenticates and authorizes each call (see limiter/adminauth). nil
	// leaves the admin plane open, as a standalone limiter on loopback has
	// it.
	AdminAuth func(http.Handler) http.Handler
	// AdminTLS, when set, makes the admin plane serve HTTPS only, with
	// this configuration (see adminauth.ServerTLS); nil serves plain HTTP.
	AdminTLS *tls.Config
	// Metrics receives the server's metrics and is what /metrics serves;
	// register the service's metrics on it too. nil means a new registry.
	Metrics *prometheus.Registry
	// Readiness are checks that /readyz runs besides "snapshot" (is one
	// loaded), by name: e.g. "store" pinging Redis.
	Readiness map[string]ReadinessChecker
	// SnapshotSource names where snapshots come from and the last error
	// loading one ("" when none), for limiterwire.SnapshotPath; nil leaves both
	// empty.
	SnapshotSource func() (source, lastError string)
	// StoreStatus, when set, checks the counter store for the admin
	// snapshot endpoint: a detail, and whether it answers.
	StoreStatus func(context.Context) (detail string, ok bool)
	// Warming, when set, reports that the limiter cannot decide yet
	// although it has a snapshot (its store does not know its shards):
	// gRPC health says NOT_SERVING until it reports false once, as the
	// matching readiness check keeps /readyz failing (see warming.go). It
	// is asked at start and every 50ms after, until then.
	Warming func() bool
	// ReadinessTimeout bounds each readiness check; 0 means 1s.
	ReadinessTimeout time.Duration
	// Logger logs listener errors; nil means slog.Default().
	Logger *slog.Logger
	// MaxBodyBytes bounds an HTTP check body (413 beyond) and a gRPC
	// message; 0 means 1 MiB.
	MaxBodyBytes int64
	// MaxHeaderBytes bounds a data-plane HTTP request's head (431
	// beyond); 0 means DefaultMaxHeaderBytes. The admin plane's is 64 KiB.
	MaxHeaderBytes int
	// MaxConcurrentStreams bounds the RLS calls in flight on one gRPC
	// connection; 0 means 1024.
	MaxConcurrentStreams uint32
	// TrustedProxies are the peers whose X-Forwarded-For and X-Real-IP
	// forward-auth believes when it reads a client's IP address.
	TrustedProxies []netip.Prefix
	// ShutdownTimeout bounds how long Run waits for calls in flight after
	// its context ends (and DrainDelay) before closing connections; 0
	// means 10s.
	ShutdownTimeout time.Duration
	// DrainDelay is how long Run keeps answering, unready, after its
	// context ends and before its listeners close (see drain); 0 closes
	// them at once.
	DrainDelay time.Duration
	// RetryAfterJitter adds up to this fraction of Retry-After, in whole
	// seconds, so that denied clients don't come back in lockstep. 0 means
	// 0.1; negative disables jitter.
	RetryAfterJitter float64
	// PolicyAccess, when set, says whether the caller of an admin request
	// may see the policies of a namespace in full (limiterwire.ExplainPath;
	// see adminauth.Authorizer.CanGetPolicies). nil shows every policy, as
	// the open admin plane of a standalone limiter does.
	PolicyAccess func(r *http.Request, namespace string) (bool, error)
	// RegionStatus, when set, answers GET limiterwire.RegionsPath on the
	// admin plane: the region's peers, reachable or not since when, and
	// the grants it holds (limiter/regions Status). nil: 404.
	RegionStatus func() any
	// Tracer, when set, traces each decision (see limiter/tracing); nil
	// is tracing off.
	Tracer *tracing.Tracer
}

// Server runs the gRPC and HTTP listeners of one limiter.
type Server struct {
	svc          *service.Service
	rls          *RLS
	opts         Options
	log          *slog.Logger
	metrics      *metrics
	gw           *gatewayMetrics
	health       *health.Server
	grpc         *grpc.Server
	http         *http.Server
	admin        *http.Server
	grpcLis      net.Listener
	httpLis      net.Listener
	adminLis     net.Listener
	shuttingDown atomic.Bool
	loads        *loads
	bootID       string      // random per process, in AdminStats
	startedAt    time.Time   // when counting started, in AdminStats
	draining     atomic.Bool // see drain
	servingMu    sync.Mutex  // serializes gRPC health updates (warming.go)
	warm         bool        // Options.Warming reported false once
}

// New listens on both addresses, so that they are known (GRPCAddr,
// HTTPAddr) and taken before Run serves them.
func New(svc *service.Service, opts Options) (*Server, error) {
	if opts.Metrics == nil {
		opts.Metrics = prometheus.NewRegistry()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxHeaderBytes <= 0 {
		opts.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if opts.MaxConcurrentStreams == 0 {
		opts.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.ReadinessTimeout <= 0 {
		opts.ReadinessTimeout = DefaultReadinessTimeout
	}
	if opts.AdminAddr == "" {
		opts.AdminAddr = DefaultAdminAddr
	}
	s := &Server{
		svc:     svc,
		rls:     NewRLS(svc, opts.RetryAfterJitter),
		opts:    opts,
		log:     opts.Logger,
		metrics: newMetrics(opts.Metrics),
		health:  health.NewServer(),
		bootID:  newBootID(),
		// The service counts from its creation; it was just created.
		startedAt: time.Now(),
	}
	s.rls.SetTracer(opts.Tracer)
	s.loads = newLoads(svc.Snapshot())
	s.warm = opts.Warming == nil || !opts.Warming()
	s.updateServing()
	s.grpc = newGRPCServer(s.rls, s.health, s.metrics, opts)
	s.http = s.newHTTPServer(s.routes())
	s.http.MaxHeaderBytes = opts.MaxHeaderBytes
	admin := s.adminRoutes()
	if opts.AdminAuth != nil {
		admin = opts.AdminAuth(admin)
	}
	s.admin = s.newHTTPServer(admin)
	var err error
	if s.grpcLis, err = net.Listen("tcp", opts.GRPCAddr); err != nil {
		return nil, fmt.Errorf("gRPC listener: %w", err)
	}
	if s.httpLis, err = net.Listen("tcp", opts.HTTPAddr); err != nil {
		_ = s.grpcLis.Close()
		return nil, fmt.Errorf("HTTP listener: %w", err)
	}
	// Control bytes in a request's head are the service's to refuse, not
	// Go's parser's (scrub.go).
	s.httpLis = scrubListener{s.httpLis}
	if s.adminLis, err = net.Listen("tcp", opts.AdminAddr); err != nil {
		_ = s.grpcLis.Close()
		_ = s.httpLis.Close()
		return nil, fmt.Errorf("admin listener: %w", err)
	}
	if opts.AdminTLS != nil {
		s.adminLis = tls.NewListener(s.adminLis, opts.AdminTLS)
	}
	return s, nil
}

func (s *Server) newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.opts.Logger.Handler(), slog.LevelWarn),
	}
}

// GRPCAddr is the gRPC listener's address.
func (s *Server) GRPCAddr() string { return s.grpcLis.Addr().String() }

// HTTPAddr is the HTTP listener's address.
func (s *Server) HTTPAddr() string { return s.httpLis.Addr().String() }

// AdminAddr is the admin listener's address.
func (s *Server) AdminAddr() string { return s.adminLis.Addr().String() }

// Handler is the HTTP data plane, for tests and embedding.
func (s *Server) Handler() http.Handler { return s.http.Handler }

// AdminHandler is the admin plane, behind Options.AdminAuth, for tests and
// embedding.
func (s *Server) AdminHandler() http.Handler { return s.admin.Handler }

// Swap installs snap in the service, reports gRPC health SERVING (once
// warm: see warming.go) and answers the long-polls waiting for its version.
func (s *Server) Swap(snap *compiled.Snapshot) {
	s.svc.Swap(snap)
	s.loads.installed(snap)
	s.updateServing() // ignored once shutting down
}

// Run serves the three listeners until ctx ends or one fails, then shuts
// them down gracefully: health turns NOT_SERVING and /readyz 503, calls keep
// being answered for DrainDelay (after ctx ended), then the listeners close,
// calls in flight finish (up to ShutdownTimeout), and Run returns. The error is the first
// listener failure, or nil after ctx ended.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 3)
	if !s.warm {
		warmCtx, stopWarm := context.WithCancel(ctx)
		defer stopWarm()
		go s.awaitWarm(warmCtx)
	}
	go func() {
		// ErrServerStopped: the context ended before Serve began.
		if err := s.grpc.Serve(s.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errc <- fmt.Errorf("gRPC server: %w", err)
			return
		}
		errc <- nil
	}()
	for name, hs := range map[string]*http.Server{"HTTP": s.http, "admin": s.admin} {
		lis := s.httpLis
		if hs == s.admin {
			lis = s.adminLis
		}
		go func() {
			if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s server: %w", name, err)
				return
			}
			errc <- nil
		}()
	}
	s.log.Info("Serving", "grpc", s.GRPCAddr(), "http", s.HTTPAddr(), "admin", s.AdminAddr(), "adminAuth", s.opts.AdminAuth != nil, "adminTLS", s.opts.AdminTLS != nil)

	var first error
	pending := 3
	select {
	case <-ctx.Done():
		s.drain()
	case first = <-errc:
		pending--
	}
	s.shutdown(context.WithoutCancel(ctx))
	for ; pending > 0; pending-- {
		if err := <-errc; first == nil {
			first = err
		}
	}
	return first
}

func (s *Server) shutdown(ctx context.Context) {
	s.shuttingDown.Store(true)
	s.loads.stop()
	s.health.Shutdown() // NOT_SERVING, and no later change
	s.log.Info("Shutting down", "timeout", s.opts.ShutdownTimeout)

	ctx, cancel := context.WithTimeout(ctx, s.opts.ShutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, hs := range []*http.Server{s.http, s.admin} {
		wg.Go(func() {
			if err := hs.Shutdown(ctx); err != nil {
				s.log.Warn("HTTP calls still running at the shutdown deadline; closing", "error", err)
				_ = hs.Close()
			}
		})
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		stopped := make(chan struct{})
		go func() {
			s.grpc.GracefulStop()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-ctx.Done():
			s.log.Warn("gRPC calls still running at the shutdown deadline; closing")
			s.grpc.Stop()
			<-stopped
		}
	}()
	wg.Wait()
}

// slogPrinter adapts a slog.Logger to promhttp's Logger.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Error(fmt.Sprint(v...)) }

// Pinger is a store that can say whether it is reachable, such as the Redis
// store.
type Pinger interface {
	Ping(ctx context.Context) error
}

// PingCheck is a readiness check that passes while p answers a ping.
func PingCheck(p Pinger) ReadinessChecker {
	return func(ctx context.Context) (string, error) {
		if err := p.Ping(ctx); err != nil {
			return "", fmt.Errorf("ping failed: %w", err)
		}
		return "ping ok", nil
	}
}
