// Package service is the limiter's protocol-neutral core: it validates a
// rate-limit request, matches it against the loaded snapshot, decides every
// matching policy against the store, applies shadow mode, the kill switch,
// idempotency keys and failure modes, and maps the outcome to Envoy's RLS v3
// response with rate-limit headers. The gRPC server and the HTTP API both
// call Decide (ShouldRateLimit for gRPC).
package service

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/localtier"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

// Request bounds. Larger requests are answered InvalidArgument.
const (
	MaxDescriptors   = 16
	MaxEntries       = 16
	MaxEntryLength   = 1024
	DefaultMaxCost   = 1_000_000
	defaultJitter    = 0.1
	shadowLogEvery   = time.Second
	localFallbackMax = 100_000
	// MaxIdempotencyKeyLength bounds an idempotency key, from the
	// Idempotency-Key header or the descriptor entry.
	MaxIdempotencyKeyLength = 256
	// DefaultIdempotencyEntry is the descriptor entry key that carries an
	// idempotency key over RLS.
	DefaultIdempotencyEntry = "idempotency_key"
	// DegradedWindow is how long after its last fallback decision a policy
	// still counts as degraded.
	DegradedWindow = 10 * time.Second
)

// Options configure a Service.
type Options struct {
	// Registerer receives the service's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Logger logs shadow denials and store errors; nil means slog.Default().
	Logger *slog.Logger
	// MaxCost bounds hits_addend; 0 means DefaultMaxCost.
	MaxCost int64
	// RetryAfterJitter adds up to this fraction of Retry-After, in whole
	// seconds, so that denied clients don't come back in lockstep. 0 means
	// 0.1; negative disables jitter.
	RetryAfterJitter float64
	// IdempotencyEntry is the descriptor entry key whose value is an
	// idempotency key. The entry names the request, not what it asks for:
	// it is left out of matching and counter keys. Empty means
	// DefaultIdempotencyEntry.
	IdempotencyEntry string
	// IdempotencyTTL is how long a request's first decision is replayed to
	// retries with its idempotency key; 0 means store.DefaultIdempotencyTTL.
	IdempotencyTTL time.Duration
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
}

// Service answers rate-limit requests. It is safe for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	store     store.Store
	local     *memory.Store // failureMode Local: this pod's own counters
	opts      Options
	log       *slog.Logger
	metrics   *metrics
	loaded    atomic.Pointer[loaded]
	scratch   sync.Pool
	readyPods atomic.Int64
	enforce   atomic.Bool // this pod's switch (--enforcement)
	swapMu    sync.Mutex  // serialises Swaps: each carries the last one's stats over
	clock     func() time.Time
	topClock  func() time.Time // the hottest-values sketches' clock on the request path
	coarse    *coarseClock     // behind topClock, with Options.Top

	tier *localtier.Tier // spec.localTier policies decide through it
}

// loaded is a snapshot with its per-policy metrics, swapped as one.
type loaded struct {
	snap     *config.Snapshot
	counters map[*config.Policy]*policyCounters
	stats    map[string]*policyStats // by statsKey, carried over by Swap
}

