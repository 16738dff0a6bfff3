package service

import (
	"strconv"

	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/store"
)

// MaxIdempotencyKeyLength bounds an idempotency key, from the
// Idempotency-Key header or the descriptor entry.
const MaxIdempotencyKeyLength = 256

// ValidateIdempotencyKey refuses an idempotency key longer than
// MaxIdempotencyKeyLength bytes. The empty key means none.
func ValidateIdempotencyKey(k string) error {
	if len(k) > MaxIdempotencyKeyLength {
		return invalidf("idempotency key is %d bytes long, the maximum is %d", len(k), MaxIdempotencyKeyLength)
	}
	return nil
}

// validateIdempotencyEntry checks entries[j] of descriptors[i], the
// idempotency entry: a key, valid, and the only one.
func (s *Service) validateIdempotencyEntry(i, j int, entries []compiled.Entry) error {
	e := &entries[j]
	if e.Value == "" {
		return invalidf("descriptors[%d].entries[%d] (%s) is empty: send an idempotency key, or leave the entry out", i, j, e.Key)
	}
	if err := ValidateIdempotencyKey(e.Value); err != nil {
		return invalidf("descriptors[%d].entries[%d] (%s): %v", i, j, e.Key, err)
	}
	if s.idempotencyEntry(entries[j+1:]) >= 0 {
		return invalidf("descriptors[%d] has more than one %s entry", i, e.Key)
	}
	return nil
}

// IdempotencyEntry is the descriptor entry key that carries an idempotency
// key (Options.IdempotencyEntry).
func (s *Service) IdempotencyEntry() string { return s.opts.IdempotencyEntry }

// AcceptEntry is the descriptor entry key that carries the client's Accept
// header over RLS (Options.AcceptEntry).
func (s *Service) AcceptEntry() string { return s.opts.AcceptEntry }

// idempotencyEntry is the index of the idempotency entry, or -1.
func (s *Service) idempotencyEntry(entries []compiled.Entry) int {
	for i := range entries {
		if entries[i].Key == s.opts.IdempotencyEntry {
			return i
		}
	}
	return -1
}

// splitIdempotency takes the idempotency entry out of entries, into sc:
// the entry names the request, not what it asks for, so it is left out of
// matching and counter keys. Its value wins over the request's key idem.
func (s *Service) splitIdempotency(sc *scratch, entries []compiled.Entry, idem string) ([]compiled.Entry, string) {
	i := s.idempotencyEntry(entries)
	if i < 0 {
		return entries, idem
	}
	sc.entries = append(append(sc.entries[:0], entries[:i]...), entries[i+1:]...)
	return sc.entries, entries[i].Value
}

// idempotencyRecord names the record of a request's decision by policy p
// on counter: scoped per domain, policy and counter, so that one caller
// can't replay another's decision, nor a key of one policy another's; and
// named after the whole request, every entry of its descriptor (the
// idempotency entry taken out) and its cost, so that a key replays only
// the request it was first sent with. A different request with a used key
// names another record: it is decided afresh.
func idempotencyRecord(kb *store.KeyBuilder, domain string, p *compiled.Policy, counter store.Key, entries []compiled.Entry, cost int64, idem string) store.Key {
	kb.Reset()
	kb.Add("idempotency")
	kb.Add(domain)
	kb.Add(p.ID())
	kb.Add(string(counter[:]))
	kb.Add(idem)
	kb.Add(strconv.FormatInt(cost, 10))
	for i := range entries {
		kb.Add(entries[i].Key)
		kb.Add(entries[i].Value)
	}
	return kb.Key()
}

// warnIdempotencyDescriptors warns of the policies of snap that match on
// the idempotency entry, which never reaches matching, and of the
// forward-auth mappings that build it, which forward-auth refuses.
func (s *Service) warnIdempotencyDescriptors(snap *compiled.Snapshot) {
	for _, m := range snap.ForwardAuth {
		for _, d := range m.Descriptors {
			if d.Key == s.opts.IdempotencyEntry {
				s.log.Error("A forwardAuth mapping builds the idempotency descriptor entry, which would let callers choose their idempotency key: forward-auth refuses its calls (500) until the entry is renamed",
					"domain", m.Domain, "entry", d.Key)
			}
		}
	}
	for _, p := range snap.Policies {
		for _, d := range p.Descriptors {
			if d.Key == s.opts.IdempotencyEntry {
				s.log.Warn("Policy matches on the idempotency descriptor entry, which is left out of matching: it will never match",
					"policy", p.ID(), "entry", d.Key)
			}
		}
	}
}
