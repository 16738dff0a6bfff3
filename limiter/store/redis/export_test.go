package redis

// MultiFromOne makes s send every Take through the multi script
// (multi.go), a round trip's only one too, so that the tests written
// for one decision at a time run it.
func MultiFromOne(s *Store) { s.multiMin = 1 }
