package service

import (
	"context"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/compiled"
)

// Explained is one policy a request matches, and what a cost-0 peek of its
// counter says: the admin plane's explain (kubectl sluice explain).
type Explained struct {
	Policy *compiled.Policy
	// Result is the peek's: Remaining, ResetAfter, Penalized.
	Result algo.Result
	// Reason is set when the store could not answer and the policy's
	// failure mode made up the figures.
	Reason string
}

// WouldDeny reports whether a request of cost 1 would be denied by e's
// policy now.
func (e Explained) WouldDeny() bool { return e.Result.Penalized || e.Result.Remaining < 1 }

// Explain reports every policy of domain that entries match, shadow and
// hidden ones too, in the snapshot's order, without consuming anything
// (each is decided as a check of cost 0 is, as Peek does). It is for the
// admin plane, whose caller decides what of each to show. An unknown
// domain or an unmatched request gives an empty list; the error matches
// ErrInvalidArgument for a request Validate refuses.
func (s *Service) Explain(ctx context.Context, domain string, entries []compiled.Entry) ([]Explained, error) {
	req := &Request{Domain: domain, Descriptors: []Descriptor{{Entries: entries}}}
	if err := s.Validate(req); err != nil {
		return nil, err
	}
	out := []Explained{}
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
		dec := s.decide(ctx, sc, p, l.policies[p], domain, entries, 0, "", budgetAsk)
		out = append(out, Explained{Policy: p, Result: dec.Result, Reason: dec.Reason})
	}
	return out, nil
}
