package redis

// Scripts. Invariants:
//   - Each algorithm is written once in Lua, as a core (scripts/*_core.lua)
//     that mirrors limiter/algo.(Limit).Take bit for bit; the exact and the
//     granting entry points are thin wrappers around the cores.
//   - A script is built by concatenation: the prelude, then an entry point
//     with its algorithm's core (exact.lua, hold.lua) or a branch per
//     grantable algorithm (grant.lua) put in place. A core is a block, not a Lua
//     function: a closure costs Redis instructions on every call.
//   - The scripts name algorithms as ALG.<Name>; newScript writes
//     limiter/algo's ID in its place, so IDs come from Go alone and no
//     script depends on the order of algo's constants.
//   - The scripts read their arguments as ARGV[ARG.<name>]; each entry
//     point's positions are named once, below (prelude*, exact*, hold*,
//     grant*), newScript writes the number in place of ARG.<name>, and the
//     Go that fills a call puts each value at its constant's position: the
//     two can't drift. A name an entry point's table lacks panics when the
//     package loads.
//   - Scripts run with EVALSHA; a server that answers NOSCRIPT gets the
//     source once with EVAL, which also caches it there.

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/limiter/algo"
)

var (
	//go:embed scripts/prelude.lua
	preludeLua string
	//go:embed scripts/exact.lua
	exactLua string
	//go:embed scripts/grant.lua
	grantLua string
	//go:embed scripts/hold.lua
	holdLua string

	//go:embed scripts/token_bucket_core.lua
	tokenBucketCore string
	//go:embed scripts/gcra_core.lua
	gcraCore string
	//go:embed scripts/sliding_window_core.lua
	slidingWindowCore string
	//go:embed scripts/fixed_window_core.lua
	fixedWindowCore string
	//go:embed scripts/sliding_log_core.lua
	slidingLogCore string
	//go:embed scripts/concurrency_core.lua
	concurrencyCore string
)

// cores holds each algorithm's core, indexed by algo.Algorithm.
var cores = [...]string{
	algo.TokenBucket:   tokenBucketCore,
	algo.GCRA:          gcraCore,
	algo.SlidingWindow: slidingWindowCore,
	algo.FixedWindow:   fixedWindowCore,
	algo.SlidingLog:    slidingLogCore,
	algo.Concurrency:   concurrencyCore,
}

// holders are the algorithms that hold what they take (hold.lua):
// Concurrency's leases, and the reservations of the algorithms that
// reserve.
var holders = []algo.Algorithm{algo.TokenBucket, algo.GCRA, algo.SlidingWindow, algo.FixedWindow, algo.Concurrency}

// grantable are the algorithms two-tier mode may grant: all but SlidingLog,
// which would lose its exactness.
var grantable = []algo.Algorithm{algo.TokenBucket, algo.GCRA, algo.SlidingWindow, algo.FixedWindow}

// The markers where an entry point takes its core, or cores.
const (
	coreMarker  = "--[[core]]\n"
	coresMarker = "--[[cores]]\n"
)

// The prelude's ARGV positions, every entry point's first (prelude.lua).
const (
	argLimit  = 1 + iota
	argPeriod // µs
	argBurst
	argCost
	argNow      // µs; 0 for Redis TIME
	preludeArgs = argNow
)

// exact.lua's own ARGV positions, after the prelude's. Each group is sent
// only when it or a later one is set (see prepare).
const (
	exactRecordTTL = preludeArgs + 1 + iota // ms
	exactMaxReplays
	exactMaxRecords
	exactRecord // the record's name, a string
	exactCalStart
	exactCalEnd
	exactCalNext
	exactHeadroom
	exactPenaltyDuration // µs
	exactPenaltyAfter
	exactPenaltyWithin // µs
	exactCountDenied   // 1: a denied cost counts (algo.Limit.CountDenied)
	exactArgs          = exactCountDenied
)

// hold.lua's own ARGV positions, after the prelude's; the calendar's and
// the reserve's are sent only when set (see holdCmd).
const (
	holdOp = preludeArgs + 1 + iota // "take" or "settle"
	holdID
	holdTTL    // µs
	holdActual // settle; negative: at the estimate
	holdCalStart
	holdCalEnd
	holdCalNext
	holdHeadroom
	holdArgs = holdHeadroom
)

// grant.lua's own ARGV positions, after the prelude's.
const (
	grantAlgorithm = preludeArgs + 1 + iota
	grantWant
	grantCredit
	grantCreditWindow
	grantPod
	grantBound
	grantPodCap
	grantTTL     // µs
	grantHorizon // µs
	grantArgs    = grantHorizon
)

// argNames are the names the scripts read each entry point's arguments
// by (ARG.<name>), the prelude's included.
type argNames map[string]int

func withPrelude(own argNames) argNames {
	own["limit"], own["period"], own["burst"], own["cost"], own["now"] = argLimit, argPeriod, argBurst, argCost, argNow
	return own
}