// scratch is per-request working memory, pooled so a decision on a known key
// allocates nothing.
type scratch struct {
	kb      store.KeyBuilder
	key     store.Key // the counter of the last decide
	matches []*config.Policy
	entries []*rlv3.RateLimitDescriptor_Entry // entries without the idempotency entry
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
	if opts.RetryAfterJitter == 0 {
		opts.RetryAfterJitter = defaultJitter
	}
	if opts.IdempotencyEntry == "" {
		opts.IdempotencyEntry = DefaultIdempotencyEntry
	}
	if opts.IdempotencyTTL <= 0 {
		opts.IdempotencyTTL = store.DefaultIdempotencyTTL
	}
	s := &Service{
		store:   st,
		tier:    localtier.New(st, localtier.Options{Logger: opts.Logger}),
		local:   memory.New(memory.Options{MaxKeys: localFallbackMax}),
		opts:    opts,
		log:     opts.Logger,
		metrics: newMetrics(opts.Registerer),
		clock:   time.Now,
	}
	s.topClock = s.clock
	if opts.Top.K > 0 {
		s.coarse = startCoarseClock()
		s.topClock = s.coarse.Now
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(decisionsCollector{s}, localtier.NewCollector(s.tier))
	}
	s.scratch.New = func() any { return &scratch{matches: make([]*config.Policy, 0, 8)} }
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

// SetEnforcement is this pod's kill switch (--enforcement). With it off, or
// with the loaded snapshot's Enforcement Disabled (the fleet's switch),
// every request is allowed: decisions are still made and counted, and
// would-be denials are counted as shadow_limited. It takes effect for the
// next request, without a restart.
func (s *Service) SetEnforcement(enabled bool) {
	s.enforce.Store(enabled)
	s.updateEnforcementGauge()
}

// Enforcing reports whether denials are enforced: this pod's switch is on
// and the loaded snapshot does not disable enforcement.
func (s *Service) Enforcing() bool { return s.enforcing(s.loaded.Load()) }

func (s *Service) enforcing(l *loaded) bool {
	return s.enforce.Load() && (l.snap == nil || l.snap.Enforcement != config.EnforcementDisabled)
}

// EnforcementDetail says whether enforcement is on and, when off, which
// switch turned it off.
func (s *Service) EnforcementDetail() string {
	l := s.loaded.Load()
	switch {
	case !s.enforce.Load():
		return "disabled on this pod (--enforcement=disabled): every request allowed, would-be denials counted as shadow_limited"
	case l.snap != nil && l.snap.Enforcement == config.EnforcementDisabled:
		return "disabled by the snapshot (the fleet's kill switch): every request allowed, would-be denials counted as shadow_limited"
	}
	return "enabled"
}

func (s *Service) updateEnforcementGauge() {
	v := 0.0
	if s.Enforcing() {
		v = 1
	}
	s.metrics.enforcement.Set(v)
}

// Swap installs snap atomically: requests already running finish on the
// snapshot they started with.
func (s *Service) Swap(snap *config.Snapshot) {
	s.swapMu.Lock()
	defer s.swapMu.Unlock()
	l := &loaded{snap: snap, counters: make(map[*config.Policy]*policyCounters, len(snap.Policies)),
		stats: make(map[string]*policyStats, len(snap.Policies))}
	prevStats := s.loaded.Load().stats
	tiers := s.tier.Swap(localTierConfigs(snap))
	for _, p := range snap.Policies {
		c := &policyCounters{tier: tiers[p.ID()]}
		if c.stats = s.statsFor(prevStats, p); c.stats != nil {
			l.stats[statsKey(p)] = c.stats
		}
		l.counters[p] = c
	}
	for _, p := range snap.Policies {
		for _, d := range p.Descriptors {
			if d.Key == s.opts.IdempotencyEntry {
				s.log.Warn("Policy matches on the idempotency descriptor entry, which is left out of matching: it will never match",
					"policy", p.ID(), "entry", d.Key)
			}
		}
	}
	s.loaded.Swap(l)
	s.metrics.snapshotPolicies.Set(float64(len(snap.Policies)))
	s.updateEnforcementGauge()
}

// Snapshot returns the installed snapshot, or nil before the first Swap.
func (s *Service) Snapshot() *config.Snapshot { return s.loaded.Load().snap }

// Close credits back the local tier's leases and releases the fallback
// store. The main store belongs to the caller.
func (s *Service) Close() error {
	s.coarse.Stop()
	_ = s.tier.Close()
	return s.local.Close()
}

// Decision is the outcome of one request descriptor.
type Decision struct {
	// Policy is the policy reported to the client: the most restrictive of
	// the enforcing (non-shadow) policies that matched, or nil when none did.
	Policy *config.Policy
	// Result is that policy's decision.
	Result algo.Result
	// OverLimit is true when an enforcing (non-shadow) policy denied.
	OverLimit bool
	// Reason explains a decision that did not come from the store: the
	// store could not answer, and the policy's failure mode decided.
	Reason string
}

// Check decides one descriptor: every policy of the domain that entries
// match spends cost (denials spend nothing). It never fails: store errors
// are resolved by each policy's failure mode.
func (s *Service) Check(ctx context.Context, domain string, entries []*rlv3.RateLimitDescriptor_Entry, cost int64) Decision {
	return s.check(ctx, s.loaded.Load(), domain, entries, cost, "")
}

// check is Check with a request's idempotency key (empty for none). An
// idempotency entry in entries (Options.IdempotencyEntry) wins over it, and
// is left out of matching and counter keys.
func (s *Service) check(ctx context.Context, l *loaded, domain string, entries []*rlv3.RateLimitDescriptor_Entry, cost int64, idem string) Decision {
	d := l.snap.Domain(domain)
	if d == nil {
		return Decision{}
	}
	sc := s.scratch.Get().(*scratch)
	if i := s.idempotencyEntry(entries); i >= 0 {
		idem = entries[i].GetValue()
		sc.entries = append(append(sc.entries[:0], entries[:i]...), entries[i+1:]...)
		entries = sc.entries
	}
	sc.matches = d.AppendMatches(sc.matches[:0], entries)
	var out Decision
	// The kill switch (this pod's or the fleet's) turns every policy into
	// a shadow policy.
	allShadow := !s.enforcing(l)
	for _, p := range sc.matches {
		c := l.counters[p]
		dec := s.decide(ctx, sc, p, c, domain, entries, cost, idem)
		c.stats.count(&dec, p.Limit, p.Shadow || allShadow)
		if s.opts.Top.K > 0 {
			c.stats.countTop(s.topClock(), sc.key, p, entries, &dec)
		}
		if p.Shadow || allShadow {
			if !dec.Result.Allowed {
				s.logShadow(c, p, domain)
			}
			continue
		}
		dec.OverLimit = !dec.Result.Allowed
		if moreRestrictive(dec, out) {
			out = dec
		}
	}
	for i := range sc.matches {
		sc.matches[i] = nil
	}
	for i := range sc.entries {
		sc.entries[i] = nil
	}
	sc.entries = sc.entries[:0]
	s.scratch.Put(sc)
	// Shadow policies are invisible to clients: their decisions are only
	// counted and logged, so that headers never make a client back off.
	return out
}

// idempotencyEntry is the index of the idempotency entry, or -1.
func (s *Service) idempotencyEntry(entries []*rlv3.RateLimitDescriptor_Entry) int {
	for i, e := range entries {
		if e.GetKey() == s.opts.IdempotencyEntry {
			return i
		}
	}
	return -1
}

// Reasons of decisions made by a failure mode, in X-Sluice-Reason.
const (
	ReasonFailedClosed = "store unavailable (failureMode Closed)"
	ReasonLocal        = "store unavailable (failureMode Local)"
	ReasonFailedOpen   = "store unavailable (failureMode Open)"
)

// decide runs one policy against the store and applies its failure mode
// when the store can't answer.
func (s *Service) decide(ctx context.Context, sc *scratch, p *config.Policy, c *policyCounters, domain string, entries []*rlv3.RateLimitDescriptor_Entry, cost int64, idem string) Decision {
	req := store.Request{Key: p.CounterKey(&sc.kb, entries), Limit: p.Limit, Cost: cost}
	sc.key = req.Key
	if idem != "" {
		// Scoped per domain, policy and counter: one caller can't replay
		// another's decision, nor a key of one policy another's.
		sc.kb.Reset()
		sc.kb.Add("idempotency")
		sc.kb.Add(domain)
		sc.kb.Add(p.ID())
		sc.kb.Add(string(req.Key[:]))
		sc.kb.Add(idem)
		req.Idempotency, req.IdempotencyTTL = sc.kb.Key(), s.opts.IdempotencyTTL
	}
	r, err := s.take(ctx, c, req)
	if err == nil {
		return Decision{Policy: p, Result: r}
	}
	s.metrics.storeErrors.Inc()
	s.log.Debug("Store error: the policy's failureMode decides", "policy", p.ID(), "failureMode", p.FailureMode, "error", err)
	c.noteFallback()
	switch p.FailureMode {
	case v1alpha1.FailClosed:
		if c.stats != nil {
			c.stats.failedClosed.Add(1)
		}
		return Decision{Policy: p, Result: algo.Result{RetryAfter: time.Second}, Reason: ReasonFailedClosed}
	case v1alpha1.FailLocal:
		if c.stats != nil {
			c.stats.localFallback.Add(1)
		}
		req.Limit = localShare(p.Limit, s.readyPods.Load())
		r, _ := s.local.Take(ctx, req) // the memory store never fails
		return Decision{Policy: p, Result: r, Reason: ReasonLocal}
	default:
		if c.stats != nil {
			c.stats.failedOpen.Add(1)
		}
		return Decision{Policy: p, Result: algo.Result{Allowed: true, Remaining: p.Limit.Capacity()}, Reason: ReasonFailedOpen}
	}
}

// localShare is this pod's share of a limit among pods: limit and burst
// divided by pods, rounded to the nearest unit, at least 1.
func localShare(l algo.Limit, pods int64) algo.Limit {
	if pods <= 1 {
		return l
	}
	share := func(n int64) int64 { return max(1, (n+pods/2)/pods) }
	l.Limit, l.Burst = share(l.Limit), share(l.Burst)
	return l
}

// DegradedPolicy is a policy whose decisions come from its failure mode
// because the store can't answer.
type DegradedPolicy struct {
	Policy      string
	FailureMode v1alpha1.FailureMode
	// Since is the first fallback decision of this episode; Fallbacks
	// counts them since.
	Since     time.Time
	Fallbacks int64
}

// Degraded lists the policies with a fallback decision in the last
// DegradedWindow, by policy.
func (s *Service) Degraded() []DegradedPolicy {
	l := s.loaded.Load()
	if l.snap == nil {
		return nil
	}
	now := time.Now().UnixNano()
	var out []DegradedPolicy
	for _, p := range l.snap.Policies {
		c := l.counters[p]
		if last := c.lastFallback.Load(); last == 0 || now-last > int64(DegradedWindow) {
			continue
		}
		out = append(out, DegradedPolicy{Policy: p.ID(), FailureMode: p.FailureMode,
			Since: time.Unix(0, c.degradedSince.Load()), Fallbacks: c.fallbacks.Load()})
	}
	return out
}

// DegradedDetail describes Degraded for /readyz.
func (s *Service) DegradedDetail() string {
	ds := s.Degraded()
	if len(ds) == 0 {
		return "no policy degraded: the store decides"
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%s runs degraded (store unavailable, failureMode %s, %d fallback decisions since %s)",
			d.Policy, d.FailureMode, d.Fallbacks, d.Since.UTC().Format(time.RFC3339))
	}
	return strings.Join(parts, "; ")
}

