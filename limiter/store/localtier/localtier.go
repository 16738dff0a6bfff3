// Package localtier is two-tier mode (a policy's spec.localTier): a pod
// takes a grant, a chunk of units, from the shared counter in one call
// (grant.lua on Redis), spends it locally with no store call, and gives
// back what it did not spend when the grant runs out or expires. Denials the store confirmed
// are answered locally until the counter can admit again; a pod that finds
// a bucket exhausted waits, briefly, for its share of the refill before it
// asks again (pace).
//
// # The overshoot bound
//
// Granted units leave the counter before they are spent, so granting never
// lets the fleet spend a unit the counter did not hand out. What it changes
// is when a unit counts:
//
//   - Window algorithms (FixedWindow, SlidingWindow) count a unit in the
//     window it is granted in. A grant never outlives that window (its
//     lifetime is capped at the window's end, measured from when the call
//     was sent, so it ends no later than the window does on Redis's
//     clock), and a credit to a window that has passed is dropped
//     (FixedWindow) or comes off that window's weight (SlidingWindow). So
//     every unit spent in a window was counted in it, and no window
//     admits more than the exact algorithm would: the bound is 0.
//   - Bucket algorithms (TokenBucket, GCRA) refill continuously. Let O(t)
//     be the units that pods hold unspent at t, B(t) ≤ burst the bucket.
//     Over any interval [a, b] the fleet spends at most what it held at a
//     plus what it was granted since, and it can be granted at most B(a) plus the
//     refill plus the credits, which are units it held and did not spend:
//     spent ≤ B(a) + O(a) + rate·(b−a) ≤ burst + rate·(b−a) + O(a). The
//     exact bucket admits burst + rate·(b−a): the overshoot is at most
//     O(a), the units held outside the bucket while it refilled to full.
//
// Every pod registers the reserve it holds beside the counter, in the same
// slot, until its grant ends, and grant.lua grants a reserve only while the
// live reserves of all pods stay within the bound: O(t) ≤ bound at all
// times. maxOvershoot is that bound (pods × chunk, where the chunk is a
// grant's units beyond the request's own cost; a chunk of 1 unit per
// request is exact). Without maxOvershoot each pod holds at most
// DefaultPodShare of the capacity, and the bound is pods × that.
//
// A pod that dies loses the reserve it held: those units are never spent
// and never credited, so the fleet admits less, never more. A restarted
// pod is a new pod (a new id) and cannot credit its predecessor's grant
// twice.
//
// The memory store is exact and in-process: over it this tier passes every
// decision through, unchanged.
package localtier

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

const (
	shardCount = 64
	// DefaultMaxKeys bounds the keys a tier tracks; keys beyond it are
	// decided exactly by the store.
	DefaultMaxKeys = 100_000
	// DefaultPodShare is the most of a limit's capacity one pod may hold
	// when maxOvershoot is not set: 1%.
	DefaultPodShare = 0.01
	// idleAfter is how long a key without a grant or a cached denial is
	// kept for its rate estimate.
	idleAfter = 10 * time.Second
	// creditTimeout bounds a background credit call.
	creditTimeout = time.Second
)

// Options configure a Tier.
type Options struct {
	// Pod names this process in the pods' registrations; empty means a
	// random id. It must be unique per process.
	Pod string
	// MaxKeys bounds the keys tracked; 0 means DefaultMaxKeys.
	MaxKeys int
	// SweepInterval is how often expired grants are credited back and idle
	// keys dropped; 0 means 100ms, negative disables the sweeper (tests).
	SweepInterval time.Duration
	// Logger logs failed credits; nil discards.
	Logger *slog.Logger
}

// Tier is the local tier in front of a store. It is safe for concurrent
// use.
type Tier struct {
	st       store.Store
	granter  store.Granter // nil: the store does not grant; pass through
	pod      string
	start    time.Time
	perShard int
	log      *slog.Logger
	shards   [shardCount]shard
	stop     chan struct{}
	done     chan struct{}
	closing  sync.Once
	policies atomic.Pointer[[]*Policy]
	// grants counts grants installed with units: the sweeper scans the
	// keys after one (see sweepLoop).
	grants atomic.Int64

	mu       sync.Mutex
	counters map[string]*counters // by policy ID, kept across Swaps
}

type shard struct {
	mu sync.RWMutex
	m  map[store.Key]*entry
}

