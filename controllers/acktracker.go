package controllers

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1alpha1"
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
	ack  podAck
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
			f.pods[ep] = &podTrack{ack: podAck{Addr: ep}, wake: make(chan struct{}, 1)}
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

// pollBackoff spaces the calls to a pod that does not answer: 100ms,
// doubling up to 2s; an answer starts it again.
var pollBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Cap: 2 * time.Second, Steps: math.MaxInt32}

// poll asks one pod what it has loaded until ctx ends: a long poll while
// it lacks the wanted version, an occasional recheck once it has it.
func (t *AckTracker) poll(ctx context.Context, fleet types.NamespacedName, addr string, p *podTrack) {
	log := logf.FromContext(ctx).WithValues("fleet", fleet, "pod", addr)
	backoff := pollBackoff
	for ctx.Err() == nil {
		want := t.want(fleet)
		asked := time.Now()
		got, err := t.ask(ctx, fleet, addr, want)
		if ctx.Err() != nil {
			return
		}
		t.mu.Lock()
		prev := p.ack
		next := prev
		next.Answered = true
		confirmed := false
		var served map[string]string
		if f := t.fleets[fleet]; f != nil {
			served = f.served
		}
		if err != nil {
			next.Err = boundMessage(err.Error(), maxPodMessage)
		} else {
			next.CheckedAt = asked
			if f := t.fleets[fleet]; f != nil && !f.confirmAfter.IsZero() {
				confirmed = prev.CheckedAt.Before(f.confirmAfter) && !asked.Before(f.confirmAfter)
			}
			next.Err = boundMessage(got.LastError, maxPodMessage)
			next.Version, next.Enforcement = boundMessage(got.Version, maxPodMessage), boundMessage(got.Enforcement, maxPodMessage)
			// Only what the pod says of the policies the fleet serves.
			next.Generations = make(map[string]int64, len(served))
			for _, pol := range got.Policies {
				if _, ok := served[pol.UID]; ok {
					next.Generations[pol.UID] = pol.Generation
				}
			}
			next.StoreErr = ""
			if got.Store != nil && !got.Store.OK {
				next.StoreErr = boundMessage(got.Store.Detail, maxPodMessage)
			}
			next.Degraded = degradedOf(got.Degraded, served)
		}
		p.ack = next
		t.mu.Unlock()
		if !prev.Answered || prev.Version != next.Version || prev.Enforcement != next.Enforcement || prev.Err != next.Err || prev.StoreErr != next.StoreErr ||
			!maps.Equal(prev.Degraded, next.Degraded) || !maps.Equal(prev.Generations, next.Generations) || confirmed {
			if err != nil {
				log.V(1).Info("Limiter pod did not answer", "error", err)
			}
			t.notify(ctx, fleet)
		}

		var pause time.Duration
		switch {
		case err != nil:
			pause = backoff.Step()
		case want == "" || next.Version == want:
			pause, backoff = t.Recheck, pollBackoff
		default:
			backoff = pollBackoff // the long poll timed out: ask again now
		}
		if pause > 0 {
			timer := time.NewTimer(pause)
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

func (t *AckTracker) ask(ctx context.Context, fleet types.NamespacedName, addr, want string) (*limiterwire.Snapshot, error) {
	q := url.Values{}
	if want != "" {
		q.Set(limiterwire.WaitForVersionParam, want)
		q.Set(limiterwire.TimeoutParam, t.LongPoll.String())
	}
	c, req, err := adminRequest(ctx, t.Admin, t.Client, fleet, addr, limiterwire.SnapshotPath, q.Encode())
	if err != nil {
		return nil, err
	}
	u := req.URL
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", u.Path, resp.Status)
	}
	var out limiterwire.Snapshot
	if err := readAnswer(resp.Body, &out); err != nil {
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

// degradedOf keeps, of a pod's degraded policies, those the fleet serves
// (served maps UID to "namespace/name"), at most maxDegradedPolicies, with
// bounded failure modes; nil when none.
func degradedOf(ds []limiterwire.Degraded, served map[string]string) map[string]string {
	if len(ds) == 0 {
		return nil
	}
	names := make(map[string]bool, len(served))
	for _, n := range served {
		names[n] = true
	}
	var out map[string]string
	for _, d := range ds {
		if !names[d.Policy] || len(out) >= maxDegradedPolicies {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		mode := boundMessage(d.FailureMode, maxFailureMode)
		if d.BudgetExceeded {
			mode += budgetExceededMark
		}
		out[d.Policy] = mode
	}
	return out
}

// budgetExceededMark ends the failure mode of a degraded policy whose
// namespace is over its store budget, rather than the store failing.
const budgetExceededMark = "/budget"
