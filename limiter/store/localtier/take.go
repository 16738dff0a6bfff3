package localtier

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// entry is one key's local state. Times are tier nanoseconds (Tier.now).
type entry struct {
	mu sync.Mutex
	// The grant: tokens left to spend until expires, taken in window
	// under limit, for policy counters c.
	tokens, expires, window int64
	limit                   algo.Limit
	ttl                     time.Duration
	c                       *counters
	// What the counter said at the grant, for the answers spent from it.
	remaining, resetAt int64
	// The over-limit cache: costs of deniedCost or more are denied until
	// deniedUntil with the store's answer, denied, given at deniedAt.
	deniedCost, deniedAt, deniedUntil int64
	denied                            algo.Result
	// The key's local rate: decisions since lastGrant, and the estimate in
	// decisions per second.
	seen, lastGrant int64
	granted         bool
	rate            float64
	lastUsed        int64
	// busy while a grant call is in flight; others wait on wait, made
	// by the first of them (most calls have no one waiting).
	busy bool
	wait chan struct{}
	// dead once the sweeper dropped the entry: look it up again.
	dead bool
}

// Take decides req for policy p: from the key's grant when it covers the
// cost, from the over-limit cache when the store denied this cost lately,
// and otherwise with one grant call that also credits back what is left of
// the last grant. Peeks (cost 0), requests with an idempotency key and keys
// beyond MaxKeys go to the store exactly, as does everything when the store
// does not grant. An error means the store could not decide.
func (t *Tier) Take(ctx context.Context, p *Policy, req store.Request) (algo.Result, error) {
	if t.granter == nil || req.Cost <= 0 || req.HasIdempotency() {
		p.c.exact.Add(1)
		return t.st.Take(ctx, req)
	}
	counted := false
	for {
		e := t.entry(req.Key)
		if e == nil {
			p.c.exact.Add(1)
			return t.st.Take(ctx, req)
		}
		now := t.now()
		e.mu.Lock()
		if e.dead {
			e.mu.Unlock()
			continue
		}
		if !counted {
			e.seen++
			e.lastUsed = now
			counted = true
		}
		if r, ok := e.fromGrant(now, req.Cost); ok {
			e.mu.Unlock()
			p.c.local.Add(1)
			return r, nil
		}
		if r, ok := e.fromDenial(now, req.Cost); ok {
			e.mu.Unlock()
			p.c.cachedDenials.Add(1)
			return r, nil
		}
		if e.busy {
			if e.wait == nil {
				e.wait = make(chan struct{})
			}
			w := e.wait
			e.mu.Unlock()
			select {
			case <-w:
				continue
			case <-ctx.Done():
				return algo.Result{}, ctx.Err()
			}
		}
		return t.grant(ctx, p, e, req, now)
	}
}

// fromGrant spends cost from the grant, if it covers it and is live.
func (e *entry) fromGrant(now, cost int64) (algo.Result, bool) {
	if e.tokens < cost || now >= e.expires {
		return algo.Result{}, false
	}
	e.tokens -= cost
	return algo.Result{Allowed: true, Remaining: e.remaining + e.tokens, ResetAfter: time.Duration(max(0, e.resetAt-now))}, true
}

// fromDenial answers from the over-limit cache.
func (e *entry) fromDenial(now, cost int64) (algo.Result, bool) {
	if e.deniedCost == 0 || cost < e.deniedCost || now >= e.deniedUntil {
		return algo.Result{}, false
	}
	r, since := e.denied, time.Duration(now-e.deniedAt)
	r.ResetAfter = max(0, r.ResetAfter-since)
	r.RetryAfter = time.Duration(e.deniedUntil - now)
	return r, true
}

// grant calls the store for req, crediting what is left of the last grant,
// and installs the answer. Called with e.mu held; returns with it released.
// now is before the call is sent, so the grant ends locally no later than
// its lifetime allows on the store's clock.
func (t *Tier) grant(ctx context.Context, p *Policy, e *entry, req store.Request, now int64) (algo.Result, error) {
	// A pod may hold at most PodCap: asking more is pointless, and with
	// none (maxOvershoot 0) the call stays exact (see call).
	lr := store.GrantRequest{Key: req.Key, Limit: p.Limit, Cost: req.Cost, Want: min(e.want(now, p.TTL), p.PodCap),
		Pod: t.pod, Bound: p.Bound, PodCap: p.PodCap, TTL: p.TTL, Horizon: horizon(p.TTL)}
	if e.tokens > 0 {
		lr.Credit, lr.CreditWindow = e.tokens, e.window
	}
	e.tokens, e.expires = 0, 0
	e.busy = true
	e.mu.Unlock()

	l, err := t.call(ctx, p, lr)

	e.mu.Lock()
	defer func() {
		e.busy = false
		if e.wait != nil {
			close(e.wait)
			e.wait = nil
		}
		e.mu.Unlock()
	}()
	if err != nil {
		return algo.Result{}, err // the credit may or may not have landed: those units are lost, never doubled
	}
	p.c.credited.Add(lr.Credit)
	p.c.granted.Add(l.Granted)
	p.c.notePods(l.Pods)
	if !l.Result.Allowed {
		if hold := denialHold(p, lr, l); hold > 0 {
			e.deniedCost, e.deniedAt, e.deniedUntil, e.denied = req.Cost, now, now+int64(hold), l.Result
		}
		return l.Result, nil
	}
	e.deniedCost = 0
	if hold := exhaustedHold(p, lr, l); hold > 0 {
		// Spent from the grant first (fromGrant comes before fromDenial).
		e.deniedCost, e.deniedAt, e.deniedUntil = 1, now, now+int64(hold)
		e.denied = algo.Result{ResetAfter: l.Result.ResetAfter}
	}
	e.tokens, e.expires, e.window, e.limit, e.ttl, e.c = l.Granted, now+int64(l.Lifetime), l.Window, p.Limit, p.TTL, p.c
	if l.Granted > 0 {
		t.grants.Add(1) // the sweeper credits it back when it expires
	}
	e.remaining, e.resetAt = l.Result.Remaining, now+int64(l.Result.ResetAfter)
	r := l.Result
	r.Remaining += l.Granted
	return r, nil
}

