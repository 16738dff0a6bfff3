package algo

import (
	"slices"
	"time"
)

// LeaseID names one Concurrency lease. Callers derive it from an
// unguessable token and the key it is held on, so that an ID leaks nothing
// of another key's leases.
type LeaseID [16]byte

// Lease is one live Concurrency lease.
type Lease struct {
	ID LeaseID
	// Expires is when the lease frees itself, in Unix µs.
	Expires int64
}

// ConcurrencyRetry is the longest Retry-After of a Concurrency denial: a
// slot frees when a request in flight ends, which no one can foresee, so a
// denied client is told to come back soon (sooner, when the oldest lease
// expires sooner).
const ConcurrencyRetry = time.Second

type concurrencyOp uint8

const (
	opPeek concurrencyOp = iota
	opAcquire
	opRelease
)

// Acquire takes one Concurrency slot for lease id at now, if fewer than
// Limit leases are live, Headroom of them left free (priority shedding:
// one more lease must leave Headroom slots); the lease frees itself Period
// later. An id that
// holds a lease on the key already renews it and is admitted. Expired
// leases are dropped first. Write and ttl are as for Take; ttl is when the
// last lease expires.
func (l Limit) Acquire(s *State, present bool, now time.Time, id LeaseID) (r Result, write bool, ttl time.Duration) {
	r, _, write, ttl = l.concurrency(s, present, micros(now), id, opAcquire)
	return r, write, ttl
}

// Release gives back the slot of lease id, and reports whether it was
// live: releasing twice, an expired lease or one never taken on this key
// changes nothing else (expired leases are still dropped). The Result
// describes the key afterwards.
func (l Limit) Release(s *State, present bool, now time.Time, id LeaseID) (r Result, found, write bool, ttl time.Duration) {
	return l.concurrency(s, present, micros(now), id, opRelease)
}

// concurrency is mirrored by concurrency_core.lua, where the leases are a
// sorted set of IDs scored by their expiry.
func (l Limit) concurrency(s *State, present bool, n int64, id LeaseID, op concurrencyOp) (r Result, found, write bool, ttl time.Duration) {
	var leases []Lease
	if present {
		leases = s.Leases
	}
	// Drop the leases that expired at or before now.
	live := leases[:0:0]
	for _, ls := range leases {
		if ls.Expires > n {
			live = append(live, ls)
		}
	}
	write = len(live) != len(leases)
	leases = live
	held := slices.IndexFunc(leases, func(ls Lease) bool { return ls.ID == id })
	r.Allowed = true
	switch op {
	case opAcquire:
		r.Allowed = held >= 0 || int64(len(leases))+1 <= l.Limit-l.Headroom
		if r.Allowed {
			exp := n + l.PeriodMicros()
			if held >= 0 {
				leases[held].Expires = exp
			} else {
				leases = append(leases, Lease{ID: id, Expires: exp})
			}
			write = true
		}
	case opRelease:
		if held >= 0 {
			leases = slices.Delete(leases, held, held+1)
			found, write = true, true
		}
	}
	if write {
		s.Leases = leases
	}
	count := int64(len(leases))
	r.Remaining = max(0, l.Limit-l.Headroom-count)
	var first, last int64
	for i, ls := range leases {
		if i == 0 || ls.Expires < first {
			first = ls.Expires
		}
		last = max(last, ls.Expires)
	}
	if count > 0 {
		r.ResetAfter = time.Duration(last-n) * time.Microsecond
	}
	switch {
	case r.Allowed:
	case l.Headroom >= l.Limit:
		r.RetryAfter = Never // a priority with no share of the slots
	default:
		r.RetryAfter = min(ConcurrencyRetry, time.Duration(first-n)*time.Microsecond)
	}
	return r, found, write, r.ResetAfter
}
