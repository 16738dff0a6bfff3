package server

import (
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/api/limiterwire"
)

// DefaultDrainDelay is the drain delay of a limiter on Kubernetes
// (limiterwire.DefaultDrainDelay, which the operator sizes pods by).
const DefaultDrainDelay = limiterwire.DefaultDrainDelay

// drain is the first step of a graceful stop, before the listeners close:
// /readyz answers 503 and gRPC health NOT_SERVING, so that endpoints drop
// the pod, while every call is still answered for Options.DrainDelay.
// Each HTTP answer closes its connection (drainingMux), so that a client
// that reaches the pod through a Service address opens its next one to a
// pod still in the endpoints; idle connections are left open, as closing
// them could cut a request the client is sending on one. Without a delay
// it does nothing: the shutdown does the rest.
func (s *Server) drain() {
	if s.opts.DrainDelay <= 0 {
		return
	}
	s.shuttingDown.Store(true)
	s.health.Shutdown() // NOT_SERVING, and no later change
	s.draining.Store(true)
	s.log.Info("Draining: not ready, still answering until the listeners close", "delay", s.opts.DrainDelay)
	time.Sleep(s.opts.DrainDelay)
}

// drainingMux is the HTTP data plane's mux: while the server drains, every
// answer carries "Connection: close".
type drainingMux struct {
	*http.ServeMux
	s *Server
}

func (s *Server) newDrainingMux() drainingMux {
	return drainingMux{ServeMux: http.NewServeMux(), s: s}
}

func (m drainingMux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m.s.draining.Load() {
		w.Header().Set("Connection", "close")
	}
	m.ServeMux.ServeHTTP(w, r)
}
