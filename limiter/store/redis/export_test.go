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

// SentScripts are the SHA-1s of the scripts the store runs.
func SentScripts() []string {
	var out []string
	for _, sc := range sentScripts {
		out = append(out, sc.sha)
	}
	return out
}

// Primaries are the addresses of the primaries s warms: its map's.
func Primaries(s *Store) []string {
	s.warm.mu.Lock()
	defer s.warm.mu.Unlock()
	return append([]string(nil), s.warm.want...)
}

// WarmFailed reports that the last warm-up of the primary at addr failed.
func WarmFailed(s *Store, addr string) bool {
	s.warm.mu.Lock()
	defer s.warm.mu.Unlock()
	return s.warm.failed[addr]
}

// RoutesTo reports whether go-redis sends a command on key to the node at
// addr, by the map it was last handed.
func RoutesTo(s *Store, key, addr string) bool { return s.routesTo(key, addr) }
