package redis

import "time"

// MultiFromOne makes s send every Take through the multi script
// (multi.go), a round trip's only one too, so that the tests written
// for one decision at a time run it.
func MultiFromOne(s *Store) { s.multiMin = 1 }

// WithMapRefresh sets how often a cluster store loads its slot map when
// nothing asks it to.
func WithMapRefresh(o Options, every time.Duration) Options {
	o.mapRefresh = every
	return o
}
