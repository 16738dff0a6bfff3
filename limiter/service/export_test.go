package service

import "time"

// SetClock sets the clock of the hottest-descriptors sketches.
func SetClock(s *Service, now func() time.Time) { s.clock, s.topClock = now, now }
