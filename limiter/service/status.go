package service

import (
	"context"
	"time"

	"github.com/sluice-dev/sluice/limiter/compiled"
)

// PolicyStatus is one policy's state for a caller, as a peek sees it.
type PolicyStatus struct {
	// Policy is "namespace/name".
	Policy string `json:"policy"`
	// Algorithm is the policy's algorithm, such as TokenBucket.
	Algorithm string `json:"algorithm"`
	// Limit units per PeriodSeconds; Burst is the most admitted at once.
	Limit         int64 `json:"limit"`
	PeriodSeconds int64 `json:"periodSeconds"`
	Burst         int64 `json:"burst"`
	// Remaining is how many units the caller could spend now.
	Remaining int64 `json:"remaining"`
	// ResetSeconds is how long, in whole seconds rounded up, until the
	// caller's counter is back to its full quota.
	ResetSeconds int64 `json:"resetSeconds"`
	// Shadow was true for a shadow policy; the peek no longer reports
	// shadow policies (they are invisible to clients), so it is false.
	Shadow bool `json:"shadow"`
	// Soft is true for a soft policy, which marks the requests over it
	// and never denies.
	Soft bool `json:"soft,omitempty"`
	// Reason is set when the store could not answer and the policy's
	// failure mode made up the figures.
	Reason string `json:"reason,omitempty"`
	// Unknown is true when the store could not answer and no counter
	// could stand in for it (failureMode Open or Closed): Remaining and
	// ResetSeconds are then 0, never a full quota the caller may not have.
	// failureMode Local reports this pod's share.
	Unknown bool `json:"unknown,omitempty"`
	// Penalized is true while the caller's key is penalized
	// (spec.penalty): ResetSeconds is the time left.
	Penalized bool `json:"penalized,omitempty"`
}

// Peek reports every visible policy of domain that entries match, in the
// snapshot's order, without consuming anything: each is decided as a check
// of cost 0 is. Hidden and shadow policies are left out. An unknown domain or an unmatched request gives an empty
// list. Peeks are not counted as decisions. The error, which matches
// ErrInvalidArgument, says what is wrong with a request that Validate
// refuses.
func (s *Service) Peek(ctx context.Context, domain string, entries []compiled.Entry) ([]PolicyStatus, error) {
	req := &Request{Domain: domain, Descriptors: []Descriptor{{Entries: entries}}}
	if err := s.Validate(req); err != nil {
		return nil, err
	}
	out := []PolicyStatus{}
	l := s.loaded.Load()
	d := l.snap.Domain(domain)
	if d == nil {
		return out, nil
	}
	sc := s.scratch.Get().(*scratch)
	defer s.release(sc)
	entries, _ = s.splitIdempotency(sc, entries, "")
	sc.matches = d.AppendMatches(sc.matches[:0], entries)
	for _, p := range sc.matches {
		if p.Hidden || p.Shadow {
			// A hidden policy tells its caller nothing; a shadow one is
			// invisible to clients, as in every answer.
			continue
		}
		dec := s.decide(ctx, sc, p, l.policies[p], domain, entries, 0, "", budgetAsk)
		out = append(out, policyStatus(p, dec))
	}
	return out, nil
}

func policyStatus(p *compiled.Policy, d Decision) PolicyStatus {
	switch d.Reason {
	case ReasonFailedOpen, ReasonFailedClosed, ReasonBudgetFailedClosed, ReasonBudgetNoShare:
		// Open's figures are a full quota, Closed's none: neither is the
		// caller's (a peek under load once told 1000 of 1000 left after
		// 800 were reserved). The other reasons come with a counter's
		// figures: the pod's share, or the store's last denial.
		d.Result.Remaining, d.Result.ResetAfter = 0, 0
		st := policyStatusOf(p, d)
		st.Unknown = true
		return st
	}
	return policyStatusOf(p, d)
}

func policyStatusOf(p *compiled.Policy, d Decision) PolicyStatus {
	return PolicyStatus{
		Policy:        p.ID(),
		Algorithm:     p.Limit.Algorithm.String(),
		Limit:         p.Limit.Limit,
		PeriodSeconds: ceilSeconds(p.Limit.Span(time.Now())),
		Burst:         p.Limit.Capacity(),
		Remaining:     d.Result.Remaining,
		ResetSeconds:  ceilSeconds(max(0, d.Result.ResetAfter)),
		Shadow:        p.Shadow,
		Soft:          p.Soft,
		Reason:        d.Reason,
		Penalized:     d.Result.Penalized,
	}
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
