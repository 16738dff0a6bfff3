package server

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/limiter/config"
)

// AdminSnapshotPath tells which snapshot the limiter has loaded: GET it for
// an AdminSnapshot. With ?waitForVersion=V the answer waits (a long-poll)
// until version V is loaded, or until ?timeout= (a Go duration, default and
// at most MaxSnapshotWait) has passed, and then gives whatever is loaded.
// The operator uses it to learn what each limiter pod enforces.
const AdminSnapshotPath = "/v1/admin/snapshot"

// MaxSnapshotWait caps the timeout of a long-poll on AdminSnapshotPath.
const MaxSnapshotWait = 10 * time.Second

// AdminSnapshot is the JSON body of AdminSnapshotPath. Before a snapshot is
// loaded, Version and Enforcement are empty, Policies is [] and LoadedAt is
// absent.
type AdminSnapshot struct {
	// Version is the loaded snapshot's version, its content hash.
	Version string `json:"version"`
	// Enforcement is the loaded snapshot's kill switch: Enabled or Disabled.
	Enforcement config.Enforcement `json:"enforcement"`
	// LoadedAt is when this limiter installed the snapshot (RFC 3339 with
	// nanoseconds).
	LoadedAt time.Time `json:"loadedAt,omitzero"`
	// Policies are the snapshot's policies, sorted by namespace and name.
	Policies []AdminPolicy `json:"policies"`
	// Source is where snapshots come from: "configmap NAMESPACE/NAME" or
	// "file PATH".
	Source string `json:"source"`
	// LastError is why the source gives no new snapshot (invalid, missing
	// or unreachable), or empty. The loaded snapshot stays in force.
	LastError string `json:"lastError"`
	// Degraded lists the policies this limiter answered by their failure
	// mode recently, because the store could not answer.
	Degraded []AdminDegraded `json:"degraded,omitempty"`
	// ReadyPods is the divisor of failureMode Local in force.
	ReadyPods int `json:"readyPods,omitempty"`
	// Store is whether the counter store answers now; absent for the
	// in-process memory store.
	Store *AdminStore `json:"store,omitempty"`
}

// AdminStore is the counter store's health, as the limiter sees it.
type AdminStore struct {
	// OK is true when the store answered a ping and no breaker is open.
	OK bool `json:"ok"`
	// Detail says what was checked, and the error when not OK, such as
	// "ping failed: WRONGPASS ...".
	Detail string `json:"detail"`
}

// storeCheckTimeout bounds the store check of one AdminSnapshot.
const storeCheckTimeout = time.Second

// AdminDegraded is one policy running degraded on this limiter.
type AdminDegraded struct {
	// Policy is "namespace/name".
	Policy      string `json:"policy"`
	FailureMode string `json:"failureMode"`
	// Since is the first fallback decision of this episode.
	Since     time.Time `json:"since"`
	Fallbacks int64     `json:"fallbacks"`
}

// AdminPolicy identifies one policy of a loaded snapshot: the object and,
// when the snapshot came from the API server, its UID and generation.
type AdminPolicy struct {
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	UID        string `json:"uid,omitempty"`
	Generation int64  `json:"generation,omitempty"`
}

// loads records what Server.Swap installs, and wakes long-polls on each
// Swap and at shutdown.
type loads struct {
	mu      sync.Mutex
	snap    *config.Snapshot // the last one Swap installed
	at      time.Time        // when
	changed chan struct{}    // closed and replaced by each Swap; nil once shut down
}

func newLoads(snap *config.Snapshot) *loads {
	l := &loads{changed: make(chan struct{})}
	if snap != nil {
		l.snap, l.at = snap, time.Now()
	}
	return l
}

// installed records snap and wakes the waiters.
func (l *loads) installed(snap *config.Snapshot) {
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
func (l *loads) loadedAt(snap *config.Snapshot) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if snap == nil || snap != l.snap {
		return time.Time{}
	}
	return l.at
}

// adminSnapshot answers GET AdminSnapshotPath.
func (s *Server) adminSnapshot(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	want := q.Get("waitForVersion")
	wait := MaxSnapshotWait
	if v := q.Get("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("timeout %q: want a non-negative duration such as 2s", v))
			return
		}
		wait = min(d, MaxSnapshotWait)
	}
	if want != "" && wait > 0 {
		// The server's WriteTimeout runs from the request's arrival; a
		// long-poll needs its wait on top.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + s.admin.WriteTimeout))
		if !s.waitForVersion(r.Context(), want, wait) {
			return // the client left
		}
	}
	writeJSON(w, http.StatusOK, s.AdminSnapshot())
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
// AdminSnapshotPath answers.
func (s *Server) AdminSnapshot() AdminSnapshot {
	out := AdminSnapshot{Policies: []AdminPolicy{}}
	if s.opts.SnapshotSource != nil {
		out.Source, out.LastError = s.opts.SnapshotSource()
	}
	if s.opts.StoreStatus != nil {
		ctx, cancel := context.WithTimeout(context.Background(), storeCheckTimeout)
		detail, ok := s.opts.StoreStatus(ctx)
		cancel()
		out.Store = &AdminStore{OK: ok, Detail: detail}
	}
	snap := s.svc.Snapshot()
	if snap == nil {
		return out
	}
	out.Version, out.Enforcement, out.LoadedAt = snap.Version, snap.Enforcement, s.loads.loadedAt(snap)
	out.Policies = make([]AdminPolicy, len(snap.Policies))
	for i, p := range snap.Policies {
		out.Policies[i] = AdminPolicy{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Generation: p.Generation}
	}
	for _, d := range s.svc.Degraded() {
		out.Degraded = append(out.Degraded, AdminDegraded{Policy: d.Policy, FailureMode: string(d.FailureMode), Since: d.Since, Fallbacks: d.Fallbacks})
	}
	out.ReadyPods = s.svc.ReadyPods()
	return out
}