// call sends lr: to the grant script, or, when it asks for nothing and
// credits nothing (a cold key: its first call, or one whose local rate
// wants no units), as an exact Take, which the grant script would decide
// alike at a larger script's cost. A grant pays only where a key is hot.
func (t *Tier) call(ctx context.Context, p *Policy, lr store.GrantRequest) (store.Grant, error) {
	if lr.Want > 0 || lr.Credit > 0 {
		p.c.grants.Add(1)
		return t.granter.Grant(ctx, lr)
	}
	p.c.exact.Add(1)
	r, err := t.st.Take(ctx, store.Request{Key: lr.Key, Limit: lr.Limit, Cost: lr.Cost})
	return store.Grant{Result: r}, err
}

// denialHold is how long a denial is answered from the over-limit cache:
// until the counter can admit the cost again, which for a window is its
// reset. A bucket refills continuously, a unit at a time: there it is held
// for the pod's pace (see pace), and no longer than until the bucket is
// full, unless the store says the cost cannot fit sooner.
func denialHold(p *Policy, lr store.GrantRequest, l store.Grant) time.Duration {
	r := l.Result
	if r.RetryAfter <= 0 || !p.Limit.Algorithm.UsesBurst() {
		return max(0, r.RetryAfter)
	}
	return max(r.RetryAfter, min(pace(p, lr, l), r.ResetAfter))
}

// exhaustedHold is how long, once a grant that emptied a bucket is spent,
// the pod answers that the bucket is exhausted without asking the store:
// its pace, no longer than until the bucket is full. 0 when the bucket has
// units left for the cost, and for windows, whose grants end with the
// window anyway.
func exhaustedHold(p *Policy, lr store.GrantRequest, l store.Grant) time.Duration {
	if !p.Limit.Algorithm.UsesBurst() || l.Result.Remaining >= lr.Cost {
		return 0
	}
	return min(pace(p, lr, l), l.Result.ResetAfter)
}

// pace is how long a pod waits before it asks an exhausted bucket again:
// until the refill, at the pod's fair share of it (rate / pods), has
// covered the cost and the chunk the pod would ask for. Every pod of the
// key then takes a worthwhile grant per call instead of the few units
// refilled since another pod's call, so a flood costs one store call per
// pod per pace. Only denials come of it (the units stay in the bucket for
// the next call), so the bound holds; and since a denial answered after
// the bucket could admit again is a false one, the pace is at most
// maxHold, a twentieth of the period and the grant ttl.
func pace(p *Policy, lr store.GrantRequest, l store.Grant) time.Duration {
	share := min(lr.Want, p.PodCap)
	pods := max(1, l.Pods)
	if p.Bound >= 0 {
		share = min(share, p.Bound/pods)
	}
	fair := time.Duration(float64(pods*(lr.Cost+share)) * float64(p.Limit.Period) / float64(p.Limit.Limit))
	return min(fair, maxHold, p.Limit.Period/20, p.TTL)
}

// maxHold is the longest pace: what a pod may deny, after a bucket was
// exhausted, that the bucket could have admitted once the load dropped.
const maxHold = 100 * time.Millisecond

// want is how many units beyond a request's cost to ask for: what the key's
// recent local rate spends in grantHorizon (or half the ttl, if shorter),
// and at least one when the rate spends minSpent units within the ttl. A
// key's first grant, and a cold key's, asks for none and is exact.
func (e *entry) want(now int64, ttl time.Duration) int64 {
	if e.granted {
		if el := float64(now-e.lastGrant) / 1e9; el > 0 {
			inst := float64(e.seen) / el
			if e.rate == 0 {
				e.rate = inst
			} else {
				e.rate = (e.rate + inst) / 2
			}
		}
	}
	e.seen, e.lastGrant, e.granted = 0, now, true
	w := int64(e.rate * horizon(ttl).Seconds())
	if w == 0 && e.rate*ttl.Seconds() >= minSpent {
		w = 1
	}
	return w
}

// minSpent is how many units a key must be expected to spend within a
// grant's ttl for a grant to pay. A grant call costs Redis about two exact
// decisions (BenchmarkScriptCPU), which share their round trip's script
// run (scripts/multi.lua), and a unit left when the grant ends costs a
// call to credit it back; a unit spent from the grant costs no round trip
// at all, and the limiter's share of a round trip (its writes, reads, and
// parking and waking the caller) is most of what a decision costs it. So a
// grant of one unit pays when it is spent: from two units a ttl (a key
// used once a second at the default 2s ttl) a key takes a grant of at least one,
// and below that each of its calls is exact.
const minSpent = 2

// horizon is the span of a key's traffic one grant asks for.
func horizon(ttl time.Duration) time.Duration { return min(ttl/2, grantHorizon) }

// grantHorizon is how much of a key's traffic one grant asks to hold. The
// units a pod holds are taken from the counter before they are spent: a
// shorter horizon holds fewer of them back from the other pods when the
// key is at its limit, a longer one calls the store less often.
const grantHorizon = 250 * time.Millisecond

func (c *counters) notePods(n int64) {
	for {
		cur := c.pods.Load()
		if n <= cur || c.pods.CompareAndSwap(cur, n) {
			return
		}
	}
}
