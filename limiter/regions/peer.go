package regions

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// peer is another region as this one sees it.
type peer struct {
	Peer
	// sem bounds the grant calls in flight to the peer; spendSem, apart,
	// the calls of requests that cost more than a grant (takeAtHome), so
	// that a flood of those can't hold up the grants every other key
	// needs.
	sem, spendSem chan struct{}
	// share is the partition share, in percent, the peer last said it
	// has; 0 until it says.
	share atomic.Int32
	// client makes the grant calls to the peer.
	client *http.Client

	mu        sync.Mutex
	reachable bool
	reason    string
	message   string
	since     time.Time // when reachable last changed
	last      time.Time // the last exchange that got an answer
	lastProbe int64
	failed    bool // the last call failed
}

// learnShare records the partition share the peer says it has; a
// percent out of 1..100 is not believed.
func (p *peer) learnShare(pct int32) {
	if pct >= 1 && pct <= 100 {
		p.share.Store(pct)
	}
}

// down reports whether the last call to the peer failed.
func (p *peer) down() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed
}

func newPeer(p Peer) *peer {
	return &peer{Peer: p, reason: ReasonNoExchange, sem: make(chan struct{}, maxInFlight), spendSem: make(chan struct{}, maxSpendInFlight)}
}

// mayProbe reports whether a grant call may go to the peer now: always
// while it answers, at most every ProbeInterval while it does not.
func (p *peer) mayProbe(now int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.failed {
		return true
	}
	if now-p.lastProbe < int64(ProbeInterval) {
		return false
	}
	p.lastProbe = now
	return true
}

func (p *peer) record(ok bool, reason, message string, now int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := time.Now()
	if ok != p.reachable || p.since.IsZero() {
		p.since = t
	}
	p.reachable, p.failed, p.reason, p.message = ok, !ok, reason, message
	if ok || reason != ReasonUnreachable {
		p.last = t
	}
	if !ok {
		p.lastProbe = now
	}
}

// call sends one grant call to the home pe and records what came of it.
// The call to this region itself (r.self) goes to its own store, with no
// message.
func (r *Regions) call(ctx context.Context, pe *peer, c grantCall) (grantAnswer, error) {
	if pe == r.self {
		return r.callSelf(ctx, c)
	}
	var ans grantAnswer
	body, err := json.Marshal(c)
	if err != nil {
		return ans, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(pe.URL, "/")+GrantPath, bytes.NewReader(body))
	if err != nil {
		return ans, err
	}
	if r.opts.Insecure {
		req.Header.Set("Authorization", "Bearer "+pe.Token)
	}
	r.callsSent.Add(1)
	req.Header.Set("Content-Type", "application/json")
	resp, err := pe.client.Do(req)
	if err != nil {
		reason := transportReason(err)
		r.metrics.messages.WithLabelValues(pe.Name, reason).Inc()
		r.mark(pe, false, reason, err.Error())
		return ans, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes))
	if err != nil {
		r.mark(pe, false, ReasonUnreachable, err.Error())
		return ans, err
	}
	if resp.StatusCode != http.StatusOK {
		var ref refusal
		if json.Unmarshal(data, &ref) != nil || ref.Reason == "" {
			ref = refusal{Reason: ReasonRefused, Message: fmt.Sprintf("HTTP %d", resp.StatusCode)}
		}
		if resp.StatusCode == http.StatusUnauthorized {
			ref.Reason = ReasonUnauthorized
		}
		r.metrics.messages.WithLabelValues(pe.Name, ref.Reason).Inc()
		r.mark(pe, false, ref.Reason, ref.Message)
		return ans, fmt.Errorf("peer %s refused a grant call: %s: %s", pe.Name, ref.Reason, ref.Message)
	}
	if err := json.Unmarshal(data, &ans); err != nil || ans.Granted < 0 || ans.LifetimeMS < 0 {
		r.mark(pe, false, ReasonRefused, "a malformed answer")
		return grantAnswer{}, fmt.Errorf("peer %s: a malformed grant answer", pe.Name)
	}
	// A hostile or broken home can't make this region hold more than it
	// asked for.
	ans.Granted = min(ans.Granted, c.Want)
	ans.LifetimeMS = min(ans.LifetimeMS, r.opts.GrantTTL.Milliseconds())
	pe.learnShare(ans.SharePercent)
	r.metrics.messages.WithLabelValues(pe.Name, ReasonReachable).Inc()
	r.mark(pe, true, ReasonReachable, "")
	return ans, nil
}

