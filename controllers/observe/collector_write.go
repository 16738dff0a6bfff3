package observe

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// write applies status.enforcement of the policies whose sums changed.
func (c *Collector) write(ctx context.Context, now time.Time) error {
	var list v1beta1.RateLimitPolicyList
	// Read-only: no copy of every policy on every collection.
	if err := c.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	countConditions(list.Items)
	return c.writeEach(ctx, now, list.Items, c.WriteEnforcement)
}

// enforcementChange is a policy whose status.enforcement is to be written.
type enforcementChange struct {
	pol  *v1beta1.RateLimitPolicy
	w    *policyWindow
	next *v1beta1.EnforcementStatus
}

// writeEach computes each policy's status.enforcement at now and writes,
// with apply, those that changed, within MinWrite and the write budget.
func (c *Collector) writeEach(ctx context.Context, now time.Time, items []v1beta1.RateLimitPolicy,
	apply func(context.Context, *v1beta1.RateLimitPolicy, *v1beta1.EnforcementStatus) error) error {
	var changes []enforcementChange
	seen := make(map[types.UID]bool, len(items))
	for i := range items {
		pol := &items[i]
		seen[pol.UID] = true
		w := c.policies[pol.UID]
		sum := w.sum(now, c.Window)
		unread := c.unreadFor(pol)
		if sum == (counts{}) && len(unread) == 0 && pol.Status.Enforcement == nil {
			continue // no decision yet: nothing to say, and no write
		}
		next := c.enforcement(pol, sum, unread)
		if old := pol.Status.Enforcement; old != nil {
			cmp := old.DeepCopy()
			cmp.UpdatedAt = nil
			if equality.Semantic.DeepEqual(cmp, next) {
				continue
			}
		}
		if w == nil {
			w = &policyWindow{}
			c.policies[pol.UID] = w
		}
		if now.Sub(w.lastWrite) < c.MinWrite {
			continue // written recently: a later collection writes it
		}
		changes = append(changes, enforcementChange{pol, w, next})
	}
	for uid := range c.policies {
		if !seen[uid] {
			delete(c.policies, uid) // the policy is gone
		}
	}
	return c.writeChanges(ctx, now, changes, apply)
}

// sum drops the buckets of w that are a window old at now, and adds up
// the rest; a nil w sums to nothing.
func (w *policyWindow) sum(now time.Time, window time.Duration) counts {
	var sum counts
	if w == nil {
		return sum
	}
	cut := 0
	for cut < len(w.buckets) && now.Sub(w.buckets[cut].at) >= window {
		cut++
	}
	w.buckets = w.buckets[cut:]
	for _, b := range w.buckets {
		sum = sum.add(b.c)
	}
	return sum
}

// enforcement is the status.enforcement of pol for the window's sum and
// the pods that could not be read.
func (c *Collector) enforcement(pol *v1beta1.RateLimitPolicy, sum counts, unread []string) *v1beta1.EnforcementStatus {
	next := &v1beta1.EnforcementStatus{
		Allowed: &sum.allowed, Limited: &sum.limited, ShadowLimited: &sum.shadowLimited,
		FailedOpen: &sum.failedOpen, FailedClosed: &sum.failedClosed, LocalFallback: &sum.localFallback,
		Window: &metav1.Duration{Duration: c.Window}, UnreadPods: unread,
	}
	if pol.Spec.IsSoft() || sum.softLimited > 0 {
		// Only soft policies mark requests: others don't show the count.
		next.SoftLimited = &sum.softLimited
	}
	if pol.Spec.Holds() {
		// Holdings taken in the window and not ended in it.
		inFlight := max(0, sum.allowed-sum.released)
		next.Released, next.InFlight = &sum.released, &inFlight
	}
	if sum.penalized > 0 || pol.Spec.HasPenalty() {
		// Only policies with a penalty penalize: others don't show it.
		next.Penalized = &sum.penalized
	}
	if sum.refused > 0 {
		// Requests not counted because of what the client sent.
		next.Refused = &sum.refused
	}
	if h := c.hot[pol.UID]; h != nil {
		next.Hottest, next.HottestSince = h.top(), &metav1.Time{Time: h.since}
	}
	if b, ok := c.bounds[pol.UID]; ok {
		next.OvershootBound = &b
	}
	return next
}

// writeChanges writes the changes within the write budget: the least
// recently written first, so that every policy is written in turn when
// more change than the budget allows.
func (c *Collector) writeChanges(ctx context.Context, now time.Time, changes []enforcementChange,
	apply func(context.Context, *v1beta1.RateLimitPolicy, *v1beta1.EnforcementStatus) error) error {
	slices.SortStableFunc(changes, func(a, b enforcementChange) int { return a.w.lastWrite.Compare(b.w.lastWrite) })
	var errs []error
	for _, ch := range changes {
		if !c.writes.AllowN(now, 1) {
			break
		}
		ch.next.UpdatedAt = &metav1.Time{Time: now}
		if err := apply(ctx, ch.pol, ch.next); err != nil {
			errs = append(errs, err)
			continue
		}
		ch.w.lastWrite = now
		enforcementWrites.Inc()
	}
	if len(errs) > 0 {
		return fmt.Errorf("writing status.enforcement of %d policies, the first: %w", len(errs), errs[0])
	}
	return nil
}

// unreadFor lists the unreadable pods of the fleets that serve pol, as the
// policy's status.fleets names them.
func (c *Collector) unreadFor(pol *v1beta1.RateLimitPolicy) []string {
	var out []string
	for _, f := range pol.Status.Fleets {
		out = append(out, c.unread[types.NamespacedName{Namespace: f.Namespace, Name: f.Name}]...)
	}
	slices.Sort(out)
	if len(out) > maxUnreadPods {
		out = out[:maxUnreadPods]
	}
	return out
}

// countConditions sets sluice_operator_policies from the policies' conditions.
func countConditions(items []v1beta1.RateLimitPolicy) {
	type key struct{ typ, status string }
	n := map[key]int{}
	for _, t := range []string{v1beta1.AcceptedCondition, v1beta1.EnforcedCondition, v1beta1.DegradedCondition} {
		for _, s := range []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown} {
			n[key{t, string(s)}] = 0
		}
	}
	for i := range items {
		for _, cond := range items[i].Status.Conditions {
			if _, ok := n[key{cond.Type, string(cond.Status)}]; ok {
				n[key{cond.Type, string(cond.Status)}]++
			}
		}
	}
	for k, v := range n {
		policiesByCondition.WithLabelValues(k.typ, k.status).Set(float64(v))
	}
}
