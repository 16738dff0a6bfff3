//go:build race

package redis

// raceEnabled: the race detector allocates of its own, so allocations are
// not counted under it.
const raceEnabled = true
