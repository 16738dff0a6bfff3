package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// adminSnapshotPath is the limiter's admin endpoint reporting the loaded
// snapshot; with ?waitForVersion=V&timeout=D it answers as soon as V is
// loaded (a long poll).
const adminSnapshotPath = "/v1/admin/snapshot"

// adminSnapshot is the part of the admin endpoint's answer the operator reads.
type adminSnapshot struct {
	Version     string `json:"version"`
	Enforcement string `json:"enforcement"`
	Policies    []struct {
		UID        string `json:"uid"`
		Generation int64  `json:"generation"`
	} `json:"policies"`
	LastError string `json:"lastError"`
	Degraded  []struct {
		Policy      string `json:"policy"`
		FailureMode string `json:"failureMode"`
	} `json:"degraded"`
	// Store is absent for the memory store.
	Store *struct {
		OK     bool   `json:"ok"`
		Detail string `json:"detail"`
	} `json:"store"`
}

// AckTracker learns which snapshot each ready limiter pod has loaded, by
// long-polling each pod's admin endpoint, and tells the controllers when
// that changes. It keeps the last answer of a pod that stops answering, so
// a dead pod lacks exactly the generations it never loaded.
type AckTracker struct {
	// Client makes the admin calls; nil means a client with sane timeouts.
	Client *http.Client
	// LongPoll is how long one admin call may wait for a version.
	LongPoll time.Duration
	// Recheck is how often a pod that has the wanted version is asked again.
	Recheck time.Duration

	mu     sync.Mutex
	ctx    context.Context
	fleets map[types.NamespacedName]*fleetTrack
	subs   []chan event.GenericEvent
}

type fleetTrack struct {
	want string
	pods map[string]*podTrack
}

type podTrack struct {
	ack    podAck
	wake   chan struct{} // the wanted version changed
	cancel context.CancelFunc
}

// NewAckTracker returns a tracker; add it to the manager.
func NewAckTracker() *AckTracker {
	return &AckTracker{
		LongPoll: 5 * time.Second,
		Recheck:  2 * time.Second,
		fleets:   map[types.NamespacedName]*fleetTrack{},
	}
}

// Subscribe returns a channel of fleet events (name and namespace only),
// sent whenever a pod of that fleet reports something new.
func (t *AckTracker) Subscribe() <-chan event.GenericEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	ch := make(chan event.GenericEvent, 1024)
	t.subs = append(t.subs, ch)
	return ch
}

// Start runs until ctx ends; pollers start as fleets are tracked.
func (t *AckTracker) Start(ctx context.Context) error {
	t.mu.Lock()
	t.ctx = ctx
	if t.Client == nil {
		t.Client = &http.Client{Timeout: t.LongPoll + 3*time.Second}
	}
	t.mu.Unlock()
	<-ctx.Done()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range t.fleets {
		for _, p := range f.pods {
			p.cancel()
		}
	}
	t.fleets = map[types.NamespacedName]*fleetTrack{}
	return nil
}

// NeedLeaderElection: only the leader's controllers read acknowledgements.
func (t *AckTracker) NeedLeaderElection() bool { return true }

// Track sets a fleet's ready pod endpoints (host:port of their HTTP
// listener) and the snapshot version the operator wrote. Pollers start for
// new endpoints and stop for gone ones.
func (t *AckTracker) Track(fleet types.NamespacedName, endpoints []string, want string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx == nil {
		return // not started yet: the controllers will call again
	}
	f := t.fleets[fleet]
	if f == nil {
		f = &fleetTrack{pods: map[string]*podTrack{}}
		t.fleets[fleet] = f
	}
	wantChanged := f.want != want
	f.want = want
	keep := map[string]bool{}
	for _, ep := range endpoints {
		keep[ep] = true
		p := f.pods[ep]
		if p == nil {
			ctx, cancel := context.WithCancel(t.ctx)
			p = &podTrack{ack: podAck{Addr: ep}, wake: make(chan struct{}, 1), cancel: cancel}
			f.pods[ep] = p
			go t.poll(ctx, fleet, ep, p)
			continue
		}
		if wantChanged {
			select {
			case p.wake <- struct{}{}:
			default:
			}
		}
	}
	for ep, p := range f.pods {
		if !keep[ep] {
			p.cancel()
			delete(f.pods, ep)
		}
	}
}

