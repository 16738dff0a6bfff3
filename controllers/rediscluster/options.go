package rediscluster

import (
	"context"
	"net"
	"time"
)

// Option tunes Reconcile.
type Option func(*options)

type options struct {
	dial       func(ctx context.Context, network, addr string) (net.Conn, error)
	timeout    time.Duration
	tracker    *Tracker
	migrateFor time.Duration
	now        func() time.Time
	// handOverOnly limits the pass to the hand-over phase (HandOver).
	handOverOnly bool
	// failoverOnly limits the pass to the failover phase (Rescue).
	failoverOnly bool
}

func defaults() options {
	return options{timeout: 2 * time.Second, migrateFor: 10 * time.Second, now: time.Now}
}

// WithDialer sets how connections to nodes are opened (default: TCP).
func WithDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return func(o *options) { o.dial = dial }
}

// WithTimeout bounds each command, dial included (default 2s).
func WithTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.timeout = d
		}
	}
}

// WithTracker keeps state between passes that the cluster does not hold,
// such as since when a master is seen dead. Hold one Tracker per cluster
// for the life of the controller. Without it, a pass uses the nodes' own
// last-pong timestamps.
func WithTracker(t *Tracker) Option { return func(o *options) { o.tracker = t } }

// WithMigrationBudget bounds how long one pass moves slots (default 10s);
// the rest of the plan is left in Result.Migration for the next pass.
func WithMigrationBudget(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.migrateFor = d
		}
	}
}
