package server

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/service"
)

// storeCheckTimeout bounds the store check of one limiterwire.Snapshot.
const storeCheckTimeout = time.Second

// loads records what Server.Swap installs, and wakes long-polls on each
// Swap and at shutdown.
type loads struct {
	mu      sync.Mutex
	snap    *compiled.Snapshot // the last one Swap installed
	at      time.Time          // when
	changed chan struct{}      // closed and replaced by each Swap; nil once shut down
}

func newLoads(snap *compiled.Snapshot) *loads {
	l := &loads{changed: make(chan struct{})}
	if snap != nil {
		l.snap, l.at = snap, time.Now()
	}
	return l
}

// installed records snap and wakes the waiters.
func (l *loads) installed(snap *compiled.Snapshot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.snap, l.at = snap, time.Now()
	if l.changed != nil {
		close(l.changed)
		l.changed = make(chan struct{})
	}
}

// stop wakes the waiters for good.
func (l *loads) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// next is closed at the next Swap or at shutdown; nil after shutdown.
func (l *loads) next() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// loadedAt is when snap was installed, or zero when it wasn't the last
// snapshot Swap installed.
func (l *loads) loadedAt(snap *compiled.Snapshot) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if snap == nil || snap != l.snap {
		return time.Time{}
	}
	return l.at
}

// adminSnapshot answers GET limiterwire.SnapshotPath.
func (s *Server) adminSnapshot(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	want := q.Get(limiterwire.WaitForVersionParam)
	wait := limiterwire.MaxSnapshotWait
	if v := q.Get(limiterwire.TimeoutParam); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("timeout %q: want a non-negative duration such as 2s", v))
			return
		}
		wait = min(d, limiterwire.MaxSnapshotWait)
	}
	if want != "" && wait > 0 {
		// The server's WriteTimeout runs from the request's arrival; a
		// long-poll needs its wait on top.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + s.admin.WriteTimeout))
		if !s.waitForVersion(r.Context(), want, wait) {
			return // the client left
		}
	}
	writeJSON(w, http.StatusOK, s.AdminSnapshot(r.Context()))
}

// waitForVersion returns when version is loaded, wait has passed or the
// server shuts down (true), or when ctx ends (false).
func (s *Server) waitForVersion(ctx context.Context, version string, wait time.Duration) bool {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		// Take the channel before reading the snapshot: a Swap in between
		// closes it, so no change is missed.
		next := s.loads.next()
		if snap := s.svc.Snapshot(); (snap != nil && snap.Version == version) || next == nil {
			return true
		}
		select {
		case <-next:
		case <-timer.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
}

// AdminSnapshot describes the loaded snapshot and its source, as
// limiterwire.SnapshotPath answers. ctx bounds the store check.
func (s *Server) AdminSnapshot(ctx context.Context) limiterwire.Snapshot {
	out := limiterwire.Snapshot{Policies: []limiterwire.Policy{}}
	if s.opts.SnapshotSource != nil {
		out.Source, out.LastError = s.opts.SnapshotSource()
	}
	if s.opts.StoreStatus != nil {
		ctx, cancel := context.WithTimeout(ctx, storeCheckTimeout)
		detail, ok := s.opts.StoreStatus(ctx)
		cancel()
		out.Store = &limiterwire.Store{OK: ok, Detail: detail}
	}
	snap := s.svc.Snapshot()
	if snap == nil {
		return out
	}
	out.Version, out.Enforcement, out.LoadedAt = snap.Version, string(snap.Enforcement), s.loads.loadedAt(snap)
	out.Policies = make([]limiterwire.Policy, len(snap.Policies))
	for i, p := range snap.Policies {
		out.Policies[i] = limiterwire.Policy{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Generation: p.Generation}
	}
	for _, d := range s.svc.Degraded() {
		out.Degraded = append(out.Degraded, limiterwire.Degraded{Policy: d.Policy, FailureMode: string(d.FailureMode), Since: d.Since, Fallbacks: d.Fallbacks,
			BudgetExceeded: d.Cause == service.CauseBudgetExceeded})
	}
	out.ReadyPods = s.svc.ReadyPods()
	return out
}
