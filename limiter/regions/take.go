package regions

import (
	"context"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// entry is what this region holds on one Global counter whose home is
// another region.
type entry struct {
	held     int64 // units of the grant not yet spent
	expires  int64 // when the grant ends (now units)
	window   int64 // the window the grant was taken in
	credit   int64 // units of an expired grant, to give back
	creditW  int64 // the window they were granted in
	owed     int64 // admitted without a grant, to charge with the next call
	answered bool  // the home has answered a grant call for this key
	denied   int64 // the home denied: no advance, no call before this
	busy     bool  // a grant call is in flight
	lastUse  int64
	home     string // the key's home region
}

// Take decides req for the Global policy p from the grant this region
// holds on the key: granted from the key's home over the peer endpoint, or,
// when this region is the home, from its own store without a message (so
// the home's decisions wait on its store no more than the others' wait on
// the link). Past the grant, a cold key's advance, then the partition share
// when the home (or, at the home, its store) can't be reached. It never
// waits for a peer or a store. A home that counts in memory, which grants
// nothing, decides its keys in it, and the home decides a request with an
// idempotency key exactly in its store, which replays a retry. A request
// that costs more than a grant holds is decided exactly at the home (see
// takeAtHome).
func (r *Regions) Take(ctx context.Context, p Policy, req store.Request) (algo.Result, error) {
	gk := globalKey(p.ID, req.Key)
	h := home(gk, r.names)
	pe := r.peers[h]
	big := req.Cost > r.GrantSize(p.Limit)
	if h == r.opts.Region {
		if r.granter == nil || req.HasIdempotency() || big {
			// Exact in the store: a home in memory, a request with an
			// idempotency key, whose retry the store replays (two-tier
			// mode passes them through the same way; elsewhere a retry
			// spends again: fewer admitted, never more), and one no grant
			// can cover.
			r.metrics.decisions.WithLabelValues("home").Inc()
			req.Key, req.Limit = gk, p.Limit
			return r.local.Take(ctx, req)
		}
		pe = r.self
	} else if big {
		return r.takeAtHome(ctx, pe, p, req.Key, gk, req.Cost)
	}
	now := r.now()
	r.mu.Lock()
	e := r.keys[gk]
	if e == nil {
		if len(r.keys) >= r.opts.MaxKeys {
			r.evictIdle(now)
		}
		if len(r.keys) >= r.opts.MaxKeys {
			r.mu.Unlock()
			r.metrics.decisions.WithLabelValues("share").Inc()
			return r.share.Take(ctx, store.Request{Key: gk, Limit: r.shareLimit(p.Limit), Cost: req.Cost})
		}
		e = &entry{home: h}
		r.keys[gk] = e
	}
	e.lastUse = now
	if e.expires <= now && e.held > 0 {
		e.credit, e.creditW, e.held = e.credit+e.held, e.window, 0
	}
	g := r.GrantSize(p.Limit)
	cost := req.Cost
	if e.held < g/2+cost || e.held == 0 {
		r.maybeCall(pe, p, req.Key, gk, e, now, g)
	}
	if cost == 0 || e.held >= cost {
		e.held -= cost
		res := algo.Result{Allowed: true, Remaining: e.held, ResetAfter: time.Duration(max(0, e.expires-now))}
		r.mu.Unlock()
		r.metrics.decisions.WithLabelValues(grantPath(pe == r.self)).Inc()
		return res, nil
	}
	down := pe.down()
	cold := !e.answered && e.owed+cost <= g
	deniedUntil := e.denied
	denied := deniedUntil > now
	r.mu.Unlock()
	switch {
	case down:
		// The home can't be reached: the partition share, never more.
		r.metrics.decisions.WithLabelValues("share").Inc()
		res, err := r.share.Take(ctx, store.Request{Key: gk, Limit: r.shareLimit(p.Limit), Cost: cost})
		if err == nil && res.Allowed {
			r.owe(gk, cost)
		}
		return res, err
	case cold && !denied:
		// No answer yet for this key: at most g on advance, charged by the
		// grant call on its way.
		r.metrics.decisions.WithLabelValues("advance").Inc()
		r.owe(gk, cost)
		return algo.Result{Allowed: true}, nil
	default:
		r.metrics.decisions.WithLabelValues("denied").Inc()
		retry := time.Duration(max(deniedUntil-now, int64(10*time.Millisecond)))
		return algo.Result{Allowed: false, RetryAfter: retry, ResetAfter: retry}, nil
	}
}

// takeAtHome decides a request for key (gk its counter) that costs more
// than a grant holds (g) at the key's home in another region, exactly, over
// the link: no grant can cover it, and a larger grant would widen the
// bound. It waits for the home at most half of what is left of the
// request's deadline (a gateway that times out fails open) and at most
// the call timeout; a home that is down, busy with maxInFlight calls of
// this region, or slower than that leaves it to the partition share, as
// for a region cut off. A call that answers after the wait still charges
// the home (fewer admitted, never more).
func (r *Regions) takeAtHome(ctx context.Context, pe *peer, p Policy, key, gk store.Key, cost int64) (algo.Result, error) {
	if !pe.down() {
		if ans, ok := r.callWithin(ctx, pe, grantCall{Region: r.opts.Region, Policy: p.ID, Key: key.String(), Cost: cost, Spend: true, SharePercent: r.sharePercent()}); ok {
			r.metrics.decisions.WithLabelValues("remote").Inc()
			if ans.Allowed {
				return algo.Result{Allowed: true, Remaining: ans.Remaining}, nil
			}
			retry := max(time.Duration(ans.RetryAfterMS)*time.Millisecond, 10*time.Millisecond)
			return algo.Result{Allowed: false, RetryAfter: retry, ResetAfter: retry}, nil
		}
	}
	r.metrics.decisions.WithLabelValues("share").Inc()
	res, err := r.share.Take(ctx, store.Request{Key: gk, Limit: r.shareLimit(p.Limit), Cost: cost})
	if err == nil && res.Allowed {
		r.owe(gk, cost)
	}
	return res, err
}

// callWithin sends grant call c to pe and waits for its answer within
// half of ctx's time left and the call timeout; ok is false when it did
// not answer in time, failed, or pe had maxSpendInFlight such calls out. The call
// itself runs to the call timeout whatever the wait: a wait cut short by
// the request's deadline is not the peer's failure.
func (r *Regions) callWithin(ctx context.Context, pe *peer, c grantCall) (grantAnswer, bool) {
	select {
	case pe.spendSem <- struct{}{}:
	default:
		return grantAnswer{}, false
	}
	wait := r.opts.CallTimeout
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)/2)
	}
	type answer struct {
		ans grantAnswer
		err error
	}
	done := make(chan answer, 1)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() { <-pe.spendSem }()
		cctx, cancel := context.WithTimeout(context.Background(), r.opts.CallTimeout)
		defer cancel()
		ans, err := r.call(cctx, pe, c)
		done <- answer{ans, err}
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case a := <-done:
		return a.ans, a.err == nil
	case <-t.C:
	case <-ctx.Done():
	case <-r.stop:
	}
	return grantAnswer{}, false
}

