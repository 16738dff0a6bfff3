// Package service is the limiter's core, and knows no protocol: it
// validates a Request, matches each of its descriptors against the loaded
// snapshot, decides every matching policy against the store, and answers a
// Response of Decisions (a refused request's among them: a denial with a
// reason), or, for a request that selects no policy, an error that matches
// ErrInvalidArgument. The
// Envoy RLS and HTTP adapters in limiter/server turn requests into a
// Request and a Response into their wire answer.
//
// One file per concern:
//
//   - decide.go: Decide and Check, and which decision is reported
//   - validate.go and errors.go: what a request may carry, typed errors
//   - refuse.go: what the client sent that the service won't count,
//     answered as a denial with a reason
//   - idempotency.go: idempotency keys and their scope
//   - enforcement.go: shadow policies and the kill switch
//   - failure.go: each policy's failure mode, a decorator around the store
//   - budget.go and denials.go: the tenant budgets, and the store's last
//     denials that decide past them
//   - localtier.go: two-tier mode, through the injected local tier
//   - concurrent.go: a request's descriptors decided concurrently, so that
//     their store calls share a round trip
//   - stats.go, metrics.go and topk.go: counts, Prometheus metrics and the
//     hottest descriptor values
//   - status.go: the status peek
//
// The service starts no long-lived goroutine: the store, the local tier,
// the fallback store of failureMode Local and the top-K clock are its
// caller's (see limiter/app), which starts and stops them. A request's
// descriptors may be decided on goroutines of their own, all ended before
// it is answered (concurrent.go).
package service

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/regions"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/localtier"
)

// Defaults of Options.
const (
	DefaultMaxCost = 1_000_000
	// DefaultIdempotencyEntry is the descriptor entry key that carries an
	// idempotency key over RLS.
	DefaultIdempotencyEntry = "idempotency_key"
	// DefaultAcceptEntry is the descriptor entry key that carries a
	// client's Accept header over RLS.
	DefaultAcceptEntry = "accept"
	// DegradedWindow is how long after its last fallback decision a policy
	// still counts as degraded.
	DegradedWindow = 10 * time.Second
	shadowLogEvery = time.Second
)

// Options configure a Service.
type Options struct {
	// Registerer receives the service's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Logger logs shadow denials and store errors; nil means slog.Default().
	Logger *slog.Logger
	// MaxCost bounds hits_addend; 0 means DefaultMaxCost.
	MaxCost int64
	// MaxOwnLimit, when its unit is set, bounds a request's own limit
	// (an RLS descriptor's limit field) in a domain that decides own
	// limits (compiled.Domain.DecidesOwnLimits: an ERL domain); without
	// it, a request's own limit may not pass the limit its descriptor
	// matches (override.go).
	MaxOwnLimit compiled.UnitRate
	// HitStatsKeys bounds the keys of the hit statistics built from
	// requests' values (detailed_metric, value_to_metric); 0 means
	// DefaultHitStatsKeys (hitstats.go).
	HitStatsKeys int
	// IdempotencyEntry is the descriptor entry key whose value is an
	// idempotency key. The entry names the request, not what it asks for:
	// it is left out of matching and counter keys. Empty means
	// DefaultIdempotencyEntry.
	IdempotencyEntry string
	// AcceptEntry is the descriptor entry key that carries the client's
	// Accept header over RLS: a denial whose entry accepts problem details
	// gets them as its body. Empty means DefaultAcceptEntry.
	AcceptEntry string
	// IdempotencyTTL is how long a request's first decision is replayed to
	// retries with its idempotency key; 0 means store.DefaultIdempotencyTTL.
	IdempotencyTTL time.Duration
	// IdempotencyMaxReplays is how many times a first decision is replayed
	// to retries with its idempotency key; 0 means
	// store.DefaultIdempotencyMaxReplays.
	IdempotencyMaxReplays int64
	// IdempotencyMaxRecords bounds the live idempotency records of one
	// counter; 0 means store.DefaultIdempotencyMaxRecords.
	IdempotencyMaxRecords int64
	// ReadyPods is the number of ready limiter pods that share every
	// limit; failureMode Local enforces limit/ReadyPods in this pod's memory
	// while the store can't answer. 0 means 1. SetReadyPods changes it.
	ReadyPods int
	// EnforcementDisabled starts with the kill switch on (see
	// SetEnforcement).
	EnforcementDisabled bool
	// DisablePolicyStats turns off the per-policy decision counts: those
	// of PolicyStats (the admin stats endpoint) and sluice_decisions_total
	// alike. It exists to measure what counting costs.
	DisablePolicyStats bool
	// Top turns on each policy's hottest descriptor values (off by default:
	// they may be personal data). It needs the policy stats.
	Top TopOptions
	// TopClock is the clock of the hottest-values sketches on the request
	// path, such as a CoarseClock's Now; nil means time.Now.
	TopClock func() time.Time

	// LocalTier is two-tier mode in front of the store, for the policies
	// with spec.localTier enabled; the service installs their settings on
	// each Swap. It must front the same store. nil decides those policies
	// against the store exactly.
	LocalTier *localtier.Tier
	// Regions shares the policies of scope Global with the fleet's other
	// regions (limiter/regions); the service installs them on each Swap.
	// It must front the same store. nil counts Global policies in the
	// store, as a region alone.
	Regions *regions.Regions
	// Budgets are the per-namespace budgets of a snapshot that carries
	// none (a policy file; an operator's snapshot carries the fleet's).
	// nil enforces none.
	Budgets *compiled.Budgets

	// Tracing makes each policy's call to the store a child span of the
	// request's span (limiter/tracing), when that span records. Off, the
	// request path never looks for a span.
	Tracing bool

	// Fallback holds this pod's own counters, where failureMode Local
	// enforces its share of a limit while the store can't answer (a memory
	// store). nil leaves Local nothing to count on: it allows, as Open does.
	Fallback store.Store
}