// New returns a tier in front of st. Close stops its sweeper and credits
// back what it holds; the store stays the caller's.
func New(st store.Store, opts Options) *Tier {
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = DefaultMaxKeys
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = 100 * time.Millisecond
	}
	if opts.Pod == "" {
		opts.Pod = randomID()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	t := &Tier{st: st, pod: opts.Pod, start: time.Now(), perShard: max(1, opts.MaxKeys/shardCount),
		log: opts.Logger, stop: make(chan struct{}), done: make(chan struct{}), counters: map[string]*counters{}}
	t.granter, _ = st.(store.Granter)
	for i := range t.shards {
		t.shards[i].m = make(map[store.Key]*entry)
	}
	t.policies.Store(&[]*Policy{})
	if opts.SweepInterval > 0 && t.granter != nil {
		go t.sweepLoop(opts.SweepInterval)
	} else {
		close(t.done)
	}
	return t
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// Pod is this tier's pod id.
func (t *Tier) Pod() string { return t.pod }

// Granting reports whether the store grants; false means every decision
// passes through to it exactly (the memory store).
func (t *Tier) Granting() bool { return t.granter != nil }

// now is monotonic nanoseconds since the tier started.
func (t *Tier) now() int64 { return int64(time.Since(t.start)) }

// PolicyConfig is one policy's two-tier settings.
type PolicyConfig struct {
	// ID names the policy (namespace/name) in stats and metrics.
	ID    string
	Limit algo.Limit
	// TTL is how long a grant lives (spec.localTier.ttl, defaulted).
	TTL time.Duration
	// Bound is the overshoot spec.localTier.maxOvershoot allows, in units,
	// or -1 when it is not set.
	Bound int64
}

// Policy is a policy in two-tier mode, as installed by Swap.
type Policy struct {
	ID    string
	Limit algo.Limit
	TTL   time.Duration
	// Bound is the most units all pods may hold at once, or -1 when
	// maxOvershoot is not set and only PodCap bounds each pod.
	Bound  int64
	PodCap int64
	c      *counters
}

// counters are one policy's two-tier counts since the process started.
type counters struct {
	local, grants, cachedDenials, exact atomic.Int64
	granted, credited                   atomic.Int64
	// pods is the most pods seen holding grants on one of the policy's
	// keys, over this sweep period and the last.
	pods, podsLast atomic.Int64
}

// NewPolicy compiles cfg: the bound from maxOvershoot (a count, or a
// percentage of rate.limit), else a per-pod cap of DefaultPodShare of the
// capacity.
func NewPolicy(cfg PolicyConfig) *Policy {
	p := &Policy{ID: cfg.ID, Limit: cfg.Limit, TTL: cfg.TTL, Bound: -1}
	if cfg.Bound >= 0 {
		p.Bound, p.PodCap = cfg.Bound, cfg.Bound
	} else {
		p.PodCap = int64(math.Floor(float64(cfg.Limit.Capacity()) * DefaultPodShare))
	}
	return p
}

// Swap installs the policies in two-tier mode, keyed by ID; a policy keeps
// its counts across Swaps while its ID stays.
func (t *Tier) Swap(cfgs []PolicyConfig) map[string]*Policy {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]*Policy, len(cfgs))
	list := make([]*Policy, 0, len(cfgs))
	kept := make(map[string]*counters, len(cfgs))
	for _, cfg := range cfgs {
		p := NewPolicy(cfg)
		if p.c = t.counters[p.ID]; p.c == nil {
			p.c = &counters{}
		}
		kept[p.ID] = p.c
		out[p.ID] = p
		list = append(list, p)
	}
	t.counters = kept
	t.policies.Store(&list)
	return out
}

// Stats are one policy's two-tier figures.
type Stats struct {
	ID string
	// OvershootBound is the most units the fleet may admit above the exact
	// algorithm's answer over any interval (see the package comment).
	OvershootBound int64
	// Pods is the most pods seen holding grants on one of the policy's keys lately.
	Pods int64
	// Local decisions spent granted units; Grants called the store (each
	// one decision); CachedDenials were answered from the over-limit
	// cache; Exact passed through (peeks, idempotency keys, a full tier,
	// and cold keys, whose call would grant nothing).
	Local, Grants, CachedDenials, Exact int64
	// Granted and Credited count units taken beyond requests' own cost, and
	// units given back.
	Granted, Credited int64
}

// Stats returns the installed policies' figures, in Swap's order. Over a
// store that does not grant every decision is exact: the bound is 0.
func (t *Tier) Stats() []Stats {
	ps := *t.policies.Load()
	out := make([]Stats, len(ps))
	for i, p := range ps {
		out[i] = p.Stats()
		if t.granter == nil {
			out[i].OvershootBound = 0
		}
	}
	return out
}

// Stats returns p's figures.
func (p *Policy) Stats() Stats {
	pods := max(1, p.c.pods.Load(), p.c.podsLast.Load())
	return Stats{ID: p.ID, OvershootBound: p.OvershootBound(pods), Pods: pods,
		Local: p.c.local.Load(), Grants: p.c.grants.Load(), CachedDenials: p.c.cachedDenials.Load(), Exact: p.c.exact.Load(),
		Granted: p.c.granted.Load(), Credited: p.c.credited.Load()}
}

// OvershootBound is the bound for pods pods: 0 for window algorithms, else
// maxOvershoot, or pods × PodCap without it.
func (p *Policy) OvershootBound(pods int64) int64 {
	switch {
	case p.Limit.Algorithm == algo.FixedWindow || p.Limit.Algorithm == algo.SlidingWindow:
		return 0
	case p.Bound >= 0:
		return p.Bound
	}
	return pods * p.PodCap
}
