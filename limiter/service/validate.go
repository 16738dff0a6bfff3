package service

import (
	"fmt"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/limiter/compiled"
)

// Request bounds. A request over them is refused (refuse.go): a denial
// with a reason when it matches an enforcing policy, never counted.
const (
	MaxDescriptors = 16
	MaxEntries     = 16
	MaxEntryLength = 1024
)

// ValidateShape refuses, with an *InvalidArgumentError, the only requests
// the service answers with an error: those that select no policy and that
// no gateway sends by mistake (an empty domain, one longer than any
// policy's, no descriptors). Everything else a request may carry wrong is
// a refusal, answered as a denial (refuse.go): a gateway that fails open on
// errors must not be able to skip a limit with it.
func ValidateShape(req *Request) error {
	if req.Domain == "" {
		return invalidf("domain is empty")
	}
	if len(req.Domain) > MaxEntryLength {
		return invalidf("domain is %d bytes long, the maximum is %d", len(req.Domain), MaxEntryLength)
	}
	if len(req.Descriptors) == 0 {
		return invalidf("descriptors are empty: send at least one")
	}
	return nil
}

// Validate refuses the requests the service will not count, with an
// *InvalidArgumentError that names what is wrong, the first thing found in
// the request's order. The names are those of the RLS request, which the
// HTTP check takes as JSON too. Decide answers the problems past
// ValidateShape as denials (refuse.go); the status peek and the ends of
// requests (release, settle), which admit nothing, as errors.
func (s *Service) Validate(req *Request) error {
	if err := ValidateShape(req); err != nil {
		return err
	}
	if err := s.validateRequest(req); err != nil {
		return err
	}
	for i := range req.Descriptors {
		if err := s.validateDescriptor(i, &req.Descriptors[i], nil); err != nil {
			return err
		}
	}
	return nil
}

// validateRequest is Validate's request-wide checks past ValidateShape.
func (s *Service) validateRequest(req *Request) error {
	if len(req.Descriptors) > MaxDescriptors {
		return invalidf("%d descriptors, the maximum is %d", len(req.Descriptors), MaxDescriptors)
	}
	if req.HitsAddend > uint64(s.opts.MaxCost) {
		return invalidf("hits_addend %d exceeds the maximum %d", req.HitsAddend, s.opts.MaxCost)
	}
	return nil
}

// tooManyEntries is what validateDescriptor says of a descriptor with more
// than MaxEntries entries, or "".
func tooManyEntries(i int, d *Descriptor) string {
	if len(d.Entries) <= MaxEntries {
		return ""
	}
	return fmt.Sprintf("descriptors[%d] has %d entries, the maximum is %d", i, len(d.Entries), MaxEntries)
}

// validateDescriptor checks descriptor i; its own limit is bounded here in
// a domain dom that decides own limits (validateOverride), and elsewhere
// by each policy that opted in to it, or ignored (override.go).
func (s *Service) validateDescriptor(i int, d *Descriptor, dom *compiled.Domain) error {
	if len(d.Entries) == 0 {
		return invalidf("descriptors[%d] has no entries", i)
	}
	if msg := tooManyEntries(i, d); msg != "" {
		return invalidf("%s", msg)
	}
	if d.HasHitsAddend && d.HitsAddend > uint64(s.opts.MaxCost) {
		return invalidf("descriptors[%d].hits_addend %d exceeds the maximum %d", i, d.HitsAddend, s.opts.MaxCost)
	}
	if d.NegativeHits {
		return invalidf("descriptors[%d].is_negative_hits is not supported", i)
	}
	for j := range d.Entries {
		e := &d.Entries[j]
		switch {
		case e.Key == "":
			return invalidf("descriptors[%d].entries[%d] has an empty key", i, j)
		case len(e.Key) > MaxEntryLength:
			return invalidf("descriptors[%d].entries[%d].key is %d bytes long, the maximum is %d", i, j, len(e.Key), MaxEntryLength)
		case len(e.Value) > MaxEntryLength:
			return invalidf("descriptors[%d].entries[%d].value is %d bytes long, the maximum is %d", i, j, len(e.Value), MaxEntryLength)
		case !utf8.ValidString(e.Key):
			return invalidf("descriptors[%d].entries[%d].key is not valid UTF-8", i, j)
		case !utf8.ValidString(e.Value):
			// Envoy copies a header's bytes (0x80-0xff among them) into a
			// value; gRPC's codec takes them as sent (codec.go).
			return invalidf("descriptors[%d].entries[%d].value is not valid UTF-8", i, j)
		case e.Key == s.opts.IdempotencyEntry:
			if err := s.validateIdempotencyEntry(i, j, d.Entries); err != nil {
				return err
			}
		}
	}
	if d.LimitOverride && dom.DecidesOwnLimits() {
		return s.validateOverride(i, d, dom)
	}
	return nil
}
