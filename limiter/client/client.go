// Package client is the Go client of a Sluice limiter, for applications
// that limit themselves: checks, Concurrency slots (acquire, release) and
// reserve-then-settle costs, over the limiter's HTTP API, with net/http
// middleware and a gRPC server interceptor that answer 429 and
// RESOURCE_EXHAUSTED with the limiter's headers and end each request's
// holdings when it completes.
//
// When the limiter can't be reached (a connection error, a timeout, an
// answer 5xx), a Client follows the failure mode of the policies the
// request matched: it learns it from the limiter's answers
// (Sluice-Failure-Mode), per domain and descriptor keys, and uses
// Options.FailureMode until it has. Open and Local allow (the client has
// no share of the limit to count), Closed denies. Such a Decision says so
// (Unavailable) and holds nothing.
//
// A Client is safe for concurrent use.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The limiter's HTTP API.
const (
	checkPath   = "/v1/ratelimit/check"
	releasePath = "/v1/ratelimit/release"
	settlePath  = "/v1/ratelimit/settle"

	headerLease       = "Sluice-Lease"
	headerFailureMode = "Sluice-Failure-Mode"
)

// FailureMode is what a client does when it can't reach the limiter,
// named as a policy's failureMode.
type FailureMode string

const (
	// FailOpen allows the request.
	FailOpen FailureMode = "Open"
	// FailClosed denies it.
	FailClosed FailureMode = "Closed"
	// FailLocal is a policy's Local: the client allows, having no share of
	// the limit to count.
	FailLocal FailureMode = "Local"
)

// ErrNotHeld is matched by the error of a Release or Settle whose lease
// held nothing: ended already, expired, or taken with other descriptors.
// Nothing changed; it is harmless.
var ErrNotHeld = errors.New("lease not held")

// ErrUnavailable is matched by the error of a call that could not reach
// the limiter, or that the limiter could not answer (its store).
var ErrUnavailable = errors.New("limiter unavailable")

// Error is a request the limiter answered with an error (HTTP 400 and
// others: one that selects no policy, such as an empty domain), with its
// message, which names what is wrong.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("sluice: %d: %s", e.Status, e.Message) }

// Options configure a Client.
type Options struct {
	// HTTPClient makes the calls; nil means one with Timeout.
	HTTPClient *http.Client
	// Timeout bounds each call when HTTPClient is nil; 0 means 250ms.
	Timeout time.Duration
	// FailureMode applies when the limiter can't be reached before the
	// client has learned the policies' own; "" means FailOpen.
	FailureMode FailureMode
}

// Client calls one limiter (or a Service in front of several).
type Client struct {
	base  string
	hc    *http.Client
	mode  FailureMode
	mu    sync.Mutex
	modes map[string]FailureMode // learned, by shape (domain and descriptor keys)
}

// maxLearned bounds the failure modes a client remembers; it forgets them
// all when full (they are learned again from the next answers).
const maxLearned = 4096

// New returns a client of the limiter at baseURL, such as
// "http://sluice-limiter.sluice-system:8080".
func New(baseURL string, opts Options) (*Client, error) {
	if !strings.HasPrefix(baseURL, "http://") && !strings.HasPrefix(baseURL, "https://") {
		return nil, fmt.Errorf("sluice: base URL %q: want http:// or https://", baseURL)
	}
	switch opts.FailureMode {
	case "":
		opts.FailureMode = FailOpen
	case FailOpen, FailClosed, FailLocal:
	default:
		return nil, fmt.Errorf("sluice: failure mode %q: want Open, Closed or Local", opts.FailureMode)
	}
	hc := opts.HTTPClient
	if hc == nil {
		if opts.Timeout <= 0 {
			opts.Timeout = 250 * time.Millisecond
		}
		hc = &http.Client{Timeout: opts.Timeout}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), hc: hc, mode: opts.FailureMode, modes: map[string]FailureMode{}}, nil
}

// Entry is one key and value of a descriptor.
type Entry struct {
	Key, Value string
}