// Service answers rate-limit requests. It is safe for concurrent use.
type Service struct {
	store store.Store
	tier  *localtier.Tier // nil: no two-tier mode
	// gathers: store gathers a request's calls (concurrent.go).
	gathers  bool
	fallback store.Store // nil: failureMode Local allows
	opts     Options
	log      *slog.Logger
	metrics  *metrics
	// budgetMetrics count what the tenant budgets refused (budget.go).
	budgetMetrics *budgetMetrics
	// denials are the store's last denials of the budgeted namespaces'
	// keys (denials.go), made by the first Swap with budgets; nil before.
	denials *denials
	// hitStats count the hits of the policies with HitStats (hitstats.go).
	hitStats  *hitStats
	loaded    atomic.Pointer[loaded]
	scratch   sync.Pool
	plans     sync.Pool // of *plan
	readyPods atomic.Int64
	enforce   atomic.Bool // this pod's switch (--enforcement)
	swapMu    sync.Mutex  // serialises Swaps: each carries the last one's stats over
	clock     func() time.Time
	topClock  func() time.Time // the hottest-values sketches' clock on the request path
}

// loaded is a snapshot with its per-policy state, swapped as one.
type loaded struct {
	snap     *compiled.Snapshot
	policies map[*compiled.Policy]*policyState
	stats    map[string]*policyStats // by statsKey, carried over by Swap
	// budgetCfg are the budgets in force: the snapshot's, else
	// Options.Budgets; nil for none.
	budgetCfg *compiled.Budgets
	// budgets are the store budgets by namespace, carried over by Swap;
	// nil without budgetCfg.
	budgets map[string]*storeBudget
	// minMatchBudget is the least maxPoliciesPerRequest of any namespace.
	minMatchBudget int32
}

// policyState is one loaded policy's resolved state, so the request path
// never looks anything up by name.
type policyState struct {
	// store is the policy's way to its counters (the store, or the local
	// tier in front of it) with its failure mode around it.
	store *failover
	// stats count the decisions, for sluice_decisions_total and the admin
	// stats endpoint alike; nil with Options.DisablePolicyStats.
	stats         *policyStats
	lastShadowLog atomic.Int64
	// levels count the decisions of each level of spec.priority; nil
	// without it or without stats.
	levels []*levelStats
}

// scratch is per-request working memory, pooled so a decision on a known key
// allocates nothing.
type scratch struct {
	kb      store.KeyBuilder
	key     store.Key // the counter of the last decide
	level   int       // the priority level of the last decide, -1 for none
	matches []*compiled.Policy
	entries []compiled.Entry // entries without the idempotency entry
	// pre is what the store budget said, in advance, of each decision of
	// a step decided concurrently, by match (concurrent.go); empty
	// elsewhere: each decision takes from the budget when it is made.
	pre []budgetPass
}

