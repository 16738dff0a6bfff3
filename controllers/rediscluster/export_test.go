package rediscluster

import "time"

// WithClock sets the pass's clock (default time.Now): a test judges a
// pass at a moment of its choosing, not at whenever a loaded machine runs
// it.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }
