package redis

// Scripts. Invariants:
//   - Each algorithm is written once in Lua, as a core (scripts/*_core.lua)
//     that mirrors limiter/algo.(Limit).Take bit for bit; the exact and the
//     leasing entry points are thin wrappers around the cores.
//   - A script is built by concatenation: the prelude, then an entry point
//     with its algorithm's core (exact.lua, hold.lua) or a branch per
//     leasable algorithm (lease.lua) put in place. A core is a block, not a Lua
//     function: a closure costs Redis instructions on every call.
//   - The scripts name algorithms as ALG.<Name>; newScript writes
//     limiter/algo's ID in its place, so IDs come from Go alone and no
//     script depends on the order of algo's constants.
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
	//go:embed scripts/lease.lua
	leaseLua string
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

// leasable are the algorithms two-tier mode may lease: all but SlidingLog,
// which would lose its exactness.
var leasable = []algo.Algorithm{algo.TokenBucket, algo.GCRA, algo.SlidingWindow, algo.FixedWindow}

// The markers where an entry point takes its core, or cores.
const (
	coreMarker  = "--[[core]]\n"
	coresMarker = "--[[cores]]\n"
)

// scripts holds each rate algorithm's exact script, indexed by
// algo.Algorithm.
var scripts = func() (s [len(cores)]script) {
	for _, a := range algo.All {
		s[a] = newScript(preludeLua + place(exactLua, coreMarker, "do\n"+cores[a]+"end\n"))
	}
	return s
}()

// holdScripts holds each holder's hold script (take and settle of a
// holding), indexed by algo.Algorithm.
var holdScripts = func() (s [len(cores)]script) {
	for _, a := range holders {
		s[a] = newScript(preludeLua + place(holdLua, coreMarker, "do\n"+cores[a]+"end\n"))
	}
	return s
}()

// leaseScript is two-tier mode's lease call (see lease.go): a branch per
// leasable algorithm, on the ID the call passes, holding its core.
var leaseScript = func() script {
	var b strings.Builder
	for i, a := range leasable {
		if i > 0 {
			b.WriteString("else")
		}
		fmt.Fprintf(&b, "if algorithm == ALG.%s then\n%s", a, cores[a])
	}
	b.WriteString("else\n  return redis.error_reply('lease: no core for algorithm ' .. ARGV[6])\nend\n")
	return newScript(preludeLua + place(leaseLua, coresMarker, b.String()))
}()

// place puts code where marker stands in src, once.
func place(src, marker, code string) string {
	before, after, ok := strings.Cut(src, marker)
	if !ok || strings.Contains(after, marker) {
		panic("redis store: want one " + strings.TrimSpace(marker) + " in a script")
	}
	return before + code + after
}

// newScript substitutes limiter/algo's ID for every ALG.<Name> in src: the
// scripts name algorithms only so, and this is the one place their IDs
// come from. A name algo does not know panics, when the package loads.
func newScript(src string) script {
	src = algName.ReplaceAllStringFunc(src, func(m string) string {
		a, err := algo.Parse(strings.TrimPrefix(m, "ALG."))
		if err != nil {
			panic("redis store: a script names " + m + ": " + err.Error())
		}
		return strconv.Itoa(int(a))
	})
	sum := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(sum[:])}
}

// algName is how the scripts name an algorithm.
var algName = regexp.MustCompile(`\bALG\.\w+`)

// script is a Lua script, run with EVALSHA, or EVAL once a server answers
// NOSCRIPT.
type script struct{ src, sha string }

// call starts the arguments of a run of the script with numKeys KEYS,
// with room for n more arguments.
func (sc script) call(eval bool, numKeys, n int) []any {
	args := make([]any, 0, 3+n)
	if eval {
		return append(args, "eval", sc.src, numKeys)
	}
	return append(args, "evalsha", sc.sha, numKeys)
}
