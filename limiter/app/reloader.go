package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/service"
)

// reloader installs the snapshots that config.Watch or kube.Watch loads and
// keeps the reload metrics, readiness detail and admin status. The watch
// calls it from one goroutine at a time.
type reloader struct {
	src source
	svc *service.Service
	srv *server.Server
	log *slog.Logger

	errors      prometheus.Counter
	info        *prometheus.GaugeVec
	lastSuccess prometheus.Gauge
	lastOK      prometheus.Gauge

	mu      sync.Mutex
	lastErr error // the last reload's error, nil after a good one
	noWatch error // why hot reload is off, if it is
	// The snapshot ConfigMap: known once it has been found, found invalid
	// or found missing; until then unreachable is why it can't be listed.
	known       bool
	missing     bool
	unreachable error
}

func newReloader(src source, svc *service.Service, reg prometheus.Registerer, log *slog.Logger) *reloader {
	r := &reloader{
		src: src,
		svc: svc,
		log: log,
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_config_reload_errors_total",
			Help: "Policy loads that failed (unreadable or invalid policy file or snapshot ConfigMap); the previous policies stayed in force.",
		}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_config_info",
			Help: "The loaded policy snapshot: 1 for its version.",
		}, []string{"version"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_last_reload_success_timestamp_seconds",
			Help: "When the policies were last loaded successfully, in Unix seconds.",
		}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_last_reload_successful",
			Help: "1 if the last attempt to load the policies succeeded, else 0.",
		}),
	}
	reg.MustRegister(r.errors, r.info, r.lastSuccess, r.lastOK)
	return r
}

func (r *reloader) onLoad(snap *config.Snapshot) {
	r.mu.Lock()
	wasBad := r.lastErr != nil || r.missing
	r.lastErr, r.known, r.missing, r.unreachable = nil, true, false, nil
	r.mu.Unlock()
	r.lastSuccess.SetToCurrentTime()
	r.lastOK.Set(1)
	if cur := r.svc.Snapshot(); cur != nil && cur.Version == snap.Version {
		if wasBad {
			r.log.Info(r.src.kind()+" is valid again; policies unchanged", "source", r.src.String(), "version", snap.Version)
		}
		return
	}
	if snap.Pods > 0 {
		r.svc.SetReadyPods(int(snap.Pods)) // the operator's count wins over --local-fallback-pods
	}
	r.srv.Swap(snap)
	r.info.Reset()
	r.info.WithLabelValues(snap.Version).Set(1)
	r.log.Info("Loaded policies", "source", r.src.String(), "version", snap.Version, "policies", len(snap.Policies))
}

func (r *reloader) onError(err error) {
	r.mu.Lock()
	r.lastErr, r.known, r.missing, r.unreachable = err, true, false, nil
	r.mu.Unlock()
	r.errors.Inc()
	r.lastOK.Set(0)
	if cur := r.svc.Snapshot(); cur != nil {
		r.log.Error(r.src.kind()+" not reloaded; keeping the loaded policies", "source", r.src.String(), "version", cur.Version, "error", err)
		return
	}
	r.log.Error(r.src.kind()+" invalid; no policies loaded, not ready", "source", r.src.String(), "error", err)
}

func (r *reloader) watchFailed(err error) {
	r.mu.Lock()
	r.noWatch = err
	r.mu.Unlock()
	r.log.Error("Cannot watch the policies: changes will not be loaded until restart", "source", r.src.String(), "error", err)
}

// check is the "config" readiness check. Once policies are loaded it
// passes: they stay in force after a bad reload or with the ConfigMap gone,
// and the detail says so. Before, it fails with what the limiter waits for.
func (r *reloader) check(context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.svc.Snapshot() == nil {
		return "", fmt.Errorf("waiting for %s: %s", r.src.name(), r.problem())
	}
	var parts []string
	if r.lastErr != nil {
		parts = append(parts, "last reload failed, previous policies in force: "+r.lastErr.Error())
	}
	if r.missing {
		parts = append(parts, r.src.name()+" not found (deleted?), previous policies in force")
	}
	if r.noWatch != nil {
		parts = append(parts, "hot reload off: "+r.noWatch.Error())
	}
	if len(parts) == 0 {
		return r.src.String() + " loaded", nil
	}
	return strings.Join(parts, "; "), nil
}

// status is the source and its last error, for the admin endpoint.
func (r *reloader) status() (source, lastError string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.problem(); p != "" {
		lastError = p
	} else if r.noWatch != nil {
		lastError = "hot reload off: " + r.noWatch.Error()
	}
	return r.src.String(), lastError
}

// problem says why the source gives no snapshot, or "" when it does.
func (r *reloader) problem() string {
	switch {
	case r.lastErr != nil:
		return "invalid: " + r.lastErr.Error()
	case r.missing:
		return "not found"
	case r.unreachable != nil:
		return r.unreachable.Error()
	case !r.known && r.src.client != nil:
		return "not listed yet"
	}
	return ""
}
