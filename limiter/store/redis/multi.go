package redis

// Multi: on a standalone server, the exact decisions of one round trip
// share one script run (scripts/multi.lua) instead of one EVALSHA each.
// Redis spends most of a small script's time on the call around it
// (parsing the command, finding the script, setting up KEYS and ARGV,
// the reply), and the limiter most of a decision's store time on the
// command's own bookkeeping in go-redis: sharing the call amortizes both.
// Invariants:
//   - Each decision is decided by the text of its algorithm's exact
//     script, made a function (multiDecider): the same Lua, so the same
//     decision; only its arguments' and keys' positions are offset, its
//     arguments are parsed through a memo (num), and Redis TIME is read
//     once per run.
//   - A decision that fails (an error reply inside the script) fails
//     alone, with that reply; a failure of the run itself (a timeout, a
//     dropped connection, NOSCRIPT) is every decision's, as it was every
//     pipelined call's.
//   - Only a standalone server: Redis Cluster runs a script only on keys
//     of one slot, and a round trip's counters are in as many slots as
//     there are counters. Calls that hold or grant keep their own scripts.
//   - The run's work is the sum of its decisions', each bounded as
//     exact.lua's is; a run holds at most multiMax decisions.

import (
	_ "embed"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/limiter/algo"
)

//go:embed scripts/multi.lua
var multiLua string

// The markers where multi.lua takes the prelude's shared part, and the
// deciders; where the prelude's shared part starts.
const (
	sharedMarker   = "--[[shared]]\n"
	decidersMarker = "--[[deciders]]\n"
)

// multiStride is the integers the multi script answers per decision.
const multiStride = 6

// multiMax is the most decisions of one multi script run; a round trip
// with more sends several. Redis answers no other client while a script
// runs: this bounds that time to multiMax decisions' worst case.
const multiMax = 64

// multiScript decides many exact decisions, of any algorithms, in one run.
var multiScript = func() script {
	own, shared, ok := strings.Cut(preludeLua, sharedMarker)
	if !ok || strings.Contains(shared, sharedMarker) {
		panic("redis store: want one " + strings.TrimSpace(sharedMarker) + " in prelude.lua")
	}
	var b strings.Builder
	for _, a := range algo.All {
		if int(a) >= 16 {
			panic("redis store: the multi script's header holds algorithm IDs below 16, not " + strconv.Itoa(int(a)))
		}
		b.WriteString(multiDecider(a, own+place(exactLua, coreMarker, "do\n"+cores[a]+"end\n")))
	}
	src := place(multiLua, sharedMarker, substitute(shared, nil))
	return scriptOf(substitute(place(src, decidersMarker, b.String()), nil))
}()

// multiTime is how the prelude reads Redis TIME; a decider reads the
// run's clock instead.
const multiTime = "local t = redis.call('TIME')\n  now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"

var (
	argvAt    = regexp.MustCompile(`\bARGV\[(\d+)\]`)
	keysAt    = regexp.MustCompile(`\bKEYS\[([^\]]+)\]`)
	commentLn = regexp.MustCompile(`(?m)^[ \t]*--.*\n`)
)

// multiDecider is the exact script src of algorithm a (the prelude's own
// part, exact.lua, the core) as the multi script's function m_decide[a]:
// ARGV[i] is ARGV[m_base + i], and absent (nil) past its m_na arguments;
// KEYS[i] is KEYS[m_k + i], and #KEYS is m_nk. The multi script's own
// names start with m_, which the exact scripts do not use.
func multiDecider(a algo.Algorithm, src string) string {
	src = substitute(src, exactArgNames)
	src = commentLn.ReplaceAllString(src, "")
	if strings.Contains(src, "m_") {
		panic("redis store: the exact script of " + a.String() + " names m_..., which the multi script keeps for its own")
	}
	if strings.Count(src, multiTime) != 1 {
		panic("redis store: the prelude no longer reads Redis TIME as the multi script expects")
	}
	src = strings.Replace(src, multiTime, "now = m_clock()\n", 1)
	src = strings.ReplaceAll(src, "tonumber(ARGV[", "m_num(ARGV[")
	src = argvAt.ReplaceAllStringFunc(src, func(m string) string {
		i, _ := strconv.Atoi(argvAt.FindStringSubmatch(m)[1])
		if i <= preludeArgs { // always sent
			return "ARGV[m_base + " + strconv.Itoa(i) + "]"
		}
		return fmt.Sprintf("(m_na >= %d and ARGV[m_base + %d] or nil)", i, i)
	})
	src = keysAt.ReplaceAllStringFunc(src, func(m string) string {
		i := keysAt.FindStringSubmatch(m)[1]
		if i == "#KEYS" {
			return "KEYS[m_k + m_nk]"
		}
		return "KEYS[m_k + " + i + "]"
	})
	if strings.Contains(src, "#KEYS") || strings.Contains(src, "#ARGV") || strings.Contains(src, "redis.call('TIME')") {
		panic("redis store: the exact script of " + a.String() + " reads what the multi script can't offset")
	}
	return fmt.Sprintf("m_decide[%d] = function(m_base, m_k, m_nk, m_na)\n%send\n", int(a), src)
}

// multiHeader is a decision's first argument in the multi script.
func multiHeader(c *call) int64 {
	return int64(c.req.Limit.Algorithm) + 16*int64(c.nkeys) + 256*int64(c.nargs())
}

// nargs is the number of script arguments c sends (see takeArgs).
func (c *call) nargs() int {
	n := c.nargv + c.next
	if c.record != "" || c.next > 0 {
		n++
	}
	return n
}

// multiArgs are the arguments of one multi script run deciding calls.
func multiArgs(eval bool, calls []*call) []any {
	nkeys, n := 0, 0
	for _, c := range calls {
		nkeys += c.nkeys
		n += c.nkeys + 1 + c.nargs()
	}
	args := multiScript.call(eval, nkeys, n)
	for _, c := range calls {
		for i := range c.nkeys {
			args = append(args, &c.keys[i])
		}
	}
	for _, c := range calls {
		c.header = multiHeader(c)
		args = append(args, &c.header)
		args = appendArgs(args, c)
	}
	return args
}

// splitMulti gives each of calls its share of cmd, their multi script run:
// its result, or its error.
func splitMulti(cmd *goredis.Cmd, calls []*call) {
	fail := func(err error) {
		for _, c := range calls {
			c.multiErr = err
		}
	}
	reply, err := cmd.Result()
	if err != nil {
		fail(err)
		return
	}
	vals, ok := reply.([]any)
	if !ok || len(vals) != multiStride*len(calls) {
		fail(fmt.Errorf("multi script returned %T of %d values for %d decisions, want %d", reply, len(vals), len(calls), multiStride*len(calls)))
		return
	}
	for i, c := range calls {
		v := vals[multiStride*i : multiStride*(i+1)]
		if e, ok := v[0].(error); ok {
			c.multiErr = e
			continue
		}
		var n [multiStride]int64
		for j, x := range v {
			var ok bool
			if n[j], ok = x.(int64); !ok {
				c.multiErr = fmt.Errorf("multi script returned %T, want an integer", x)
				break
			}
		}
		if c.multiErr != nil {
			continue
		}
		c.res = algo.Result{
			Allowed:    n[0] == 1,
			Remaining:  n[1],
			ResetAfter: time.Duration(n[2]) * time.Microsecond,
			RetryAfter: time.Duration(n[3]) * time.Microsecond,
			Replayed:   n[4] == 1,
			Penalized:  n[5] == 1,
		}
		if n[3] < 0 {
			c.res.RetryAfter = algo.Never
		}
	}
}
