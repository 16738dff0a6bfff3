package observe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1beta1"
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
	// WriteEnforcement writes a policy's status.enforcement, the
	// collector's alone (controllers' applyEnforcement, a server-side
	// apply under EnforcementFieldOwner). Required.
	WriteEnforcement func(context.Context, *v1beta1.RateLimitPolicy, *v1beta1.EnforcementStatus) error
	Acks             *AckTracker
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
	// WriteRegions writes a fleet's status.regions and RegionsReachable
	// condition, the collector's alone (controllers' applyFleetRegions, a
	// server-side apply under EnforcementFieldOwner); nil regions and
	// condition remove them. nil skips the regions pass.
	WriteRegions func(context.Context, *v1beta1.LimiterFleet, []v1beta1.RegionStatus, *metav1.Condition) error
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

	regionWrites map[types.NamespacedName]regionsWrite // the regions pass's last write, by fleet
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
	var list v1beta1.RateLimitPolicyList
	if err := c.Client.List(ctx, &list); err != nil {
		return err
	}
	c.seedFrom(now, list.Items)
	return nil
}

// seedFrom seeds the windows from the policies' statuses.
func (c *Collector) seedFrom(now time.Time, items []v1beta1.RateLimitPolicy) {
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
	return errors.Join(c.write(ctx, now), c.collectRegions(ctx, now), c.countFleetConditions(ctx))
}

// countFleetConditions sets sluice_operator_fleet_condition.
func (c *Collector) countFleetConditions(ctx context.Context) error {
	var fleets v1beta1.LimiterFleetList
	if err := c.Client.List(ctx, &fleets); err != nil {
		return err
	}
	fleetConditions.Reset()
	for i := range fleets.Items {
		f := &fleets.Items[i]
		for _, typ := range []string{v1beta1.ReadyCondition, v1beta1.RedisReadyCondition, v1beta1.SnapshotSyncedCondition, v1beta1.RedisDataLossCondition, v1beta1.AdminTLSReadyCondition} {
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
		if p.Regions != nil {
			if b, ok := c.bounds[uid]; !ok || p.Regions.Bound > b {
				c.bounds[uid] = p.Regions.Bound
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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
