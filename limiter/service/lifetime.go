package service

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/store"
)

// Holdings: limits over a request's lifetime. A policy that holds
// (compiled.Policy.Holds) keeps what a check takes until the request ends: a
// Concurrency policy a slot, a policy with spec.reserve a reservation of
// the request's cost (its estimate).
//
//   - A check takes its holdings under the request's lease: one
//     unguessable token (LeaseBytes random bytes) per request, answered as
//     Response.Lease. The store names each holding after the token and the
//     counter it is held on (holdKey), so a lease is bound to the domain and
//     descriptor values it was taken with: naming another counter, or
//     another request's lease, finds nothing and changes no counter.
//   - A check that ends over limit holds nothing: what it took is given
//     back (slots released, reservations refunded) before it answers.
//   - The request's end is a call with the same descriptors and the lease:
//     over RLS, a descriptor that carries a policy's lease entry (Envoy's
//     call at stream end, apply_on_stream_done) ends the holdings of the
//     holding policies it matches, and spends nothing on any policy; over
//     HTTP, End. A Concurrency slot is released; a reservation is settled
//     at the descriptor's cost, the actual one (hits_addend), refunding or
//     charging the difference, or at its estimate (store.AtEstimate).
//   - Ending a lease twice, an expired one or one never taken on the
//     counter is harmless: the Ending says it found nothing.
//   - A holding taken while the store could not answer is in the fallback
//     store (failureMode Local), or nowhere (Open): ending it looks in the
//     store, then in the fallback.
//   - Idempotency keys do not apply to holding policies: each check takes
//     its own holding.

// LeaseBytes is the length of a lease token; its String is 22 characters.
const LeaseBytes = 16

// Lease is the token a request's holdings are taken under.
type Lease [LeaseBytes]byte

// String encodes the lease in 22 URL-safe base64 characters.
func (l Lease) String() string { return base64.RawURLEncoding.EncodeToString(l[:]) }

// ParseLease reads a lease that String encoded.
func ParseLease(s string) (Lease, error) {
	var l Lease
	if len(s) != base64.RawURLEncoding.EncodedLen(LeaseBytes) {
		return l, fmt.Errorf("lease ID %q is malformed: want the %d characters the check answered", clip(s), base64.RawURLEncoding.EncodedLen(LeaseBytes))
	}
	if _, err := base64.RawURLEncoding.Decode(l[:], []byte(s)); err != nil {
		return l, fmt.Errorf("lease ID %q is malformed: want the %d characters the check answered", clip(s), base64.RawURLEncoding.EncodedLen(LeaseBytes))
	}
	return l, nil
}

// clip shortens a caller's value for an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// newLease draws a lease token.
func newLease() Lease {
	var l Lease
	_, _ = rand.Read(l[:]) // never fails (crypto/rand)
	return l
}

// holdKey names the holding of lease on counter: per counter, so that a
// lease works only with the domain and descriptors it was taken with, and
// hashed, so that the store holds nothing a caller could replay.
func holdKey(kb *store.KeyBuilder, counter store.Key, lease Lease) store.Key {
	kb.Reset()
	kb.Add("hold")
	kb.Add(string(counter[:]))
	kb.Add(string(lease[:]))
	return kb.Key()
}

// Ending is what the end of a request did on one holding policy.
type Ending struct {
	// Descriptor is the index of the request's descriptor that ended it.
	Descriptor int
	Policy     *compiled.Policy
	// Found reports that the lease held something live on the policy's
	// counter, which is ended now. Otherwise nothing changed: released or
	// settled already, expired (a reservation then stays at its estimate),
	// or never taken with these descriptors.
	Found bool
	// Held is what it held: the reservation's units, or 1 slot.
	Held int64
	// Cost is the actual cost a reservation was settled at, or
	// store.AtEstimate; 0 for a slot.
	Cost int64
	// Result describes the counter afterwards.
	Result algo.Result
	// Reason is set when the store could not answer: the holding frees
	// itself when it expires.
	Reason string
	key    store.Key // the counter
}

// ended reports whether es ended p's counter key already: two descriptors
// of one request on one counter end it once.
func ended(es []Ending, p *compiled.Policy, key store.Key) bool {
	for i := range es {
		if es[i].Policy == p && es[i].key == key {
			return true
		}
	}
	return false
}

// Outcome words an Ending for a caller.
func (e *Ending) Outcome() string {
	switch {
	case e.Reason != "":
		return "unavailable"
	case !e.Found:
		return "not-held"
	case e.Policy.Limit.Algorithm == algo.Concurrency:
		return "released"
	}
	return "settled"
}

// ReasonNotHeld explains an Ending that found nothing.
const ReasonNotHeld = "the lease holds nothing on this policy's counter: released or settled already, expired, or never taken with these descriptors"