// Descriptor is one thing a request spends: the entries policies match,
// and its cost (hits_addend). Cost 0 means the request's.
type Descriptor struct {
	Entries []Entry
	Cost    uint64
}

// Request is one check.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	// Cost is the cost of each descriptor without its own; 0 means 1.
	Cost uint64
}

// Decision is the limiter's answer to a check.
type Decision struct {
	// Allowed reports whether the request may go.
	Allowed bool
	// Header holds the rate-limit headers to give the caller: RateLimit,
	// RateLimit-Policy, X-RateLimit-*, and Retry-After when denied.
	Header http.Header
	// RetryAfter is how long a denied caller should wait (Retry-After).
	RetryAfter time.Duration
	// Status is the HTTP status of a denial: 429, or for a key the
	// limiter penalizes the policy's spec.penalty.status (such as 403).
	// 0 when allowed.
	Status int
	// Lease is what the request holds (Concurrency slots, reservations),
	// to end when it ends; nil when it holds nothing.
	Lease *Lease
	// Unavailable reports that the limiter could not be reached and the
	// failure mode decided; Err says why.
	Unavailable bool
	Err         error
	// Refused reports a denial of what the request carries, which the
	// limiter won't count (a cost above a policy's maxCost, a value over
	// 1 KiB...): the same request is refused again. Header's
	// X-Sluice-Reason names the field and the cap.
	Refused bool
}

// Check asks whether req may go. Policies that hold (Concurrency,
// reserve) take their slot or reservation: end the Decision's Lease when
// the request ends. What the request carries that the limiter won't count
// (a cost above a cap, an over-long value) is a denial (Refused), not an
// error. The error is for a request that selects no policy (an *Error,
// such as for an empty domain) or a ctx that ended; a limiter that can't
// be reached is not an error but a Decision of the failure mode.
func (c *Client) Check(ctx context.Context, req Request) (*Decision, error) {
	body, err := json.Marshal(wireCheck(req))
	if err != nil {
		return nil, err
	}
	resp, err := c.post(ctx, checkPath, body)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return c.unavailable(req, err), nil
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusTooManyRequests:
	case overLimit(msg):
		// A penalized key's denial, answered with spec.penalty.status
		// (400 to 599): a decision, not an error nor an outage.
	case resp.StatusCode >= 500:
		return c.unavailable(req, fmt.Errorf("%w: %d: %s", ErrUnavailable, resp.StatusCode, errorMessage(msg))), nil
	default:
		return nil, &Error{Status: resp.StatusCode, Message: errorMessage(msg)}
	}
	if m := FailureMode(resp.Header.Get(headerFailureMode)); m != "" {
		c.learn(req, m)
	}
	d := &Decision{Allowed: resp.StatusCode == http.StatusOK, Header: rateLimitHeaders(resp.Header)}
	if !d.Allowed {
		d.Status, d.Refused = resp.StatusCode, refused(msg)
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		d.RetryAfter = time.Duration(s) * time.Second
	}
	if id := resp.Header.Get(headerLease); id != "" {
		d.Lease = &Lease{c: c, id: id, domain: req.Domain, descriptors: req.Descriptors}
	}
	return d, nil
}

// Acquire takes a slot of the Concurrency policies that entries match in
// domain (a check of cost 1): release the Decision's Lease when the work
// ends.
func (c *Client) Acquire(ctx context.Context, domain string, entries ...Entry) (*Decision, error) {
	return c.Check(ctx, Request{Domain: domain, Descriptors: []Descriptor{{Entries: entries}}})
}

// Reserve reserves estimate units of the reserve policies that entries
// match in domain: settle the Decision's Lease at the actual cost when the
// work ends.
func (c *Client) Reserve(ctx context.Context, domain string, estimate uint64, entries ...Entry) (*Decision, error) {
	return c.Check(ctx, Request{Domain: domain, Descriptors: []Descriptor{{Entries: entries, Cost: estimate}}})
}

