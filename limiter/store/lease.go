package store

import (
	"context"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
)

// Leaser is a shared store that can lease units to a pod for two-tier mode
// (limiter/store/localtier): the Redis store. The memory store is exact and
// in-process already, and does not lease.
type Leaser interface {
	Store
	// Lease decides req.Cost exactly as Take would, after crediting back
	// req.Credit, and when that is admitted takes up to req.Want more units
	// for the pod to spend on its own, within req's bounds.
	Lease(ctx context.Context, req LeaseRequest) (Lease, error)
}

// LeaseRequest is one lease call of a pod on one counter.
type LeaseRequest struct {
	Key   Key
	Limit algo.Limit
	// Cost is spent now, as by Take; 0 only credits.
	Cost int64
	// Want is how many units beyond Cost the pod asks to hold.
	Want int64
	// Credit is the unspent part of the pod's previous lease on Key, given
	// back; CreditWindow is the window that lease was taken in (window
	// algorithms; a credit to a window that has passed is dropped).
	Credit, CreditWindow int64
	// Pod names the pod, unique per process: a restarted pod is a new pod.
	Pod string
	// Bound is the most units all pods together may hold on Key; -1 means
	// no bound beyond PodCap.
	Bound int64
	// PodCap is the most units one pod may hold on Key.
	PodCap int64
	// TTL is the longest a lease may be spent.
	TTL time.Duration
	// Horizon is the span of traffic Want covers (0: TTL). A window
	// algorithm's lease ends with its window: with less time left than
	// Horizon, it grants Want in proportion.
	Horizon time.Duration
}

// Lease is what a lease call decided.
type Lease struct {
	// Result decides the request's own Cost.
	Result algo.Result
	// Granted units beyond Cost are the pod's to spend, for Lifetime from
	// when the call was sent (at most TTL, and never past the end of the
	// counter's current window).
	Granted  int64
	Lifetime time.Duration
	// Window is the index of the window the lease was taken in (window
	// algorithms), for CreditWindow.
	Window int64
	// Pods is the number of pods holding a live lease registration on
	// Key, this one included.
	Pods int64
}