// ReasonEndUnavailable explains an Ending the store could not answer.
const ReasonEndUnavailable = "store unavailable: the holding frees itself when it expires"

// holding is one thing a check holds, to give back if it ends over limit.
type holding struct {
	p         *compiled.Policy
	ps        *policyState
	key, hold store.Key
	dec       Decision
}

// lifetime is one request's lease and what it holds.
type lifetime struct {
	lease Lease
	held  []holding
}

// holds reports whether any policy of domain d holds.
func holds(d *compiled.Domain) bool { return len(d.LeaseEntries()) > 0 }

// leaseEntry returns the value of the first of d's lease entries that
// entries carry.
func leaseEntry(d *compiled.Domain, entries []compiled.Entry) (key, value string, ok bool) {
	for _, k := range d.LeaseEntries() {
		for i := range entries {
			if entries[i].Key == k {
				return k, entries[i].Value, true
			}
		}
	}
	return "", "", false
}

// validateLeaseEntries refuses descriptor i, d, when it carries a lease
// entry of the domain that is not a lease ID, before anything is decided.
func validateLeaseEntries(dom *compiled.Domain, i int, d *Descriptor) error {
	if dom == nil || !holds(dom) {
		return nil
	}
	for j, e := range d.Entries {
		if slices.Contains(dom.LeaseEntries(), e.Key) {
			if _, err := ParseLease(e.Value); err != nil {
				return invalidf("descriptors[%d].entries[%d] (%s): %v", i, j, e.Key, err)
			}
		}
	}
	return nil
}

// takeHolding decides p for a check that holds: a Concurrency slot (any
// cost takes one, 0 too) or a reservation of cost (at least 1: every
// reservation that passes holds and is settled), under the request's
// lease.
func (s *Service) takeHolding(ctx context.Context, sc *scratch, p *compiled.Policy, ps *policyState, entries []compiled.Entry, cost int64, lt *lifetime) Decision {
	req := store.Request{Key: p.CounterKey(&sc.kb, entries), Limit: p.Limit, Cost: cost, HoldTTL: p.HoldTTL, Tenant: p.Namespace}
	sc.key = req.Key
	// A request's priority leaves its reserve, of units or of slots; the
	// holding's end is no decision and leaves none.
	req.Limit.Headroom, sc.level = priorityHeadroom(p, entries)
	if p.Limit.Algorithm == algo.Concurrency {
		// Two descriptors of a request on one counter hold one slot.
		for i := range lt.held {
			if h := &lt.held[i]; h.p == p && h.key == req.Key {
				return h.dec
			}
		}
	}
	if cost < 1 {
		// A slot is one whatever the cost, and an estimate of 0 reserves
		// one unit, as charge-at-end does: a check that passes always
		// holds something to end or settle, so a client that sets its
		// cost to 0 can't pass without one.
		cost = 1
		req.Cost = cost
	}
	if cost > 0 {
		req.Hold = holdKey(&sc.kb, req.Key, lt.lease)
	}
	r, reason := ps.store.decide(ctx, req, budgetAsk)
	dec := Decision{Policy: p, Result: r, Reason: reason}
	if r.Allowed && cost > 0 && reason != ReasonFailedOpen {
		lt.held = append(lt.held, holding{p: p, ps: ps, key: req.Key, hold: req.Hold, dec: dec})
	}
	return dec
}

// giveBack ends what a check that ended over limit took: it must hold
// nothing. A store that can't answer leaves the holdings to expire.
func (s *Service) giveBack(ctx context.Context, lt *lifetime) {
	for _, h := range lt.held {
		// A reservation refunded in full: it spent nothing.
		st, reason := h.ps.store.settle(ctx, store.SettleRequest{Key: h.key, Limit: h.p.Limit, Hold: h.hold, Actual: 0, Tenant: h.p.Namespace})
		if reason != "" {
			s.log.Debug("Could not give back the holding of a denied request: it frees itself when it expires", "policy", h.p.ID(), "reason", reason)
		}
		h.ps.stats.countEnding(&Ending{Policy: h.p, Found: st.Found, Reason: reason})
	}
	lt.held = lt.held[:0]
}

// endDescriptor ends the holdings of the lease in descriptors[i] on every
// holding policy of the domain that its entries match and whose lease
// entry it carries, settling reservations at cost. It spends nothing on
// any other policy. The Decision reports the first policy ended.
func (s *Service) endDescriptor(ctx context.Context, pl *plan, i int) Decision {
	st, sc, resp := &pl.steps[i], &pl.sc, pl.resp
	entries, cost := st.entries, st.cost
	var out Decision
	for _, p := range st.matches {
		v, ok := lookupEntry(entries, p.LeaseEntry)
		if !p.Holds() || !ok {
			continue
		}
		lease, err := ParseLease(v)
		if err != nil {
			continue // validateLeaseEntries refused it before
		}
		if ended(resp.Endings, p, p.CounterKey(&sc.kb, entries)) {
			continue
		}
		e := s.end(ctx, sc, p, pl.l.policies[p], entries, lease, min(cost, p.MaxCost))
		e.Descriptor = i
		resp.Endings = append(resp.Endings, e)
		if out.Policy == nil {
			out = Decision{Policy: p, Result: e.Result, Reason: e.Reason}
		}
	}
	return out
}

