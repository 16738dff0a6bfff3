//go:build !race

package server_test

// raceEnabled: the race detector instruments allocations, so counts of
// them mean nothing under it.
const raceEnabled = false
