package store

import (
	"context"
	"errors"

	"github.com/sluice-dev/sluice/limiter/algo"
)

// Holder is a store that keeps holdings: Concurrency leases and
// reservations, taken by a Take with Request.Hold and ended by Settle.
// The memory and Redis stores are Holders.
type Holder interface {
	Store
	// Settle ends the holding req.Hold on req.Key. A holding that is not
	// live (settled already, expired, never taken on this counter) changes
	// nothing and answers Found false.
	Settle(ctx context.Context, req SettleRequest) (Settlement, error)
}

// AtEstimate as SettleRequest.Actual settles a reservation at its
// estimate: the units reserved stay spent, and nothing else changes (as
// when a reservation expires).
const AtEstimate = -1

// SettleRequest ends one holding.
type SettleRequest struct {
	Key   Key
	Limit algo.Limit
	Hold  Key
	// Actual is a reservation's actual cost: what it reserved beyond that is
	// credited back, and what it spent beyond its reservation is charged,
	// even past the limit. AtEstimate (any negative value) changes nothing
	// but ending the reservation. Concurrency ignores it.
	Actual int64
	// Tenant is Request.Tenant.
	Tenant string
}

// Settlement is what Settle did.
type Settlement struct {
	// Found reports that the holding was live, and is ended now.
	Found bool
	// Held is what it held: the reservation's units, or 1 for a lease.
	Held int64
	// Result describes the counter afterwards (see algo.Limit.Settle).
	Result algo.Result
}

// ErrNoHold is wrapped by the error of a Take on Concurrency with a cost
// and no Request.Hold: a slot must be taken under a lease.
var ErrNoHold = errors.New("a Concurrency slot needs a lease (Request.Hold)")

// ErrHoldPenalty is wrapped by the error of a holding (a Take with
// Request.Hold or on Concurrency, a Settle) on a limit with a penalty: no
// store keeps a penalty on holdings, and the API refuses spec.penalty with
// Concurrency and spec.reserve.
var ErrHoldPenalty = errors.New("a holding can't carry a penalty")

// LeaseID is a holding's Key as limiter/algo names a Concurrency lease.
func (k Key) LeaseID() algo.LeaseID { return algo.LeaseID(k) }