// moreRestrictive orders decisions: a denial beats an allowance, a longer
// retry beats a shorter one, and fewer remaining units beat more.
func moreRestrictive(a, b Decision) bool {
	switch {
	case b.Policy == nil:
		return a.Policy != nil
	case a.Policy == nil:
		return false
	case a.Result.Allowed != b.Result.Allowed:
		return !a.Result.Allowed
	case !a.Result.Allowed && a.Result.RetryAfter != b.Result.RetryAfter:
		return a.Result.RetryAfter == algo.Never || (b.Result.RetryAfter != algo.Never && a.Result.RetryAfter > b.Result.RetryAfter)
	default:
		return a.Result.Remaining < b.Result.Remaining
	}
}

func (s *Service) logShadow(c *policyCounters, p *config.Policy, domain string) {
	now := time.Now().UnixNano()
	last := c.lastShadowLog.Load()
	if now-last < int64(shadowLogEvery) || !c.lastShadowLog.CompareAndSwap(last, now) {
		return
	}
	s.log.Info("Shadow policy would deny", "policy", p.ID(), "domain", domain)
}

// ShouldRateLimit implements Envoy's RLS v3 RateLimitService.
// An idempotency key travels as a descriptor entry (Options.IdempotencyEntry).
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return s.Decide(ctx, req, "")
}