// Forget stops tracking a fleet.
func (t *AckTracker) Forget(fleet types.NamespacedName) {
	t.Track(fleet, nil, "")
	t.mu.Lock()
	delete(t.fleets, fleet)
	t.mu.Unlock()
}

// Acks returns what each of the fleet's tracked pods reported, sorted by
// address, and whether every one has answered at least once.
func (t *AckTracker) Acks(fleet types.NamespacedName) (acks []podAck, complete bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.fleets[fleet]
	if f == nil {
		return nil, false
	}
	complete = true
	for _, p := range f.pods {
		acks = append(acks, p.ack)
		complete = complete && p.ack.Answered
	}
	slices.SortFunc(acks, func(a, b podAck) int {
		switch {
		case a.Addr < b.Addr:
			return -1
		case a.Addr > b.Addr:
			return 1
		}
		return 0
	})
	return acks, complete
}

// Endpoints returns the tracked pod endpoints of every fleet, sorted.
func (t *AckTracker) Endpoints() map[types.NamespacedName][]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[types.NamespacedName][]string, len(t.fleets))
	for key, f := range t.fleets {
		if len(f.pods) > 0 {
			out[key] = slices.Sorted(maps.Keys(f.pods))
		}
	}
	return out
}

func (t *AckTracker) want(fleet types.NamespacedName) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f := t.fleets[fleet]; f != nil {
		return f.want
	}
	return ""
}

// poll asks one pod what it has loaded until ctx ends: a long poll while
// it lacks the wanted version, an occasional recheck once it has it.
func (t *AckTracker) poll(ctx context.Context, fleet types.NamespacedName, addr string, p *podTrack) {
	log := logf.FromContext(ctx).WithValues("fleet", fleet, "pod", addr)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		want := t.want(fleet)
		got, err := t.ask(ctx, addr, want)
		if ctx.Err() != nil {
			return
		}
		t.mu.Lock()
		prev := p.ack
		next := prev
		next.Answered = true
		if err != nil {
			next.Err = err.Error()
		} else {
			next.Err = got.LastError
			next.Version, next.Enforcement = got.Version, got.Enforcement
			next.Generations = make(map[string]int64, len(got.Policies))
			for _, pol := range got.Policies {
				next.Generations[pol.UID] = pol.Generation
			}
			next.StoreErr = ""
			if got.Store != nil && !got.Store.OK {
				next.StoreErr = got.Store.Detail
			}
			next.Degraded = nil
			for _, d := range got.Degraded {
				if next.Degraded == nil {
					next.Degraded = map[string]string{}
				}
				next.Degraded[d.Policy] = d.FailureMode
			}
		}
		p.ack = next
		t.mu.Unlock()
		if !prev.Answered || prev.Version != next.Version || prev.Enforcement != next.Enforcement || prev.Err != next.Err || prev.StoreErr != next.StoreErr ||
			!maps.Equal(prev.Degraded, next.Degraded) {
			if err != nil {
				log.V(1).Info("Limiter pod did not answer", "error", err)
			}
			t.notify(ctx, fleet)
		}

		var wait time.Duration
		switch {
		case err != nil:
			wait, backoff = backoff, min(2*backoff, 2*time.Second)
		case want == "" || next.Version == want:
			wait, backoff = t.Recheck, 100*time.Millisecond
		default:
			backoff = 100 * time.Millisecond // the long poll timed out: ask again now
		}
		if wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-p.wake:
				timer.Stop()
			case <-timer.C:
			}
		}
	}
}

func (t *AckTracker) ask(ctx context.Context, addr, want string) (*adminSnapshot, error) {
	q := url.Values{}
	if want != "" {
		q.Set("waitForVersion", want)
		q.Set("timeout", t.LongPoll.String())
	}
	u := url.URL{Scheme: "http", Host: addr, Path: adminSnapshotPath, RawQuery: q.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := t.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", u.Path, resp.Status)
	}
	var out adminSnapshot
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&out); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", u.Path, err)
	}
	return &out, nil
}

func (t *AckTracker) notify(ctx context.Context, fleet types.NamespacedName) {
	t.mu.Lock()
	subs := slices.Clone(t.subs)
	t.mu.Unlock()
	ev := event.GenericEvent{Object: &v1alpha1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: fleet.Namespace, Name: fleet.Name}}}
	for _, ch := range subs {
		select {
		case ch <- ev:
		case <-ctx.Done():
			return
		}
	}
}
