package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// Collector defaults.
const (
	DefaultCollectInterval     = 5 * time.Second
	DefaultEnforcementWindow   = 5 * time.Minute
	DefaultEnforcementMinWrite = 10 * time.Second
	defaultCollectTimeout      = 2 * time.Second
	// DefaultEnforcementWritesPerSecond is the collector's write budget:
	// 300 status writes a minute at most.
	DefaultEnforcementWritesPerSecond = 5
	burstSeconds                      = 10
	collectParallelism                = 16
	maxUnreadPods                     = 16
	maxHottest                        = 20
)

// hotSum is one policy's hottest values of one interval, summed over the
// pods read in a collection.
type hotSum struct {
	since  time.Time
	k      int // the longest list a pod reported: the fleet's K
	values map[string]*v1alpha1.HotDescriptor
}

// add merges one pod's list; a pod still on an older interval is left out.
func (h *hotSum) add(since time.Time, vs []limiterwire.HotValue) {
	switch {
	case since.Before(h.since):
		return
	case since.After(h.since):
		*h = hotSum{since: since, values: map[string]*v1alpha1.HotDescriptor{}}
	}
	h.k = max(h.k, min(len(vs), maxHottest))
	for _, v := range vs[:min(len(vs), maxHottest)] {
		v.Value = boundMessage(v.Value, maxHotValue)
		if cur := h.values[v.Value]; cur != nil {
			cur.Requests += v.Requests
			cur.Limited += v.Limited
		} else {
			h.values[v.Value] = &v1alpha1.HotDescriptor{Value: v.Value, Requests: v.Requests, Limited: v.Limited}
		}
	}
}

// top is the k most requested values, most first, then by value.
func (h *hotSum) top() []v1alpha1.HotDescriptor {
	out := make([]v1alpha1.HotDescriptor, 0, len(h.values))
	for _, v := range h.values {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b v1alpha1.HotDescriptor) int {
		if a.Requests != b.Requests {
			return cmp.Compare(b.Requests, a.Requests)
		}
		return strings.Compare(a.Value, b.Value)
	})
	return out[:min(len(out), h.k, maxHottest)]
}

// counts are the decision counts the collector sums.
type counts struct {
	allowed, limited, shadowLimited         int64
	failedOpen, failedClosed, localFallback int64
	softLimited, released, penalized        int64
	refused                                 int64
}

func (c counts) add(o counts) counts {
	return counts{c.allowed + o.allowed, c.limited + o.limited, c.shadowLimited + o.shadowLimited,
		c.failedOpen + o.failedOpen, c.failedClosed + o.failedClosed, c.localFallback + o.localFallback,
		c.softLimited + o.softLimited, c.released + o.released, c.penalized + o.penalized, c.refused + o.refused}
}

// since is c minus an earlier reading prev of the same process; a count
// that went down started again from zero (the policy left the pod's
// snapshot and came back), so all of it is new.
func (c counts) since(prev counts) counts {
	d := func(now, before int64) int64 {
		if now < before {
			return now
		}
		return now - before
	}
	return counts{d(c.allowed, prev.allowed), d(c.limited, prev.limited), d(c.shadowLimited, prev.shadowLimited),
		d(c.failedOpen, prev.failedOpen), d(c.failedClosed, prev.failedClosed), d(c.localFallback, prev.localFallback),
		d(c.softLimited, prev.softLimited), d(c.released, prev.released), d(c.penalized, prev.penalized), d(c.refused, prev.refused)}
}