// Decide answers an RLS request whose idempotency key, when not empty (the
// HTTP Idempotency-Key header), applies to every descriptor that does not
// carry its own idempotency entry. A retry with the same key within the
// TTL replays the first admitted decision of each policy and consumes
// nothing.
func (s *Service) Decide(ctx context.Context, req *rlsv3.RateLimitRequest, idempotencyKey string) (*rlsv3.RateLimitResponse, error) {
	if err := s.Validate(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := ValidateIdempotencyKey(idempotencyKey); err != nil {
		return nil, status.Error(codes.InvalidArgument, "Idempotency-Key: "+err.Error())
	}
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.Descriptors)),
	}
	l := s.loaded.Load()
	var worst Decision
	replayed := false
	for i, d := range req.Descriptors {
		dec := s.check(ctx, l, req.Domain, d.Entries, descriptorCost(req, d), idempotencyKey)
		replayed = replayed || dec.Result.Replayed
		resp.Statuses[i] = descriptorStatus(dec)
		if dec.OverLimit {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if moreRestrictive(dec, worst) || (dec.OverLimit && !worst.OverLimit) {
			worst = dec
		}
	}
	if worst.Policy != nil {
		resp.ResponseHeadersToAdd = s.headers(worst, replayed)
	}
	if worst.OverLimit && worst.Reason != "" {
		// Envoy logs and forwards the RLS dynamic metadata.
		resp.DynamicMetadata, _ = structpb.NewStruct(map[string]any{"reason": worst.Reason, "policy": worst.Policy.ID()})
	}
	return resp, nil
}

