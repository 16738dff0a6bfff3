package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/tracing"
)

// The end of a request over HTTP (see limiter/service/lifetime.go): a
// check that admits a request holding Concurrency slots or reservations
// answers a lease ID, in the Sluice-Lease header and the body's
// dynamicMetadata; the application ends the request with the same domain,
// descriptors and the lease:
//
//	POST /v1/ratelimit/release  {"domain", "descriptors", "lease"}
//	POST /v1/ratelimit/settle   {"domain", "descriptors", "lease", "cost"}
//
// release frees the slots and settles reservations at their estimate;
// settle settles them at cost, the units the request really spent. Both
// answer 200 with what each policy ended, 404 when the lease held nothing
// there (ended already, expired, or another request's: nothing changed),
// 503 when the store could not answer (the holdings free themselves when
// they expire), and 400 for a request they refuse.
const (
	ReleasePath = "/v1/ratelimit/release"
	SettlePath  = "/v1/ratelimit/settle"
	// HeaderLease carries the lease ID of an HTTP check that holds.
	HeaderLease = "Sluice-Lease"
	// HeaderFailureMode is, on an HTTP check's answer, the strictest
	// failureMode of the enforcing policies the request matched: what a
	// client that can't reach the limiter should do for such a request.
	HeaderFailureMode = "Sluice-Failure-Mode"
	// LeaseMetadataKey is the key of the lease ID in the dynamic metadata
	// of an RLS answer (and an HTTP check's body): Envoy keeps it under the
	// filter's namespace, envoy.filters.http.ratelimit, where a metadata
	// action of the stream-done rate_limits entry reads it back into the
	// policy's lease entry.
	LeaseMetadataKey = "sluice_lease"
)

// EndRequest is the JSON body of release and settle.
type EndRequest struct {
	Domain      string          `json:"domain"`
	Descriptors []EndDescriptor `json:"descriptors"`
	// Lease is the ID the check answered.
	Lease string `json:"lease"`
	// Cost is the units the request spent (settle only): its reservations
	// are settled at it.
	Cost *int64 `json:"cost,omitempty"`
}

// EndDescriptor is a descriptor, as in a check.
type EndDescriptor struct {
	Entries []EndEntry `json:"entries"`
}

// EndEntry is a descriptor entry.
type EndEntry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// EndResponse is the JSON body of a release or settle answer.
type EndResponse struct {
	Error   string   `json:"error,omitempty"`
	Endings []Ending `json:"endings"`
}

// Ending is what the end did on one policy.
type Ending struct {
	Descriptor int    `json:"descriptor"`
	Policy     string `json:"policy"`
	// Outcome is released (a slot), settled (a reservation), not-held or
	// unavailable.
	Outcome string `json:"outcome"`
	// Held is what the lease held: 1 slot, or the units reserved.
	Held int64 `json:"held,omitempty"`
	// Cost is the cost a reservation was settled at; absent when at its
	// estimate.
	Cost *int64 `json:"cost,omitempty"`
	// Remaining is what the counter has left afterwards.
	Remaining int64  `json:"remaining"`
	Reason    string `json:"reason,omitempty"`
}

func (s *Server) release(w http.ResponseWriter, r *http.Request) { s.end(w, r, false) }

func (s *Server) settle(w http.ResponseWriter, r *http.Request) { s.end(w, r, true) }

// end answers release (settle false) and settle.
func (s *Server) end(w http.ResponseWriter, r *http.Request, settle bool) {
	name := tracing.SpanRelease
	if settle {
		name = tracing.SpanSettle
	}
	r, sp := startHTTP(s.opts.Tracer, r, name)
	defer sp.End()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than the maximum of %d bytes", mbe.Limit))
			return
		}
		writeError(w, http.StatusBadRequest, "reading request body: "+err.Error())
		return
	}
	req, err := decodeEndRequest(body, settle)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	endings, err := s.svc.End(r.Context(), req)
	if err != nil {
		sp.Fail(err)
		writeError(w, httpStatus(err), err.Error())
		return
	}
	traceEnd(sp, req.Domain, endings)
	out := EndResponse{Endings: make([]Ending, len(endings))}
	found, unavailable := false, false
	for i := range endings {
		e := &endings[i]
		out.Endings[i] = Ending{Descriptor: e.Descriptor, Policy: e.Policy.ID(), Outcome: e.Outcome(), Held: e.Held,
			Remaining: e.Result.Remaining, Reason: e.Reason}
		if e.Found && e.Cost != store.AtEstimate && e.Outcome() == "settled" {
			out.Endings[i].Cost = &e.Cost
		}
		if !e.Found && e.Reason == "" {
			out.Endings[i].Reason = service.ReasonNotHeld
		}
		found = found || e.Found
		unavailable = unavailable || e.Reason != ""
	}
	code := http.StatusOK
	switch {
	case found:
	case unavailable:
		code, out.Error = http.StatusServiceUnavailable, "lease "+req.Lease+": "+service.ReasonEndUnavailable
	case len(endings) == 0:
		code, out.Error = http.StatusNotFound, "lease "+req.Lease+": no policy that holds matches these descriptors in domain "+req.Domain
	default:
		code, out.Error = http.StatusNotFound, "lease "+req.Lease+": "+service.ReasonNotHeld+"; nothing changed"
	}
	writeJSON(w, code, out)
}

// decodeEndRequest reads the body of release or settle strictly: unknown
// fields are errors, a settle needs its cost, a release takes none.
func decodeEndRequest(body []byte, settle bool) (*service.EndRequest, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errors.New(`request body is empty: send {"domain": ..., "descriptors": [...], "lease": ...} as the check that answered the lease`)
	}
	var in EndRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, errors.New("invalid request body: " + err.Error())
	}
	if dec.More() {
		return nil, errors.New("invalid request body: more than one JSON value")
	}
	out := &service.EndRequest{Domain: in.Domain, Lease: in.Lease, Cost: store.AtEstimate,
		Descriptors: make([]service.Descriptor, len(in.Descriptors))}
	for i, d := range in.Descriptors {
		es := make([]compiled.Entry, len(d.Entries))
		for j, e := range d.Entries {
			es[j] = compiled.Entry{Key: e.Key, Value: e.Value}
		}
		out.Descriptors[i].Entries = es
	}
	switch {
	case settle && in.Cost == nil:
		return nil, errors.New("cost is required: the units the request spent, at which its reservations are settled (release settles them at their estimate)")
	case !settle && in.Cost != nil:
		return nil, errors.New("cost is not taken by release, which settles reservations at their estimate: send it to " + SettlePath)
	case in.Cost != nil && *in.Cost < 0:
		return nil, fmt.Errorf("cost %d is negative: send the units the request spent, 0 or more", *in.Cost)
	case in.Cost != nil:
		out.Cost = *in.Cost
	}
	return out, nil
}