// Collector sums the limiter pods' decision counts into each policy's
// status.enforcement over a rolling window. Every Interval it reads the
// stats endpoint of every fleet's ready pods (those the AckTracker
// tracks), turns the monotonic counts into deltas per process (a new boot
// ID is a new process whose counts are all new, so a restart neither lowers
// nor doubles the totals), and patches status.enforcement of the policies
// whose window sums changed, at most once per MinWrite each. A new leader
// takes up the statuses it finds (see seed). Pods that
// can't be read are skipped, counted in sluice_operator_collector_errors_total
// and named in status.enforcement.unreadPods. It runs on the leader only.
type Collector struct {
	Client client.Client
	Acks   *AckTracker
	// Admin, when set, makes the admin calls, over HTTPS with each fleet's
	// CA (as the operator does); else HTTP, over plain HTTP.
	Admin *AdminClients
	// HTTP makes the admin calls without Admin; nil means a plain client.
	HTTP *http.Client
	// Interval between collections; 0 means DefaultCollectInterval.
	Interval time.Duration
	// Window the counts cover; 0 means DefaultEnforcementWindow.
	Window time.Duration
	// MinWrite is the least time between two status writes of one policy;
	// 0 means DefaultEnforcementMinWrite.
	MinWrite time.Duration
	// Timeout of one pod's answer; 0 means 2s.
	Timeout time.Duration
	// MaxWritesPerSecond bounds the status writes of all policies together
	// (a token bucket with 10s of burst), so that many busy policies don't
	// flood the API server: each is then written in turn, less often than
	// MinWrite. 0 means DefaultEnforcementWritesPerSecond.
	MaxWritesPerSecond float64

	writes   *rate.Limiter                     // the write budget, at collection times
	pods     map[string]*podCounts             // by endpoint
	policies map[types.UID]*policyWindow       // by policy UID
	seedAt   map[types.UID]time.Time           // updatedAt of the status found at start, by policy
	started  bool                              // the statuses found at start are seeded
	since    time.Time                         // when this collector started
	now      func() time.Time                  // for tests of the window
	mu       sync.Mutex                        // guards unread and the answers during a scrape
	unread   map[types.NamespacedName][]string // by fleet, this collection
	hot      map[types.UID]*hotSum             // by policy, this collection
	bounds   map[types.UID]int64               // the largest overshoot bound by policy, this collection
}

// podCounts is the last reading of one limiter process.
type podCounts struct {
	bootID string
	counts map[types.UID]counts
	seen   time.Time
}

// policyWindow holds one policy's deltas inside the window.
type policyWindow struct {
	buckets   []bucket
	lastWrite time.Time
}

type bucket struct {
	at time.Time
	c  counts
}

// NeedLeaderElection: only the leader writes status.
func (c *Collector) NeedLeaderElection() bool { return true }

// Start collects until ctx ends.
func (c *Collector) Start(ctx context.Context) error {
	c.defaults()
	ticker := time.NewTicker(c.Interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		start := time.Now()
		if err := c.collect(ctx); err != nil && ctx.Err() == nil {
			logf.FromContext(ctx).Error(err, "Collecting enforcement stats")
		}
		collectorCycleSeconds.Observe(time.Since(start).Seconds())
	}
}

