package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// Lease is what one admitted request holds: its Concurrency slots and its
// reservations, ended together by Release or Settle. A lease ends once:
// the second end is ErrNotHeld, sent nowhere.
type Lease struct {
	c           *Client
	id          string
	domain      string
	descriptors []Descriptor
	mu          sync.Mutex
	ended       bool
}

// ID is the lease's ID, as the limiter answered it.
func (l *Lease) ID() string { return l.id }

// Ended reports whether the lease was ended: the limiter answered its
// Release or Settle, either way.
func (l *Lease) Ended() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended
}

// Ending is what the end of a lease did on one policy.
type Ending struct {
	Descriptor int    `json:"descriptor"`
	Policy     string `json:"policy"`
	// Outcome is released (a slot), settled (a reservation), not-held or
	// unavailable.
	Outcome   string `json:"outcome"`
	Held      int64  `json:"held,omitempty"`
	Cost      *int64 `json:"cost,omitempty"`
	Remaining int64  `json:"remaining"`
	Reason    string `json:"reason,omitempty"`
}

// Release ends the lease: its slots are freed, its reservations settled
// at their estimate. A lease that held nothing (ended already, expired) is
// ErrNotHeld: harmless. A limiter that can't be reached is
// ErrUnavailable (the holdings free themselves when they expire), and a
// refused request an *Error: the lease may be ended again.
func (l *Lease) Release(ctx context.Context) ([]Ending, error) { return l.end(ctx, nil) }

// Settle ends the lease at the request's actual cost: its slots are
// freed, and each reservation is settled at cost, which refunds what it
// did not spend or charges what it spent beyond it.
func (l *Lease) Settle(ctx context.Context, cost int64) ([]Ending, error) { return l.end(ctx, &cost) }

func (l *Lease) end(ctx context.Context, cost *int64) ([]Ending, error) {
	if l == nil {
		return nil, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return nil, fmt.Errorf("sluice: lease %s ended already: %w", l.id, ErrNotHeld)
	}
	path := releasePath
	if cost != nil {
		path = settlePath
	}
	body, err := json.Marshal(wireEndRequest{Domain: l.domain, Descriptors: wireDescriptors(l.descriptors, false), Lease: l.id, Cost: cost})
	if err != nil {
		return nil, err
	}
	resp, err := l.c.post(ctx, path, body)
	if err != nil {
		return nil, fmt.Errorf("sluice: ending lease %s: %w: %v", l.id, ErrUnavailable, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var out struct {
		Error   string   `json:"error"`
		Endings []Ending `json:"endings"`
	}
	_ = json.Unmarshal(raw, &out)
	switch {
	case resp.StatusCode == http.StatusOK:
		l.ended = true
		return out.Endings, nil
	case resp.StatusCode == http.StatusNotFound:
		l.ended = true
		return out.Endings, fmt.Errorf("sluice: %s: %w", out.Error, ErrNotHeld)
	case resp.StatusCode >= 500:
		return out.Endings, fmt.Errorf("sluice: %d: %s: %w", resp.StatusCode, errorMessage(raw), ErrUnavailable)
	}
	return nil, &Error{Status: resp.StatusCode, Message: errorMessage(raw)}
}