// grantPath is the decisions metric's path of a decision spent from a
// grant: home for the home's own.
func grantPath(home bool) string {
	if home {
		return "home"
	}
	return "grant"
}

func (r *Regions) owe(gk store.Key, cost int64) {
	r.mu.Lock()
	if e := r.keys[gk]; e != nil {
		e.owed += cost
	}
	r.mu.Unlock()
}

// evictIdle drops keys that hold nothing and owe nothing and were not used
// for a grant TTL. Called with r.mu held.
func (r *Regions) evictIdle(now int64) {
	for k, e := range r.keys {
		if !e.busy && e.owed == 0 && (e.held == 0 || e.expires <= now) && now-e.lastUse > int64(r.opts.GrantTTL) {
			delete(r.keys, k)
		}
	}
}

// maybeCall starts a grant call for gk (key's counter of p) unless one is in flight, the home
// denied it lately, or the home is down and probed lately. Called with
// r.mu held.
func (r *Regions) maybeCall(pe *peer, p Policy, key, gk store.Key, e *entry, now, g int64) {
	if e.busy || e.denied > now || !pe.mayProbe(now) {
		return
	}
	select {
	case pe.sem <- struct{}{}:
	default:
		return
	}
	select {
	case <-r.stop:
		<-pe.sem
		return
	default:
	}
	// What the grant in hand still holds is spent while the call is out,
	// so the call asks only for the rest of g: a region never holds more
	// than g on a key. Only an expired grant's units are credited.
	call := grantCall{Region: r.opts.Region, Policy: p.ID, Key: key.String(), Cost: 1 + min(e.owed, p.Limit.Capacity()),
		Want: max(0, g-1-e.held), Credit: e.credit, CreditWindow: e.creditW, SharePercent: r.sharePercent()}
	e.credit, e.busy = 0, true
	owed := e.owed
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() { <-pe.sem }()
		sent := r.now()
		ctx, cancel := context.WithTimeout(context.Background(), r.opts.CallTimeout)
		ans, err := r.call(ctx, pe, call)
		cancel()
		r.mu.Lock()
		defer r.mu.Unlock()
		e.busy = false
		if err != nil {
			// The call failed: the credit is lost (fewer admitted, never
			// more), and what is owed waits for the home.
			return
		}
		e.answered = true
		e.owed = max(0, e.owed-owed)
		if !ans.Allowed {
			// Denied: what was owed stays uncounted (within the bound).
			e.denied = r.now() + int64(max(time.Duration(ans.RetryAfterMS)*time.Millisecond, 10*time.Millisecond))
			return
		}
		// The call's own unit of cost was never spent: it is held too. What
		// is left of the last grant stays only within its window.
		now := r.now()
		if e.expires <= now || e.window != ans.Window {
			e.held = 0
		}
		e.held += 1 + ans.Granted
		e.expires = sent + int64(time.Duration(ans.LifetimeMS)*time.Millisecond)
		e.window = ans.Window
		r.metrics.units.WithLabelValues("granted").Add(float64(e.held))
	}()
}