func (c *Collector) defaults() {
	c.HTTP = noRedirects(c.HTTP)
	if c.Interval <= 0 {
		c.Interval = DefaultCollectInterval
	}
	if c.Window <= 0 {
		c.Window = DefaultEnforcementWindow
	}
	if c.MinWrite <= 0 {
		c.MinWrite = DefaultEnforcementMinWrite
	}
	if c.Timeout <= 0 {
		c.Timeout = defaultCollectTimeout
	}
	if c.MaxWritesPerSecond <= 0 {
		c.MaxWritesPerSecond = DefaultEnforcementWritesPerSecond
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.since = c.now()
	c.writes = rate.NewLimiter(rate.Limit(c.MaxWritesPerSecond), int(c.MaxWritesPerSecond*burstSeconds))
	c.pods = map[string]*podCounts{}
	c.policies = map[types.UID]*policyWindow{}
	c.seedAt = map[types.UID]time.Time{}
}

// seed takes up the counts of the statuses written before this collector
// started (by an earlier leader), so that an operator restart neither
// drops nor recounts them: each status becomes one bucket at its
// updatedAt, and the processes that started before it count on from their
// first reading.
func (c *Collector) seed(ctx context.Context, now time.Time) error {
	var list v1alpha1.RateLimitPolicyList
	if err := c.Client.List(ctx, &list); err != nil {
		return err
	}
	c.seedFrom(now, list.Items)
	return nil
}

// seedFrom seeds the windows from the policies' statuses.
func (c *Collector) seedFrom(now time.Time, items []v1alpha1.RateLimitPolicy) {
	for i := range items {
		e := items[i].Status.Enforcement
		if e == nil || e.UpdatedAt == nil || now.Sub(e.UpdatedAt.Time) >= c.Window {
			continue
		}
		d := func(p *int64) int64 { return ptr.Deref(p, 0) }
		uid := items[i].UID
		c.seedAt[uid] = e.UpdatedAt.Time
		c.policies[uid] = &policyWindow{buckets: []bucket{{at: e.UpdatedAt.Time,
			c: counts{d(e.Allowed), d(e.Limited), d(e.ShadowLimited), d(e.FailedOpen), d(e.FailedClosed), d(e.LocalFallback),
				d(e.SoftLimited), d(e.Released), d(e.Penalized), d(e.Refused)}}}}
	}
	c.started = true
}

// collect runs one collection: read every pod, then write the statuses.
func (c *Collector) collect(ctx context.Context) error {
	now := c.now()
	if !c.started {
		if err := c.seed(ctx, now); err != nil {
			return err
		}
	}
	c.unread = map[types.NamespacedName][]string{}
	c.hot = map[types.UID]*hotSum{}
	c.bounds = map[types.UID]int64{}
	type answer struct {
		addr   string
		stats  *limiterwire.Stats
		served map[string]string
	}
	var answers []answer
	var scrapes errgroup.Group
	scrapes.SetLimit(collectParallelism)
	for fleet, eps := range c.Acks.Endpoints() {
		served := c.Acks.Served(fleet)
		for _, addr := range eps {
			scrapes.Go(func() error {
				st, err := c.read(ctx, fleet, addr)
				collectorScrapes.Inc()
				c.mu.Lock()
				defer c.mu.Unlock()
				if err != nil {
					collectorErrors.WithLabelValues(fleet.Namespace + "/" + fleet.Name).Inc()
					logf.FromContext(ctx).V(1).Info("Limiter pod stats unreadable", "fleet", fleet, "pod", addr, "error", err)
					c.unread[fleet] = append(c.unread[fleet], addr+": "+truncate(err.Error(), 200))
					return nil // the pod is named in the policies' status
				}
				answers = append(answers, answer{addr, st, served})
				return nil
			})
		}
	}
	_ = scrapes.Wait() // every scrape returns nil
	for _, a := range answers {
		c.record(now, a.addr, a.stats, a.served)
	}
	if ctx.Err() != nil {
		return nil
	}
	for addr, p := range c.pods {
		if now.Sub(p.seen) > c.Window {
			delete(c.pods, addr) // gone for longer than the window: nothing left to count twice
		}
	}
	return errors.Join(c.write(ctx, now), c.countFleetConditions(ctx))
}

// countFleetConditions sets sluice_operator_fleet_condition.
func (c *Collector) countFleetConditions(ctx context.Context) error {
	var fleets v1alpha1.LimiterFleetList
	if err := c.Client.List(ctx, &fleets); err != nil {
		return err
	}
	fleetConditions.Reset()
	for i := range fleets.Items {
		f := &fleets.Items[i]
		for _, typ := range []string{v1alpha1.ReadyCondition, v1alpha1.RedisReadyCondition, v1alpha1.SnapshotSyncedCondition, v1alpha1.RedisDataLossCondition} {
			v := 0.0
			if meta.IsStatusConditionTrue(f.Status.Conditions, typ) {
				v = 1
			}
			fleetConditions.WithLabelValues(f.Namespace+"/"+f.Name, typ).Set(v)
		}
	}
	return nil
}

// read asks one pod for its stats, within Timeout.
func (c *Collector) read(ctx context.Context, fleet types.NamespacedName, addr string) (*limiterwire.Stats, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	hc, req, err := adminRequest(ctx, c.Admin, c.HTTP, fleet, addr, limiterwire.StatsPath, "")
	if err != nil {
		return nil, err
	}
	u := req.URL
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", u.Path, resp.Status)
	}
	var out limiterwire.Stats
	if err := readAnswer(resp.Body, &out); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", u.Path, err)
	}
	if out.BootID == "" {
		return nil, fmt.Errorf("%s has no bootID", u.Path)
	}
	return &out, nil
}

// record turns one pod's reading into deltas, added to the policies'
// windows at now. Only the policies the pod's fleet serves count (served,
// by UID): a pod can't write into the status of a policy its fleet does
// not serve.
func (c *Collector) record(now time.Time, addr string, st *limiterwire.Stats, served map[string]string) {
	prev := c.pods[addr]
	next := &podCounts{bootID: st.BootID, counts: make(map[types.UID]counts, len(st.Policies)), seen: now}
	// A process seen for the first time: whatever it counted is new if it
	// started after this collector (no earlier leader can have counted
	// it, however late its first reading comes) or inside the window (a
	// new pod, or a restart), unless the status seeded at start already
	// holds it; an older one (the operator restarted) is only a baseline.
	restarted := prev != nil && prev.bootID != st.BootID
	if restarted {
		prev = nil
	}
	young := st.StartedAt.After(c.since) || now.Sub(st.StartedAt) < c.Window
	for _, p := range st.Policies {
		if _, ok := served[p.UID]; !ok {
			continue
		}
		uid := types.UID(p.UID)
		cur := counts{p.Allowed, p.Limited, p.ShadowLimited, p.FailedOpen, p.FailedClosed, p.LocalFallback, p.SoftLimited, p.Released, p.Penalized, p.Refused}
		next.counts[uid] = cur
		if p.LocalTier != nil {
			if b, ok := c.bounds[uid]; !ok || p.LocalTier.OvershootBound > b {
				c.bounds[uid] = p.LocalTier.OvershootBound
			}
		}
		if p.HottestSince != nil && len(p.Hottest) > 0 {
			h := c.hot[uid]
			if h == nil {
				h = &hotSum{}
				c.hot[uid] = h
			}
			h.add(*p.HottestSince, p.Hottest)
		}
		var d counts
		switch {
		case prev != nil:
			d = cur.since(prev.counts[uid])
		case restarted:
			d = cur
		case young:
			// updatedAt has whole seconds: the status was written
			// within the second after it.
			if at, ok := c.seedAt[uid]; !ok || !st.StartedAt.Before(at.Add(time.Second)) {
				d = cur
			}
		}
		if d == (counts{}) {
			continue
		}
		w := c.policies[uid]
		if w == nil {
			w = &policyWindow{}
			c.policies[uid] = w
		}
		if n := len(w.buckets); n > 0 && w.buckets[n-1].at.Equal(now) {
			w.buckets[n-1].c = w.buckets[n-1].c.add(d)
		} else {
			w.buckets = append(w.buckets, bucket{at: now, c: d})
		}
	}
	c.pods[addr] = next
}