func (r *Regions) mark(pe *peer, ok bool, reason, message string) {
	pe.record(ok, reason, message, r.now())
	v := 0.0
	if ok {
		v = 1
	}
	r.metrics.reachable.WithLabelValues(pe.Name).Set(v)
}

// PeerStatus is what this region knows of a peer; Status is the region's
// view of its peers, sorted by name, and what it holds. They are the
// admin plane's wire types (limiterwire.RegionsPath), which the operator
// reads.
type (
	PeerStatus = limiterwire.RegionPeer
	Status     = limiterwire.Regions
)

// Status reports reachability per peer and the grants held.
func (r *Regions) Status() Status {
	st := Status{Region: r.opts.Region}
	for _, n := range r.names {
		pe := r.peers[n]
		if pe == nil {
			continue
		}
		pe.mu.Lock()
		st.Peers = append(st.Peers, PeerStatus{Name: n, Reachable: pe.reachable, Reason: pe.reason, Message: pe.message, Since: pe.since, LastExchange: pe.last})
		pe.mu.Unlock()
	}
	now := r.now()
	byPeer := make(map[string]int, len(st.Peers))
	for i := range st.Peers {
		byPeer[st.Peers[i].Name] = i
	}
	r.mu.Lock()
	st.Keys = len(r.keys)
	for _, e := range r.keys {
		i, ok := byPeer[e.home]
		if ok {
			st.Peers[i].Keys++
		}
		if e.expires > now {
			st.HeldUnits += e.held
			if ok {
				st.Peers[i].HeldUnits += e.held
			}
		}
	}
	r.mu.Unlock()
	return st
}

// ledger remembers, per region and counter, the units the home granted
// and has not had back, so a credit can't return more.
type ledger struct {
	mu sync.Mutex
	m  map[ledgerKey]ledgerEntry
}

type ledgerKey struct {
	region string
	key    store.Key
}

type ledgerEntry struct {
	units   int64
	expires time.Time
}

// take returns how much of credit region may give back on key, and forgets
// it.
func (l *ledger) take(region string, key store.Key, credit int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := ledgerKey{region, key}
	e, ok := l.m[k]
	delete(l.m, k)
	if !ok {
		return 0
	}
	return min(credit, e.units)
}

func (l *ledger) put(region string, key store.Key, units int64, expires time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.m) >= MaxLedger {
		now := time.Now()
		for k, e := range l.m {
			if e.expires.Before(now) {
				delete(l.m, k)
			}
		}
		if len(l.m) >= MaxLedger {
			return // the credit of this grant will be refused: fewer admitted
		}
	}
	// The ledger holds what may still come back after the grant ends,
	// for a credit sent with the region's next call.
	l.m[ledgerKey{region, key}] = ledgerEntry{units: units, expires: expires}
}

// Handler answers other regions' grant calls on GrantPath.
func (r *Regions) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+GrantPath, r.serveGrant)
	return mux
}

type httpError struct {
	status int
	refusal
}

func (e *httpError) Error() string { return e.Message }

func refuse(status int, reason, format string, args ...any) error {
	return &httpError{status, refusal{reason, fmt.Sprintf(format, args...)}}
}

func (r *Regions) serveGrant(w http.ResponseWriter, req *http.Request) {
	ans, err := r.grant(req)
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		var he *httpError
		if !errors.As(err, &he) {
			he = &httpError{http.StatusServiceUnavailable, refusal{"StoreUnavailable", err.Error()}}
		}
		r.metrics.served.WithLabelValues(he.Reason).Inc()
		w.WriteHeader(he.status)
		_ = json.NewEncoder(w).Encode(he.refusal)
		return
	}
	r.metrics.served.WithLabelValues(ReasonReachable).Inc()
	_ = json.NewEncoder(w).Encode(ans)
}

