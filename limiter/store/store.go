// Package store defines the counter store the limiter decides against, and
// the key that names one counter.
//
// Implementations: store/memory (embedded, the default) and store/redis
// (standalone or Redis Cluster, one Lua core per algorithm). Both run the
// same conformance table in internal/storetest.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
)

// Store decides rate-limit requests against shared counters.
type Store interface {
	// Take applies req to its counter and returns the decision. An error
	// means the store could not decide; the caller's failure mode applies.
	Take(ctx context.Context, req Request) (algo.Result, error)
	// Close releases the store's resources.
	Close() error
}

// ErrUnavailable is wrapped by the errors of a store that did not try to
// decide, because it knows the backend can't answer now (for Redis: the
// circuit breaker of the key's shard is open). It comes back in microseconds.
var ErrUnavailable = errors.New("store unavailable")

// ErrQueueTimeout is wrapped by the errors of a call that waited its whole
// deadline for the store's client to send it (for Redis: no round trip
// started in time). The limiter is overloaded; the backend may be fine.
var ErrQueueTimeout = errors.New("store call not sent within its deadline")

// Request is one decision: spend Cost units of Limit on the counter Key.
type Request struct {
	Key   Key
	Limit algo.Limit
	// Cost is the number of units to spend. 0 peeks without consuming.
	Cost int64
	// Idempotency names the record of a retried request: when it is set (not
	// the zero Key) and a live record of it has replayed fewer than
	// IdempotencyMaxReplays times, the store counts one more replay and
	// returns the recorded decision with Result.Replayed, consuming nothing.
	// Otherwise it decides, and when no live record exists records an
	// admitted decision that consumed units, in the same atomic step. So a
	// record replays a bounded number of times, and a record whose replays
	// are spent stays until its TTL: its retries are decided afresh, each
	// spending units, and never start a new record. Denials and peeks are
	// not recorded: they consumed nothing, so a retry is decided afresh. The
	// caller derives it from everything that scopes a replay and everything
	// that makes two requests the same one (domain, policy, counter, the
	// descriptor's entries, cost, client key).
	Idempotency Key
	// IdempotencyTTL is how long a record lives; 0 means
	// DefaultIdempotencyTTL.
	IdempotencyTTL time.Duration
	// IdempotencyMaxReplays is how many times a record replays; 0 means
	// DefaultIdempotencyMaxReplays.
	IdempotencyMaxReplays int64
	// IdempotencyMaxRecords bounds the live records of one counter; 0 means
	// DefaultIdempotencyMaxRecords. Recording one more into a full counter
	// first drops its expired records, then the one closest to expiry: a
	// retry of that request is decided afresh. So however many keys a client
	// makes up, a counter holds a bounded number of records.
	IdempotencyMaxRecords int64
	// Hold, when set (not the zero Key), names a holding that an admitted
	// decision keeps until Settle ends it (see Holder): a Concurrency lease
	// (Concurrency needs one to acquire; its cost is one slot whatever Cost
	// says, and it lives Limit.Period), or a reservation of Cost units on
	// any algorithm that Reserves, which lives HoldTTL. A second admitted
	// decision under the same Hold on the same counter renews the lease, or
	// adds its Cost to the reservation. A holding takes no idempotency
	// record: Idempotency is ignored. Its decision leaves Limit.Headroom
	// (priority shedding), in a calendar window too; a limit with a
	// Penalty can't hold (ErrHoldPenalty).
	Hold    Key
	HoldTTL time.Duration
	// Tenant names whose counter Key is: the namespace of its policy. The
	// memory store splits its bounds between tenants, so that one
	// namespace's counters can't push out another's; the Redis store
	// ignores it.
	Tenant string
}

// HasHold reports whether the request takes a holding.
func (r *Request) HasHold() bool { return r.Hold != Key{} }

// DefaultIdempotencyTTL is how long an idempotency record lives unless a
// request says otherwise: long enough for a client's retries with backoff,
// short enough that records do not pile up.
const DefaultIdempotencyTTL = 10 * time.Minute

// MaxIdempotencyTTL is the longest record TTL a limiter accepts.
const MaxIdempotencyTTL = 24 * time.Hour