// unavailable is the failure mode's Decision for req.
func (c *Client) unavailable(req Request, err error) *Decision {
	if !errors.Is(err, ErrUnavailable) {
		err = fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	d := &Decision{Allowed: c.modeFor(req) != FailClosed, Unavailable: true, Err: err, Header: http.Header{}}
	if !d.Allowed {
		d.RetryAfter, d.Status = time.Second, http.StatusTooManyRequests
		d.Header.Set("Retry-After", "1")
	}
	return d
}

// shape names what a request looks like for its failure mode: its domain
// and descriptor keys, not their values.
func shape(req Request) string {
	var b strings.Builder
	b.WriteString(req.Domain)
	for _, d := range req.Descriptors {
		b.WriteByte('|')
		keys := make([]string, len(d.Entries))
		for i, e := range d.Entries {
			keys[i] = e.Key
		}
		slices.Sort(keys)
		b.WriteString(strings.Join(keys, ","))
	}
	return b.String()
}

func (c *Client) learn(req Request, m FailureMode) {
	k := shape(req)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.modes) >= maxLearned {
		clear(c.modes)
	}
	c.modes[k] = m
}

// modeFor is req's failure mode: learned, else the client's.
func (c *Client) modeFor(req Request) FailureMode {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.modes[shape(req)]; ok {
		return m
	}
	return c.mode
}

func (c *Client) post(ctx context.Context, path string, body []byte) (*http.Response, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	r.Header.Set("Content-Type", "application/json")
	return c.hc.Do(r)
}

// rateLimitHeaders copies the headers a caller should see.
func rateLimitHeaders(h http.Header) http.Header {
	out := http.Header{}
	for _, k := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After", "X-Sluice-Reason"} {
		if v := h.Values(k); len(v) > 0 {
			out[http.CanonicalHeaderKey(k)] = v
		}
	}
	return out
}

// overLimit reports whether body is a check's denial: the JSON
// RateLimitResponse the limiter answers, over the limit. An error's body
// is {"error": ...}.
func overLimit(body []byte) bool {
	var r struct {
		OverallCode string `json:"overallCode"`
	}
	return json.Unmarshal(body, &r) == nil && r.OverallCode == "OVER_LIMIT"
}

// refused reports whether body is a check's denial of what the request
// carries (the limiter's dynamic metadata says "refused").
func refused(body []byte) bool {
	var r struct {
		DynamicMetadata struct {
			Refused bool `json:"refused"`
		} `json:"dynamicMetadata"`
	}
	return json.Unmarshal(body, &r) == nil && r.DynamicMetadata.Refused
}

func errorMessage(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	return strings.TrimSpace(string(body))
}

// The limiter's JSON, as the check takes it (the protojson of an RLS
// request) and as release and settle take theirs.
type (
	wireEntry struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	}
	wireDescriptor struct {
		Entries    []wireEntry `json:"entries"`
		HitsAddend *uint64     `json:"hitsAddend,omitempty"`
	}
	wireCheckRequest struct {
		Domain      string           `json:"domain"`
		Descriptors []wireDescriptor `json:"descriptors"`
		HitsAddend  uint64           `json:"hitsAddend,omitempty"`
	}
	wireEndRequest struct {
		Domain      string           `json:"domain"`
		Descriptors []wireDescriptor `json:"descriptors"`
		Lease       string           `json:"lease"`
		Cost        *int64           `json:"cost,omitempty"`
	}
)

func wireDescriptors(ds []Descriptor, withCost bool) []wireDescriptor {
	out := make([]wireDescriptor, len(ds))
	for i, d := range ds {
		out[i].Entries = make([]wireEntry, len(d.Entries))
		for j, e := range d.Entries {
			out[i].Entries[j] = wireEntry{Key: e.Key, Value: e.Value}
		}
		if withCost && d.Cost > 0 {
			out[i].HitsAddend = &ds[i].Cost
		}
	}
	return out
}

func wireCheck(req Request) wireCheckRequest {
	return wireCheckRequest{Domain: req.Domain, Descriptors: wireDescriptors(req.Descriptors, true), HitsAddend: req.Cost}
}