// write applies status.enforcement of the policies whose sums changed.
func (c *Collector) write(ctx context.Context, now time.Time) error {
	var list v1alpha1.RateLimitPolicyList
	// Read-only: no copy of every policy on every collection.
	if err := c.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	countConditions(list.Items)
	return c.writeEach(ctx, now, list.Items, func(ctx context.Context, pol *v1alpha1.RateLimitPolicy, e *v1alpha1.EnforcementStatus) error {
		return applyEnforcement(ctx, c.Client, pol, e)
	})
}

// writeEach computes each policy's status.enforcement at now and writes,
// with apply, those that changed, within MinWrite and the write budget.
func (c *Collector) writeEach(ctx context.Context, now time.Time, items []v1alpha1.RateLimitPolicy,
	apply func(context.Context, *v1alpha1.RateLimitPolicy, *v1alpha1.EnforcementStatus) error) error {
	type change struct {
		pol  *v1alpha1.RateLimitPolicy
		w    *policyWindow
		next *v1alpha1.EnforcementStatus
	}
	var changes []change
	seen := make(map[types.UID]bool, len(items))
	for i := range items {
		pol := &items[i]
		seen[pol.UID] = true
		w := c.policies[pol.UID]
		var sum counts
		if w != nil {
			cut := 0
			for cut < len(w.buckets) && now.Sub(w.buckets[cut].at) >= c.Window {
				cut++
			}
			w.buckets = w.buckets[cut:]
			for _, b := range w.buckets {
				sum = sum.add(b.c)
			}
		}
		unread := c.unreadFor(pol)
		if sum == (counts{}) && len(unread) == 0 && pol.Status.Enforcement == nil {
			continue // no decision yet: nothing to say, and no write
		}
		next := &v1alpha1.EnforcementStatus{
			Allowed: &sum.allowed, Limited: &sum.limited, ShadowLimited: &sum.shadowLimited,
			FailedOpen: &sum.failedOpen, FailedClosed: &sum.failedClosed, LocalFallback: &sum.localFallback,
			Window: &metav1.Duration{Duration: c.Window}, UnreadPods: unread,
		}
		if pol.Spec.IsSoft() || sum.softLimited > 0 {
			// Only soft policies mark requests: others don't show the count.
			next.SoftLimited = &sum.softLimited
		}
		if _, holds := pol.Spec.LeaseEntry(); holds {
			// Holdings taken in the window and not ended in it.
			inFlight := max(0, sum.allowed-sum.released)
			next.Released, next.InFlight = &sum.released, &inFlight
		}
		if sum.penalized > 0 || pol.Spec.Penalty != nil {
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
		changes = append(changes, change{pol, w, next})
	}
	for uid := range c.policies {
		if !seen[uid] {
			delete(c.policies, uid) // the policy is gone
		}
	}

	// The write budget: the least recently written first, so that every
	// policy is written in turn when more change than the budget allows.
	slices.SortStableFunc(changes, func(a, b change) int { return a.w.lastWrite.Compare(b.w.lastWrite) })
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
func (c *Collector) unreadFor(pol *v1alpha1.RateLimitPolicy) []string {
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
func countConditions(items []v1alpha1.RateLimitPolicy) {
	type key struct{ typ, status string }
	n := map[key]int{}
	for _, t := range []string{v1alpha1.AcceptedCondition, v1alpha1.EnforcedCondition, v1alpha1.DegradedCondition} {
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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
