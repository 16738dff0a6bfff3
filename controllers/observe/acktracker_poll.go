package observe

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

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
	ev := event.GenericEvent{Object: &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: fleet.Namespace, Name: fleet.Name}}}
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
			mode += BudgetExceededMark
		}
		out[d.Policy] = mode
	}
	return out
}

// BudgetExceededMark ends the failure mode of a degraded policy whose
// namespace is over its store budget, rather than the store failing.
const BudgetExceededMark = "/budget"