// DefaultIdempotencyMaxRecords is the most live records of one counter
// unless a request says otherwise.
const DefaultIdempotencyMaxRecords = 1000

// MaxIdempotencyMaxRecords is the largest cap per counter a limiter
// accepts: each record costs about 100 bytes of Redis memory.
const MaxIdempotencyMaxRecords = 100_000

// EffectiveIdempotencyMaxRecords is IdempotencyMaxRecords, or the default
// when unset.
func (r *Request) EffectiveIdempotencyMaxRecords() int64 {
	if r.IdempotencyMaxRecords <= 0 {
		return DefaultIdempotencyMaxRecords
	}
	return r.IdempotencyMaxRecords
}

// DefaultIdempotencyMaxReplays is how many times an idempotency record
// replays unless a request says otherwise: enough for a client's retries
// of one request, few enough that reusing a key buys little.
const DefaultIdempotencyMaxReplays = 5

// EffectiveIdempotencyMaxReplays is IdempotencyMaxReplays, or the default
// when unset.
func (r *Request) EffectiveIdempotencyMaxReplays() int64 {
	if r.IdempotencyMaxReplays <= 0 {
		return DefaultIdempotencyMaxReplays
	}
	return r.IdempotencyMaxReplays
}

// HasIdempotency reports whether the request carries an idempotency key.
func (r *Request) HasIdempotency() bool { return r.Idempotency != Key{} }

// EffectiveIdempotencyTTL is IdempotencyTTL, or the default when unset.
func (r *Request) EffectiveIdempotencyTTL() time.Duration {
	if r.IdempotencyTTL <= 0 {
		return DefaultIdempotencyTTL
	}
	return r.IdempotencyTTL
}

// Key names one counter. It is a hash of the policy's identity and the
// request's descriptor values, so callers cannot choose a Redis hash slot or
// grow keys without bound by sending long or crafted values.
type Key [16]byte

// String encodes the key in 22 URL-safe base64 characters, without the
// characters '{' and '}' that Redis Cluster reads as a hash tag.
func (k Key) String() string { return base64.RawURLEncoding.EncodeToString(k[:]) }

// KeyBuilder derives Keys. Its zero value is ready to use, and it does not
// allocate for inputs up to its buffer size. It is not safe for concurrent
// use; keep one per goroutine (or on the stack).
type KeyBuilder struct {
	buf [512]byte
	n   int
	big []byte
}

// Reset starts a new key.
func (b *KeyBuilder) Reset() { b.n, b.big = 0, nil }

// Add appends one length-prefixed part, so that ("ab","c") and ("a","bc")
// give different keys.
func (b *KeyBuilder) Add(s string) {
	var l [4]byte
	l[0], l[1], l[2], l[3] = byte(len(s)>>24), byte(len(s)>>16), byte(len(s)>>8), byte(len(s))
	b.write(l[:])
	b.writeString(s)
}

func (b *KeyBuilder) write(p []byte) {
	if b.big == nil && b.n+len(p) <= len(b.buf) {
		b.n += copy(b.buf[b.n:], p)
		return
	}
	b.spill()
	b.big = append(b.big, p...)
}

func (b *KeyBuilder) writeString(s string) {
	if b.big == nil && b.n+len(s) <= len(b.buf) {
		b.n += copy(b.buf[b.n:], s)
		return
	}
	b.spill()
	b.big = append(b.big, s...)
}

func (b *KeyBuilder) spill() {
	if b.big == nil {
		b.big = make([]byte, 0, 2*len(b.buf))
		b.big = append(b.big, b.buf[:b.n]...)
	}
}

// Key returns the SHA-256 of the parts, truncated to 128 bits.
func (b *KeyBuilder) Key() Key {
	var sum [32]byte
	if b.big != nil {
		sum = sha256.Sum256(b.big)
	} else {
		sum = sha256.Sum256(b.buf[:b.n])
	}
	var k Key
	copy(k[:], sum[:16])
	return k
}

// Clock returns the current time. Stores that decide in-process take it as
// an option so tests can control time.
type Clock func() time.Time