// ValidateIdempotencyKey rejects an idempotency key longer than
// MaxIdempotencyKeyLength bytes. The empty key means none.
func ValidateIdempotencyKey(k string) error {
	if len(k) > MaxIdempotencyKeyLength {
		return fmt.Errorf("idempotency key is %d bytes long, the maximum is %d", len(k), MaxIdempotencyKeyLength)
	}
	return nil
}

// descriptorCost is the descriptor's own hits_addend when set (0 peeks),
// else the request's; a request hits_addend of 0 means 1, as in Envoy.
func descriptorCost(req *rlsv3.RateLimitRequest, d *rlv3.RateLimitDescriptor) int64 {
	if h := d.GetHitsAddend(); h != nil {
		return int64(h.GetValue())
	}
	if req.HitsAddend == 0 {
		return 1
	}
	return int64(req.HitsAddend)
}

// Validate rejects requests the limiter will not decide, with a message
// naming what is wrong.
func (s *Service) Validate(req *rlsv3.RateLimitRequest) error {
	if req.GetDomain() == "" {
		return fmt.Errorf("domain is empty")
	}
	if len(req.Domain) > MaxEntryLength {
		return fmt.Errorf("domain is %d bytes long, the maximum is %d", len(req.Domain), MaxEntryLength)
	}
	if len(req.Descriptors) == 0 {
		return fmt.Errorf("descriptors are empty: send at least one")
	}
	if len(req.Descriptors) > MaxDescriptors {
		return fmt.Errorf("%d descriptors, the maximum is %d", len(req.Descriptors), MaxDescriptors)
	}
	if int64(req.HitsAddend) > s.opts.MaxCost {
		return fmt.Errorf("hits_addend %d exceeds the maximum %d", req.HitsAddend, s.opts.MaxCost)
	}
	for i, d := range req.Descriptors {
		if d == nil || len(d.Entries) == 0 {
			return fmt.Errorf("descriptors[%d] has no entries", i)
		}
		if len(d.Entries) > MaxEntries {
			return fmt.Errorf("descriptors[%d] has %d entries, the maximum is %d", i, len(d.Entries), MaxEntries)
		}
		if h := d.GetHitsAddend(); h != nil && h.GetValue() > uint64(s.opts.MaxCost) {
			return fmt.Errorf("descriptors[%d].hits_addend %d exceeds the maximum %d", i, h.GetValue(), s.opts.MaxCost)
		}
		if d.GetIsNegativeHits() {
			return fmt.Errorf("descriptors[%d].is_negative_hits is not supported", i)
		}
		if d.GetLimit() != nil {
			return fmt.Errorf("descriptors[%d].limit overrides are not supported: limits come from RateLimitPolicies", i)
		}
		for j, e := range d.Entries {
			switch {
			case e == nil || e.Key == "":
				return fmt.Errorf("descriptors[%d].entries[%d] has an empty key", i, j)
			case len(e.Key) > MaxEntryLength:
				return fmt.Errorf("descriptors[%d].entries[%d].key is %d bytes long, the maximum is %d", i, j, len(e.Key), MaxEntryLength)
			case len(e.Value) > MaxEntryLength:
				return fmt.Errorf("descriptors[%d].entries[%d].value is %d bytes long, the maximum is %d", i, j, len(e.Value), MaxEntryLength)
			case e.Key == s.opts.IdempotencyEntry:
				if e.Value == "" {
					return fmt.Errorf("descriptors[%d].entries[%d] (%s) is empty: send an idempotency key, or leave the entry out", i, j, e.Key)
				}
				if err := ValidateIdempotencyKey(e.Value); err != nil {
					return fmt.Errorf("descriptors[%d].entries[%d] (%s): %v", i, j, e.Key, err)
				}
				if s.idempotencyEntry(d.Entries[j+1:]) >= 0 {
					return fmt.Errorf("descriptors[%d] has more than one %s entry", i, e.Key)
				}
			}
		}
	}
	return nil
}