// New returns a Service deciding against st. It answers every request OK
// (nothing matches) until Swap installs a snapshot.
func New(st store.Store, opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxCost <= 0 {
		opts.MaxCost = DefaultMaxCost
	}
	if opts.IdempotencyEntry == "" {
		opts.IdempotencyEntry = DefaultIdempotencyEntry
	}
	if opts.AcceptEntry == "" {
		opts.AcceptEntry = DefaultAcceptEntry
	}
	if opts.IdempotencyTTL <= 0 {
		opts.IdempotencyTTL = store.DefaultIdempotencyTTL
	}
	if opts.IdempotencyMaxReplays <= 0 {
		opts.IdempotencyMaxReplays = store.DefaultIdempotencyMaxReplays
	}
	if opts.IdempotencyMaxRecords <= 0 {
		opts.IdempotencyMaxRecords = store.DefaultIdempotencyMaxRecords
	}
	s := &Service{
		store:         st,
		tier:          opts.LocalTier,
		fallback:      opts.Fallback,
		opts:          opts,
		log:           opts.Logger,
		metrics:       newMetrics(opts.Registerer),
		budgetMetrics: newBudgetMetrics(opts.Registerer),
		hitStats:      newHitStats(opts.HitStatsKeys),
		clock:         time.Now,
		topClock:      opts.TopClock,
	}
	_, s.gathers = st.(store.Gatherer)
	if s.topClock == nil {
		s.topClock = time.Now
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(decisionsCollector{s})
	}
	s.scratch.New = func() any { return &scratch{matches: make([]*compiled.Policy, 0, 8)} }
	s.plans.New = func() any { return &plan{matches: make([]*compiled.Policy, 0, 8)} }
	s.loaded.Store(&loaded{})
	s.SetReadyPods(opts.ReadyPods)
	s.SetEnforcement(!opts.EnforcementDisabled)
	return s
}

// SetReadyPods sets how many ready limiter pods share every limit: while
// the store can't answer, a failureMode Local policy enforces limit/n (at
// least 1) in this pod's memory. n below 1 means 1, as for a standalone
// limiter. Safe to call at any time.
func (s *Service) SetReadyPods(n int) {
	s.readyPods.Store(int64(max(1, n)))
	s.metrics.readyPods.Set(float64(max(1, n)))
}

// ReadyPods is the divisor of failureMode Local.
func (s *Service) ReadyPods() int { return int(s.readyPods.Load()) }

// Swap installs snap atomically: requests already running finish on the
// snapshot they started with.
func (s *Service) Swap(snap *compiled.Snapshot) {
	s.swapMu.Lock()
	defer s.swapMu.Unlock()
	l := &loaded{snap: snap, policies: make(map[*compiled.Policy]*policyState, len(snap.Policies)),
		stats: make(map[string]*policyStats, len(snap.Policies))}
	prev := s.loaded.Load()
	prevStats := prev.stats
	l.budgetCfg = snap.Budgets
	if l.budgetCfg == nil {
		l.budgetCfg = s.opts.Budgets
	}
	l.budgets = s.storeBudgets(snap, l.budgetCfg, prev.budgets)
	if l.budgets != nil && s.denials == nil {
		s.denials = newDenials()
	}
	if b := l.budgetCfg; b != nil {
		l.minMatchBudget = b.Default.MaxPoliciesPerRequest
		for _, nb := range b.Namespaces {
			l.minMatchBudget = min(l.minMatchBudget, nb.MaxPoliciesPerRequest)
		}
	}
	tiers := s.swapLocalTier(snap)
	s.swapRegions(snap)
	for _, p := range snap.Policies {
		ps := &policyState{stats: s.statsFor(prevStats, p)}
		ps.levels = ps.stats.levelsFor(p)
		if ps.stats != nil {
			l.stats[statsKey(p)] = ps.stats
		}
		ps.store = s.newFailover(p, s.policyStore(p, tiers[p.ID()]), ps.stats)
		if b := l.budgets[p.Namespace]; b != nil {
			ps.store.budget, ps.store.denials = b, s.denials
		}
		l.policies[p] = ps
	}
	s.warnIdempotencyDescriptors(snap)
	s.loaded.Swap(l)
	s.metrics.snapshotPolicies.Set(float64(len(snap.Policies)))
	s.updateEnforcementGauge()
}

// Snapshot returns the installed snapshot, or nil before the first Swap.
func (s *Service) Snapshot() *compiled.Snapshot { return s.loaded.Load().snap }
