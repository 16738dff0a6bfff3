package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/sluice-dev/sluice/api/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// SnapshotFits holds, per fleet, the policies its last compiled snapshot
// refused for want of room, and tells subscribers (the policy controller)
// which policies' refusal started, changed or ended. Safe for concurrent
// use; a nil *SnapshotFits refuses nothing.
type SnapshotFits struct {
	mu     sync.Mutex
	fleets map[types.NamespacedName]*fleetFit
	subs   []chan event.GenericEvent
}

type fleetFit struct {
	// fingerprint and kept are the inputs and kept count of the last fit,
	// the hint of the next.
	fingerprint string
	kept        int
	refused     map[types.NamespacedName]refusal
}

// refusal is one refused policy: the generation refused, and why.
type refusal struct {
	generation int64
	message    string
}

// NewSnapshotFits returns an empty SnapshotFits.
func NewSnapshotFits() *SnapshotFits {
	return &SnapshotFits{fleets: map[types.NamespacedName]*fleetFit{}}
}

// Subscribe returns a channel of policy events (namespace and name only),
// sent for each policy whose refusal by some fleet started, changed or
// ended.
func (f *SnapshotFits) Subscribe() <-chan event.GenericEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan event.GenericEvent, 1024)
	f.subs = append(f.subs, ch)
	return ch
}

// hint returns the kept count of the fleet's last fit, or -1 before any,
// and whether its inputs had the same fingerprint (the count is then
// exact).
func (f *SnapshotFits) hint(fleet types.NamespacedName, fingerprint string) (kept int, exact bool) {
	if f == nil {
		return -1, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	last, ok := f.fleets[fleet]
	if !ok {
		return -1, false
	}
	return last.kept, last.fingerprint == fingerprint
}

// publish records a fleet's fit and notifies the policies whose refusal
// changed.
func (f *SnapshotFits) publish(ctx context.Context, fleet types.NamespacedName, fingerprint string, fit *fittedSnapshot) {
	if f == nil {
		return
	}
	next := &fleetFit{fingerprint: fingerprint, kept: len(fit.kept), refused: make(map[types.NamespacedName]refusal, len(fit.refused))}
	msg := snapshotFullMessage(fleet, len(fit.kept), fit.stored)
	for i := range fit.refused {
		p := &fit.refused[i]
		next.refused[client.ObjectKeyFromObject(p)] = refusal{generation: p.Generation, message: msg}
	}
	for i := range fit.overBudget {
		p := &fit.overBudget[i]
		next.refused[client.ObjectKeyFromObject(p)] = refusal{generation: p.Generation,
			message: fmt.Sprintf("fleet %s: %s", fleet, fit.budgetMessage[p.Namespace])}
	}
	f.mu.Lock()
	var prev map[types.NamespacedName]refusal
	if last, ok := f.fleets[fleet]; ok {
		prev = last.refused
	}
	f.fleets[fleet] = next
	f.mu.Unlock()
	f.notify(ctx, changedRefusals(prev, next.refused))
}

// forget drops a deleted fleet and notifies the policies it refused.
func (f *SnapshotFits) forget(ctx context.Context, fleet types.NamespacedName) {
	if f == nil {
		return
	}
	f.mu.Lock()
	last, ok := f.fleets[fleet]
	delete(f.fleets, fleet)
	f.mu.Unlock()
	if ok {
		f.notify(ctx, changedRefusals(last.refused, nil))
	}
}

// refusal returns why the fleet refused the given generation of a policy,
// or false when it did not (it kept it, or has not compiled it yet).
func (f *SnapshotFits) refusal(fleet, policy types.NamespacedName, generation int64) (string, bool) {
	if f == nil {
		return "", false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ff, ok := f.fleets[fleet]
	if !ok {
		return "", false
	}
	r, ok := ff.refused[policy]
	if !ok || r.generation != generation {
		return "", false
	}
	return r.message, true
}

// changedRefusals lists, sorted, the policies refused in one map and not
// the other, or refused in both differently.
func changedRefusals(prev, next map[types.NamespacedName]refusal) []types.NamespacedName {
	var out []types.NamespacedName
	for k, v := range next {
		if old, ok := prev[k]; !ok || old != v {
			out = append(out, k)
		}
	}
	for k := range prev {
		if _, ok := next[k]; !ok {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	return out
}

func (f *SnapshotFits) notify(ctx context.Context, policies []types.NamespacedName) {
	if len(policies) == 0 {
		return
	}
	f.mu.Lock()
	subs := slices.Clone(f.subs)
	f.mu.Unlock()
	for _, key := range policies {
		ev := event.GenericEvent{Object: &v1beta1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}
		for _, ch := range subs {
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
	}
}
