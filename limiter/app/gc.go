package app

import "math"

// LimitedGCPercent is the GC target percentage (GOGC) the limiter sets
// for itself when a memory limit (GOMEMLIMIT) is in effect and GOGC is not
// set: see GCPercent.
const LimitedGCPercent = 400

// GCPercent is the GC target percentage the limiter should run with, given
// $GOGC (gogcEnv) and the memory limit in effect (memLimit, as
// debug.SetMemoryLimit(-1) reports it: math.MaxInt64 for none), and
// whether to set it (false: leave the runtime's as it is).
//
// A limiter's live heap is small (a few MiB on the Redis store) while it
// allocates per decision, so with Go's default GOGC=100 it collects
// several times a second: about 10% of its CPU under load. With a memory
// limit, which the operator sets to 90% of the container's
// (GoMemLimitEnv), a larger GOGC costs no safety: the runtime collects
// harder as the heap nears the limit whatever GOGC says, and a memory
// store large enough to matter (--memory-max-bytes, by default half the
// container's limit) reaches the limit before 400% of its size. Without a
// limit the default stands, and a GOGC the operator of the process sets
// always wins.
func GCPercent(gogcEnv string, memLimit int64) (int, bool) {
	if gogcEnv != "" || memLimit <= 0 || memLimit == math.MaxInt64 {
		return 0, false
	}
	return LimitedGCPercent, true
}