// grant decides one peer's grant call.
func (r *Regions) grant(req *http.Request) (grantAnswer, error) {
	var ans grantAnswer
	identity, err := r.authenticate(req)
	if err != nil {
		return ans, err
	}
	var c grantCall
	dec := json.NewDecoder(http.MaxBytesReader(nil, req.Body, MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return ans, refuse(http.StatusBadRequest, ReasonRefused, "a malformed grant call: %v", err)
	}
	if c.Region, err = r.callerRegion(identity, c.Region); err != nil {
		return ans, err
	}
	caller, known := r.peers[c.Region]
	if !known {
		return ans, refuse(http.StatusForbidden, ReasonUnknownRegion, "region %s does not know region %q: add it to spec.regions.peers", r.opts.Region, c.Region)
	}
	caller.learnShare(c.SharePercent)
	p := (*r.policies.Load())[c.Policy]
	if p == nil {
		return ans, refuse(http.StatusNotFound, ReasonRefused, "region %s has no Global policy %q", r.opts.Region, c.Policy)
	}
	var raw store.Key
	if n, err := base64.RawURLEncoding.Decode(raw[:], []byte(c.Key)); err != nil || n != len(raw) || len(c.Key) != 22 {
		return ans, refuse(http.StatusBadRequest, ReasonRefused, "a malformed counter key")
	}
	// The counter is the policy's own: a peer naming one policy reaches
	// only that policy's counters, with that policy's limit.
	key := globalKey(p.ID, raw)
	if h := home(key, r.names); h != r.opts.Region {
		return ans, refuse(http.StatusMisdirectedRequest, ReasonRefused, "region %s is not the home of this counter (%s is)", r.opts.Region, h)
	}
	if r.granter == nil {
		return ans, refuse(http.StatusNotImplemented, ReasonRefused, "region %s counts in memory, which grants nothing: Global limits need a Redis store at every region", r.opts.Region)
	}
	return r.grantOut(req.Context(), c, *p, key)
}

// grantOut takes the grant call c of region c.Region out of counter key of p
// in this region's store, the key's home. Every region's grants, this
// one's own included, are reserves on the counter: together at most
// N·g.
func (r *Regions) grantOut(ctx context.Context, c grantCall, p Policy, key store.Key) (grantAnswer, error) {
	g := r.GrantSize(p.Limit)
	cost := min(max(c.Cost, 1), max(1, p.Limit.Capacity()))
	want := min(max(c.Want, 0), g-1)
	if c.Spend {
		want = 0
	}
	credit := r.ledger.take(c.Region, key, max(c.Credit, 0))
	lr := store.GrantRequest{Key: key, Limit: p.Limit, Cost: cost, Want: want, Credit: credit, CreditWindow: c.CreditWindow,
		Pod: "region:" + c.Region, Bound: int64(len(r.names)) * g, PodCap: g, TTL: r.opts.GrantTTL, Horizon: min(r.opts.GrantTTL, grantHorizon)}
	gr, err := r.granter.Grant(ctx, lr)
	if err != nil {
		return grantAnswer{}, err
	}
	ans := grantAnswer{Allowed: gr.Result.Allowed, Granted: gr.Granted, LifetimeMS: gr.Lifetime.Milliseconds(), Window: gr.Window,
		Remaining: gr.Result.Remaining, RetryAfterMS: retryMS(gr.Result), SharePercent: r.sharePercent()}
	if gr.Result.Allowed && !c.Spend {
		// The call's own unit and the grant may come back as a credit; a
		// request's own cost, spent, may not.
		r.ledger.put(c.Region, key, 1+gr.Granted, time.Now().Add(gr.Lifetime+r.opts.GrantTTL))
	}
	return ans, nil
}

// callSelf is this region's grant call for a key it is the home of: the
// same grant, out of its own store. A store that fails makes the home down, as
// a peer's failed call does: its keys are decided from the partition share
// until the store answers again.
func (r *Regions) callSelf(ctx context.Context, c grantCall) (grantAnswer, error) {
	p := (*r.policies.Load())[c.Policy]
	if p == nil {
		return grantAnswer{}, fmt.Errorf("region %s has no Global policy %q", r.opts.Region, c.Policy)
	}
	var raw store.Key
	if _, err := base64.RawURLEncoding.Decode(raw[:], []byte(c.Key)); err != nil {
		return grantAnswer{}, err
	}
	ans, err := r.grantOut(ctx, c, *p, globalKey(p.ID, raw))
	if err != nil {
		r.self.record(false, ReasonUnreachable, err.Error(), r.now())
		return ans, err
	}
	r.self.record(true, ReasonReachable, "", r.now())
	return ans, nil
}

func retryMS(res algo.Result) int64 {
	if res.Allowed {
		return 0
	}
	if res.RetryAfter == algo.Never || res.RetryAfter <= 0 {
		return max(res.ResetAfter.Milliseconds(), 1)
	}
	return max(res.RetryAfter.Milliseconds(), 1)
}
