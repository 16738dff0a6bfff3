package store

import (
	"context"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
)

// Grants: in two-tier mode (limiter/store/localtier) a pod takes a grant,
// a chunk of a counter's units, and spends it in memory. (A "lease" in
// limiter/service and limiter/algo is what a request holds until it ends:
// a Concurrency slot or a reservation. The Redis script that grants is
// scripts/grant.lua.)

// Granter is a shared store that can grant units to a pod for two-tier
// mode: the Redis store. The memory store is exact and in-process already,
// and grants nothing.
type Granter interface {
	Store
	// Grant decides req.Cost exactly as Take would, after crediting back
	// req.Credit, and when that is admitted grants up to req.Want more
	// units for the pod to spend on its own, within req's bounds.
	Grant(ctx context.Context, req GrantRequest) (Grant, error)
}

// GrantRequest is one grant call of a pod on one counter.
type GrantRequest struct {
	Key   Key
	Limit algo.Limit
	// Cost is spent now, as by Take; 0 only credits.
	Cost int64
	// Want is how many units beyond Cost the pod asks to hold.
	Want int64
	// Credit is the unspent part of the pod's previous grant on Key, given
	// back; CreditWindow is the window that grant was taken in (window
	// algorithms; a credit to a window that has passed is dropped).
	Credit, CreditWindow int64
	// Pod names the pod, unique per process: a restarted pod is a new pod.
	Pod string
	// Bound is the most units all pods together may hold on Key; -1 means
	// no bound beyond PodCap.
	Bound int64
	// PodCap is the most units one pod may hold on Key.
	PodCap int64
	// TTL is the longest a grant may be spent.
	TTL time.Duration
	// Horizon is the span of traffic Want covers (0: TTL). A window
	// algorithm's grant ends with its window: with less time left than
	// Horizon, it grants Want in proportion.
	Horizon time.Duration
}

// Grant is what a grant call decided.
type Grant struct {
	// Result decides the request's own Cost.
	Result algo.Result
	// Granted units beyond Cost are the pod's to spend, for Lifetime from
	// when the call was sent (at most TTL, and never past the end of the
	// counter's current window).
	Granted  int64
	Lifetime time.Duration
	// Window is the index of the window the grant was taken in (window
	// algorithms), for CreditWindow.
	Window int64
	// Pods is the number of pods holding a live grant registration on
	// Key, this one included.
	Pods int64
}