var (
	exactArgNames = withPrelude(argNames{
		"record_ttl": exactRecordTTL, "max_replays": exactMaxReplays, "max_records": exactMaxRecords, "record": exactRecord,
		"cal_start": exactCalStart, "cal_end": exactCalEnd, "cal_next": exactCalNext, "headroom": exactHeadroom,
		"penalty_duration": exactPenaltyDuration, "penalty_after": exactPenaltyAfter, "penalty_within": exactPenaltyWithin,
		"count_denied": exactCountDenied,
	})
	holdArgNames = withPrelude(argNames{
		"op": holdOp, "hold": holdID, "hold_ttl": holdTTL, "actual": holdActual,
		"cal_start": holdCalStart, "cal_end": holdCalEnd, "cal_next": holdCalNext, "headroom": holdHeadroom,
	})
	grantArgNames = withPrelude(argNames{
		"algorithm": grantAlgorithm, "want": grantWant, "credit": grantCredit, "credit_window": grantCreditWindow,
		"pod": grantPod, "bound": grantBound, "pod_cap": grantPodCap, "ttl": grantTTL, "horizon": grantHorizon,
	})
)

// scripts holds each rate algorithm's exact script, indexed by
// algo.Algorithm.
var scripts = func() (s [len(cores)]script) {
	for _, a := range algo.All {
		s[a] = newScript(preludeLua+place(exactLua, coreMarker, "do\n"+cores[a]+"end\n"), exactArgNames)
	}
	return s
}()

// holdScripts holds each holder's hold script (take and settle of a
// holding), indexed by algo.Algorithm.
var holdScripts = func() (s [len(cores)]script) {
	for _, a := range holders {
		s[a] = newScript(preludeLua+place(holdLua, coreMarker, "do\n"+cores[a]+"end\n"), holdArgNames)
	}
	return s
}()

// grantScript is two-tier mode's grant call (see grant.go): a branch per
// grantable algorithm, on the ID the call passes, holding its core.
var grantScript = func() script {
	var b strings.Builder
	for i, a := range grantable {
		if i > 0 {
			b.WriteString("else")
		}
		fmt.Fprintf(&b, "if algorithm == ALG.%s then\n%s", a, cores[a])
	}
	b.WriteString("else\n  return redis.error_reply('grant: no core for algorithm ' .. ARGV[ARG.algorithm])\nend\n")
	return newScript(preludeLua+place(grantLua, coresMarker, b.String()), grantArgNames)
}()

// place puts code where marker stands in src, once.
func place(src, marker, code string) string {
	before, after, ok := strings.Cut(src, marker)
	if !ok || strings.Contains(after, marker) {
		panic("redis store: want one " + strings.TrimSpace(marker) + " in a script")
	}
	return before + code + after
}

// newScript substitutes limiter/algo's ID for every ALG.<Name> in src, and
// the position args names for every ARG.<name>: the scripts name
// algorithms and arguments only so, and this is the one place their
// numbers come from. A name algo or args does not know panics, when the
// package loads.
func newScript(src string, args argNames) script {
	return scriptOf(substitute(src, args))
}

// scriptOf is src as a script, named by its SHA-1.
func scriptOf(src string) script {
	sum := sha1.Sum([]byte(src))
	sc := script{src: src, sha: hex.EncodeToString(sum[:])}
	sc.srcArg, sc.shaArg = sc.src, sc.sha
	return sc
}

// substitute writes the numbers in place of src's names (see newScript).
func substitute(src string, args argNames) string {
	src = argName.ReplaceAllStringFunc(src, func(m string) string {
		i, ok := args[strings.TrimPrefix(m, "ARG.")]
		if !ok {
			panic("redis store: a script reads " + m + ", which its entry point does not name")
		}
		return strconv.Itoa(i)
	})
	src = algName.ReplaceAllStringFunc(src, func(m string) string {
		a, err := algo.Parse(strings.TrimPrefix(m, "ALG."))
		if err != nil {
			panic("redis store: a script names " + m + ": " + err.Error())
		}
		return strconv.Itoa(int(a))
	})
	return src
}

// algName is how the scripts name an algorithm.
var algName = regexp.MustCompile(`\bALG\.\w+`)

// argName is how the scripts name an argument.
var argName = regexp.MustCompile(`\bARG\.\w+`)

// script is a Lua script, run with EVALSHA, or EVAL once a server answers
// NOSCRIPT.
type script struct {
	src, sha string
	// srcArg and shaArg are src and sha boxed once, so that a run's
	// arguments do not box them again (an allocation each).
	srcArg, shaArg any
}

// call starts the arguments of a run of the script with numKeys KEYS,
// with room for n more arguments.
func (sc script) call(eval bool, numKeys, n int) []any {
	return sc.callInto(make([]any, 0, 3+n), eval, numKeys)
}

// callInto is call, the arguments appended to buf.
func (sc script) callInto(buf []any, eval bool, numKeys int) []any {
	if eval {
		return append(buf, "eval", sc.srcArg, numKeys)
	}
	return append(buf, "evalsha", sc.shaArg, numKeys)
}