// end ends lease's holding on p's counter for entries.
func (s *Service) end(ctx context.Context, sc *scratch, p *compiled.Policy, ps *policyState, entries []compiled.Entry, lease Lease, cost int64) Ending {
	key := p.CounterKey(&sc.kb, entries)
	req := store.SettleRequest{Key: key, Limit: p.Limit, Hold: holdKey(&sc.kb, key, lease), Actual: cost, Tenant: p.Namespace}
	e := Ending{Policy: p, Cost: cost, key: key}
	if p.Limit.Algorithm == algo.Concurrency {
		req.Actual, e.Cost = 0, 0
	}
	st, reason := ps.store.settle(ctx, req)
	e.Found, e.Held, e.Result, e.Reason = st.Found, st.Held, st.Result, reason
	if ps.stats != nil {
		ps.stats.countEnding(&e)
	}
	return e
}

func lookupEntry(entries []compiled.Entry, key string) (string, bool) {
	for i := range entries {
		if entries[i].Key == key {
			return entries[i].Value, true
		}
	}
	return "", false
}

// EndRequest ends a request's holdings over HTTP: the descriptors of the
// check that took them, and its lease.
type EndRequest struct {
	Domain      string
	Descriptors []Descriptor
	Lease       string
	// Cost is the request's actual cost, at which its reservations are
	// settled; store.AtEstimate settles them at their estimate.
	Cost int64
}

// End ends the holdings of req.Lease on every holding policy of the domain
// that each descriptor matches: Concurrency slots are released,
// reservations settled at req.Cost. It spends nothing on any other policy.
// The Endings say what each policy found; a lease that held nothing is no
// error. The error, which matches ErrInvalidArgument, names what is wrong
// with a request it refuses before ending anything: a malformed lease or a
// negative cost. A cost above a reservation's maxCost (or above the
// limiter's maximum) settles it at that cap: the request spent it, and a
// settle refused would leave it charged at its estimate alone.
func (s *Service) End(ctx context.Context, req *EndRequest) ([]Ending, error) {
	r := &Request{Domain: req.Domain, Descriptors: req.Descriptors}
	if err := s.Validate(r); err != nil {
		return nil, err
	}
	lease, err := ParseLease(req.Lease)
	if err != nil {
		return nil, invalidf("lease: %v", err)
	}
	switch {
	case req.Cost < store.AtEstimate:
		return nil, invalidf("cost %d is negative: send the units the request spent, 0 or more", req.Cost)
	}
	l := s.loaded.Load()
	d := l.snap.Domain(req.Domain)
	if d == nil {
		return []Ending{}, nil
	}
	sc := s.scratch.Get().(*scratch)
	defer s.release(sc)
	out := []Ending{}
	for i := range req.Descriptors {
		entries, _ := s.splitIdempotency(sc, req.Descriptors[i].Entries, "")
		sc.matches = d.AppendMatches(sc.matches[:0], entries)
		for _, p := range sc.matches {
			if !p.Holds() || ended(out, p, p.CounterKey(&sc.kb, entries)) {
				continue
			}
			e := s.end(ctx, sc, p, l.policies[p], entries, lease, min(req.Cost, p.MaxCost, s.opts.MaxCost))
			e.Descriptor = i
			out = append(out, e)
		}
	}
	return out, nil
}

// errNotHolder is the error of a settle on a store that keeps no holdings.
var errNotHolder = errors.New("the store keeps no holdings")

// settle ends a holding in the store, or when the store can't answer or
// finds nothing, in the fallback store, where it was taken while the
// store could not answer (failureMode Local) or past the namespace's
// store budget (any failure mode but Closed). reason is set when neither
// could answer.
func (f *failover) settle(ctx context.Context, req store.SettleRequest) (store.Settlement, string) {
	var (
		st  store.Settlement
		err = errNotHolder
	)
	if h, ok := f.next.(store.Holder); ok {
		st, err = h.Settle(ctx, req)
	}
	if err != nil {
		f.errors.inc(err)
		f.log.Debug("Store error on the end of a request", "policy", f.policy, "error", err)
	}
	if err == nil && st.Found {
		return st, ""
	}
	if fb, ok := f.fallback.(store.Holder); ok && f.mode != compiled.FailClosed {
		if fst, ferr := fb.Settle(ctx, req); ferr == nil && fst.Found {
			return fst, ""
		}
	}
	if err != nil {
		return st, ReasonEndUnavailable
	}
	return st, ""
}
