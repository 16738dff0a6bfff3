// Package service is the limiter's protocol-neutral core: it validates a
// rate-limit request, matches it against the loaded snapshot, decides every
// matching policy against the store, applies shadow mode and failure modes,
// and maps the outcome to Envoy's RLS v3 response with rate-limit headers.
// The gRPC server and the HTTP API both call ShouldRateLimit.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/store"
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
}

// Service answers rate-limit requests. It is safe for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	store   store.Store
	local   *memory.Store // failureMode Local: this pod's own counters
	opts    Options
	log     *slog.Logger
	metrics *metrics
	loaded  atomic.Pointer[loaded]
	scratch sync.Pool
}

// loaded is a snapshot with its per-policy metrics, swapped as one.
type loaded struct {
	snap     *config.Snapshot
	counters map[*config.Policy]*policyCounters
}

// scratch is per-request working memory, pooled so a decision on a known key
// allocates nothing.
type scratch struct {
	kb      store.KeyBuilder
	matches []*config.Policy
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
	s := &Service{
		store:   st,
		local:   memory.New(memory.Options{MaxKeys: localFallbackMax}),
		opts:    opts,
		log:     opts.Logger,
		metrics: newMetrics(opts.Registerer),
	}
	s.scratch.New = func() any { return &scratch{matches: make([]*config.Policy, 0, 8)} }
	s.loaded.Store(&loaded{})
	return s
}

// Swap installs snap atomically: requests already running finish on the
// snapshot they started with.
func (s *Service) Swap(snap *config.Snapshot) {
	l := &loaded{snap: snap, counters: make(map[*config.Policy]*policyCounters, len(snap.Policies))}
	kept := map[[2]string]bool{}
	for _, p := range snap.Policies {
		l.counters[p] = s.metrics.forPolicy(p)
		kept[[2]string{p.Domain, p.ID()}] = true
		if p.Spec.LocalTierEnabled() {
			s.log.Warn("Policy asks for localTier, which this limiter does not implement yet: it counts exactly in the store", "policy", p.ID())
		}
	}
	prev := s.loaded.Swap(l)
	if prev.snap != nil {
		for _, p := range prev.snap.Policies {
			if !kept[[2]string{p.Domain, p.ID()}] {
				s.metrics.forget(p)
			}
		}
	}
	s.metrics.snapshotPolicies.Set(float64(len(snap.Policies)))
}

// Snapshot returns the installed snapshot, or nil before the first Swap.
func (s *Service) Snapshot() *config.Snapshot { return s.loaded.Load().snap }

// Close releases the fallback store. The main store belongs to the caller.
func (s *Service) Close() error { return s.local.Close() }

// Decision is the outcome of one request descriptor.
type Decision struct {
	// Policy is the policy reported to the client: the most restrictive of
	// the enforcing (non-shadow) policies that matched, or nil when none did.
	Policy *config.Policy
	// Result is that policy's decision.
	Result algo.Result
	// OverLimit is true when an enforcing (non-shadow) policy denied.
	OverLimit bool
	// Reason explains a denial that did not come from a counter, such as a
	// failClosed policy whose store is unreachable.
	Reason string
}

// Check decides one descriptor: every policy of the domain that entries
// match spends cost (denials spend nothing). It never fails: store errors
// are resolved by each policy's failure mode.
func (s *Service) Check(ctx context.Context, domain string, entries []*rlv3.RateLimitDescriptor_Entry, cost int64) Decision {
	l := s.loaded.Load()
	d := l.snap.Domain(domain)
	if d == nil {
		return Decision{}
	}
	sc := s.scratch.Get().(*scratch)
	sc.matches = d.AppendMatches(sc.matches[:0], entries)
	var out Decision
	for _, p := range sc.matches {
		c := l.counters[p]
		dec := s.decide(ctx, sc, p, c, entries, cost)
		if p.Shadow {
			if !dec.Result.Allowed {
				c.shadowLimited.Inc()
				s.logShadow(c, p, domain)
			} else if dec.Reason == "" {
				c.allowed.Inc()
			}
			continue
		}
		if dec.Reason == "" {
			if dec.Result.Allowed {
				c.allowed.Inc()
			} else {
				c.limited.Inc()
			}
		}
		dec.OverLimit = !dec.Result.Allowed
		if moreRestrictive(dec, out) {
			out = dec
		}
	}
	for i := range sc.matches {
		sc.matches[i] = nil
	}
	s.scratch.Put(sc)
	// Shadow policies are invisible to clients: their decisions are only
	// counted and logged, so that headers never make a client back off.
	return out
}

// decide runs one policy against the store and applies its failure mode
// when the store can't answer.
func (s *Service) decide(ctx context.Context, sc *scratch, p *config.Policy, c *policyCounters, entries []*rlv3.RateLimitDescriptor_Entry, cost int64) Decision {
	req := store.Request{Key: p.CounterKey(&sc.kb, entries), Limit: p.Limit, Cost: cost}
	r, err := s.store.Take(ctx, req)
	if err == nil {
		return Decision{Policy: p, Result: r}
	}
	s.metrics.storeErrors.Inc()
	switch p.FailureMode {
	case v1alpha1.FailClosed:
		c.failedClosed.Inc()
		return Decision{Policy: p, Result: algo.Result{RetryAfter: time.Second}, Reason: "store unavailable (failureMode Closed)"}
	case v1alpha1.FailLocal:
		c.localFallback.Inc()
		r, _ := s.local.Take(ctx, req) // the memory store never fails
		return Decision{Policy: p, Result: r, Reason: "store unavailable (failureMode Local)"}
	default:
		c.failedOpen.Inc()
		return Decision{Policy: p, Result: algo.Result{Allowed: true, Remaining: p.Limit.Capacity()}, Reason: "store unavailable (failureMode Open)"}
	}
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
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := s.Validate(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.Descriptors)),
	}
	var worst Decision
	for i, d := range req.Descriptors {
		dec := s.Check(ctx, req.Domain, d.Entries, descriptorCost(req, d))
		resp.Statuses[i] = descriptorStatus(dec)
		if dec.OverLimit {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if moreRestrictive(dec, worst) || (dec.OverLimit && !worst.OverLimit) {
			worst = dec
		}
	}
	if worst.Policy != nil {
		resp.ResponseHeadersToAdd = s.headers(worst)
	}
	return resp, nil
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
			}
		}
	}
	return nil
}
