package service

import (
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/compiled"
)

// Refusals: a request the service won't count because of what the client
// sent (a cost above a policy's maxCost or above --max-cost, a value over
// MaxEntryLength, too many descriptors or entries, a malformed idempotency
// key or lease, negative hits, a limit override) is not an error. Gateways
// fail open on errors, so an error would let one client header skip every
// limit of the request. It is a denial with a reason that names the field
// and the cap: OVER_LIMIT over RLS, the deny status over HTTP, with
// Decision.Refused set. It spends nothing, is counted as ResultRefused by
// every policy it matched, and is never a strike of spec.penalty (it never
// reaches the store).
//
// A refusal denies only when it concerns an enforcing policy: a refused
// descriptor that matches one (or, for a request too large to match, a
// domain that has one), with enforcement on. A refused descriptor that
// only shadow or soft policies match, or none, is answered as unmatched:
// nothing would have counted it, and a shadow policy never changes an
// answer. An unknown domain is allowed, as always.

// refusedDecision is the decision of a refused descriptor, or the reported
// one of a refused request: denied, with reason, and no time after which a
// retry would do better. p is the policy whose cap was passed, if any.
func refusedDecision(p *compiled.Policy, reason string) Decision {
	return Decision{OverLimit: true, Refused: true, RetryAfter: algo.Never, Denied: p, Reason: reason}
}

// screen answers, into resp, a request that carries what the service won't
// count, and reports whether it did (then nothing is to be decided). When
// it did not, skip has bit i set for each refused descriptor i that no
// enforcing policy matches: it is answered as unmatched, and the others
// are decided.
func (s *Service) screen(l *loaded, dom *compiled.Domain, req *Request, resp *Response) (answered bool, skip uint32) {
	enforcing := dom != nil && s.enforcing(l)
	// The request as a whole.
	reason, wide := "", false
	if err := s.validateRequest(req); err != nil {
		reason, wide = err.Error(), len(req.Descriptors) > MaxDescriptors
	} else if err := ValidateIdempotencyKey(req.IdempotencyKey); err != nil {
		reason = "Idempotency-Key: " + err.Error()
	}
	if reason != "" {
		deny := enforcing && ((wide && hasEnforcing(dom)) || (!wide && s.matchesEnforcing(dom, req, -1)))
		s.refuse(l, dom, req, -1, nil, reason, deny, resp)
		return true, 0
	}
	// Each descriptor.
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		err := s.validateDescriptor(i, d, dom)
		if err == nil {
			err = validateLeaseEntries(dom, i, d)
		}
		if err == nil {
			continue
		}
		wide := len(d.Entries) > MaxEntries
		if enforcing && ((wide && hasEnforcing(dom)) || (!wide && s.matchesEnforcing(dom, req, i))) {
			s.refuse(l, dom, req, i, nil, err.Error(), true, resp)
			return true, 0
		}
		if !wide {
			s.countRefused(l, dom, d)
		}
		skip |= 1 << i
	}
	// Costs, against the caps of the enforcing policies matched, are
	// checked on the request's plan (checkCosts).
	return false, skip
}

// RefuseInto answers, into resp, req refused for reason, a problem the
// caller found in what the client sent (such as forward-auth's over-long
// or repeated header): a denial when req matches an enforcing policy,
// else an allowance of unmatched descriptors. Nothing is counted but the
// refusal.
func (s *Service) RefuseInto(req *Request, reason string, resp *Response) {
	*resp = Response{Decisions: resp.Decisions[:0], Violated: resp.Violated[:0], SoftLimited: resp.SoftLimited[:0], Endings: resp.Endings[:0]}
	l := s.loaded.Load()
	dom := l.snap.Domain(req.Domain)
	deny := dom != nil && s.enforcing(l) && s.matchesEnforcing(dom, req, -1)
	s.refuse(l, dom, req, -1, nil, reason, deny, resp)
}

// refuse answers req, refused for reason (its descriptor i, or the whole
// request when i is -1; p the policy whose cap it passed, if any): denied
// when deny, else every descriptor unmatched. Either way every policy that
// the request matches counts it as refused.
func (s *Service) refuse(l *loaded, dom *compiled.Domain, req *Request, i int, p *compiled.Policy, reason string, deny bool, resp *Response) {
	n := len(req.Descriptors)
	if n <= MaxDescriptors {
		for range n {
			resp.Decisions = append(resp.Decisions, Decision{})
		}
	}
	for j := range min(n, MaxDescriptors) {
		s.countRefused(l, dom, &req.Descriptors[j])
	}
	if !deny {
		return
	}
	resp.OverLimit = true
	resp.Reported = refusedDecision(p, reason)
	if i >= 0 && i < len(resp.Decisions) {
		resp.Decisions[i] = resp.Reported
	} else {
		for j := range resp.Decisions {
			resp.Decisions[j] = resp.Reported
		}
	}
	if p != nil && !p.Hidden {
		resp.Violated = append(resp.Violated, p)
	}
}

// countRefused counts a refusal on every policy of dom that d matches; a
// descriptor with more entries than MaxEntries is not matched.
func (s *Service) countRefused(l *loaded, dom *compiled.Domain, d *Descriptor) {
	if dom == nil || len(d.Entries) > MaxEntries {
		return
	}
	sc := s.scratch.Get().(*scratch)
	defer s.release(sc)
	entries, _ := s.splitIdempotency(sc, d.Entries, "")
	sc.matches = dom.AppendMatches(sc.matches[:0], entries)
	for _, p := range sc.matches {
		if ps := l.policies[p]; ps != nil && ps.stats != nil {
			ps.stats.refused.Add(1)
		}
	}
}

// matchesEnforcing reports whether descriptor i of req (every one when i
// is -1, at most MaxDescriptors of them) matches an enforcing policy of dom.
func (s *Service) matchesEnforcing(dom *compiled.Domain, req *Request, i int) bool {
	if dom == nil {
		return false
	}
	sc := s.scratch.Get().(*scratch)
	defer s.release(sc)
	for j := range min(len(req.Descriptors), MaxDescriptors) {
		d := &req.Descriptors[j]
		if i >= 0 && j != i {
			continue
		}
		if len(d.Entries) > MaxEntries {
			if hasEnforcing(dom) {
				return true // too many to match: any policy might
			}
			continue
		}
		entries, _ := s.splitIdempotency(sc, d.Entries, "")
		sc.matches = dom.AppendMatches(sc.matches[:0], entries)
		for _, p := range sc.matches {
			if !p.Shadow && !p.Soft {
				return true
			}
		}
	}
	return false
}

// hasEnforcing reports whether dom has an enforcing policy.
func hasEnforcing(dom *compiled.Domain) bool {
	for _, p := range dom.Policies {
		if !p.Shadow && !p.Soft {
			return true
		}
	}
	return false
}
