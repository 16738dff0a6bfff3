package observe

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// AckTracker learns which snapshot each ready limiter pod has loaded, by
// long-polling each pod's admin endpoint (limiterwire.SnapshotPath), and
// tells the controllers when that changes. It keeps the last answer of a pod
// that stops answering, so a dead pod lacks exactly the generations it never
// loaded.
//
// Track and Forget say which pods to poll; Start runs the pollers, one per
// pod, and returns once every one of them has stopped.
type AckTracker struct {
	// Admin, when set, makes the admin calls, over HTTPS with each fleet's
	// CA (as the operator does); else Client, over plain HTTP.
	Admin *AdminClients
	// Client makes the admin calls without Admin; nil means a client with
	// sane timeouts.
	Client *http.Client
	// LongPoll is how long one admin call may wait for a version.
	LongPoll time.Duration
	// Recheck is how often a pod that has the wanted version is asked again.
	Recheck time.Duration

	// changed wakes Start when Track added pods that need a poller.
	changed chan struct{}

	mu     sync.Mutex
	fleets map[types.NamespacedName]*fleetTrack
	subs   []chan event.GenericEvent
}

type fleetTrack struct {
	want string
	// served maps the UID of each policy the fleet serves to its
	// "namespace/name": pods are believed about these alone.
	served map[string]string
	pods   map[string]*podTrack
	// confirmAfter: a pod whose answer was asked after it reports at once
	// (see Confirm).
	confirmAfter time.Time
}

type podTrack struct {
	ack  PodAck
	wake chan struct{} // the wanted version changed
	// cancel stops the pod's poller; nil until Start runs one.
	cancel context.CancelFunc
}

// NewAckTracker returns a tracker; add it to the manager.
func NewAckTracker() *AckTracker {
	return &AckTracker{
		LongPoll: 5 * time.Second,
		Recheck:  2 * time.Second,
		changed:  make(chan struct{}, 1),
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

// Start runs a poller for every tracked pod until ctx ends, then stops them
// all and returns when they have returned.
func (t *AckTracker) Start(ctx context.Context) error {
	if t.Client == nil {
		t.Client = &http.Client{Timeout: t.LongPoll + 3*time.Second}
	}
	t.Client = noRedirects(t.Client)
	var pollers sync.WaitGroup
	defer pollers.Wait()
	for {
		t.startPollers(ctx, &pollers)
		select {
		case <-ctx.Done():
			t.mu.Lock()
			defer t.mu.Unlock()
			for _, f := range t.fleets {
				for _, p := range f.pods {
					if p.cancel != nil {
						p.cancel()
					}
				}
			}
			t.fleets = map[types.NamespacedName]*fleetTrack{}
			return nil
		case <-t.changed:
		}
	}
}

// startPollers starts a poller, under ctx, for each tracked pod without one.
func (t *AckTracker) startPollers(ctx context.Context, pollers *sync.WaitGroup) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for fleet, f := range t.fleets {
		for addr, p := range f.pods {
			if p.cancel != nil {
				continue
			}
			pctx, cancel := context.WithCancel(ctx)
			p.cancel = cancel
			pollers.Go(func() { t.poll(pctx, fleet, addr, p) })
		}
	}
}

// NeedLeaderElection: only the leader's controllers read acknowledgements.
func (t *AckTracker) NeedLeaderElection() bool { return true }

// Track sets a fleet's ready pod endpoints (host:port of their HTTP
// listener) and the snapshot version the operator wrote. Pollers start for
// new endpoints (once Start runs) and stop for gone ones.
func (t *AckTracker) Track(fleet types.NamespacedName, endpoints []string, want string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.fleets[fleet]
	if f == nil {
		f = &fleetTrack{pods: map[string]*podTrack{}}
		t.fleets[fleet] = f
	}
	wantChanged := f.want != want
	f.want = want
	keep := map[string]bool{}
	added := false
	for _, ep := range endpoints {
		keep[ep] = true
		p := f.pods[ep]
		if p == nil {
			f.pods[ep] = &podTrack{ack: PodAck{Addr: ep}, wake: make(chan struct{}, 1)}
			added = true
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
			if p.cancel != nil {
				p.cancel()
			}
			delete(f.pods, ep)
		}
	}
	if added {
		select {
		case t.changed <- struct{}{}:
		default: // Start is already due to look
		}
	}
}

// Serve sets the policies a fleet serves, by UID, with their
// "namespace/name": what its pods report about other policies is dropped.
// The policy controller and the collector read them with the pods'
// answers.
func (t *AckTracker) Serve(fleet types.NamespacedName, served map[string]string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.fleets[fleet]
	if f == nil {
		f = &fleetTrack{pods: map[string]*podTrack{}}
		t.fleets[fleet] = f
	}
	f.served = served
}

// Served returns the UIDs of the policies a fleet serves, as Serve set
// them; nil for an untracked fleet.
func (t *AckTracker) Served(fleet types.NamespacedName) map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f := t.fleets[fleet]; f != nil {
		return f.served
	}
	return nil
}

// Confirm asks every tracked pod of the fleet again now, and reports each
// one's first answer to a request sent at or after after, even when it says
// nothing new: the controllers wait for those answers (their CheckedAt) to
// know the pods' stores work after a change the operator made.
func (t *AckTracker) Confirm(fleet types.NamespacedName, after time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.fleets[fleet]
	if f == nil {
		return
	}
	f.confirmAfter = after
	for _, p := range f.pods {
		select {
		case p.wake <- struct{}{}:
		default:
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
func (t *AckTracker) Acks(fleet types.NamespacedName) (acks []PodAck, complete bool) {
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
	slices.SortFunc(acks, func(a, b PodAck) int {
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
