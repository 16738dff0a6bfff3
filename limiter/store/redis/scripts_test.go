package redis

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// luaSources are the embedded scripts, by file.
func luaSources() map[string]string {
	src := map[string]string{"prelude.lua": preludeLua, "exact.lua": exactLua, "grant.lua": grantLua, "hold.lua": holdLua, "multi.lua": multiLua}
	for _, a := range append(algo.All, algo.Concurrency) {
		src[a.String()+" core"] = cores[a]
	}
	return src
}

// The scripts name algorithms only as ALG.<Name>, by names limiter/algo
// defines, and the scripts Redis runs carry Go's ID in each one's place: a
// renamed, added or reordered Go algorithm fails here, not in a decision.
func TestAlgorithmIDsAreGos(t *testing.T) {
	named := regexp.MustCompile(`ALG\.(\w+)`)
	bare := regexp.MustCompile(`algorithm\s*[=~]=\s*\d`)
	for file, src := range luaSources() {
		for _, m := range named.FindAllStringSubmatch(src, -1) {
			if _, err := algo.Parse(m[1]); err != nil {
				t.Errorf("%s names ALG.%s, which limiter/algo does not define", file, m[1])
			}
		}
		if bare.MatchString(src) {
			t.Errorf("%s compares an algorithm with a bare number: %q", file, bare.FindString(src))
		}
	}
	all := []script{grantScript, multiScript}
	for _, a := range algo.All {
		all = append(all, scripts[a])
	}
	for _, a := range holders {
		all = append(all, holdScripts[a])
	}
	for _, sc := range all {
		if m := named.FindString(sc.src); m != "" {
			t.Errorf("a built script still names %s", m)
		}
	}

	// Redis reads each ALG.<Name> as Go's value.
	srv := redistest.Start(t)
	c := srv.Client(t)
	for _, a := range algo.All {
		got, err := c.Eval(context.Background(), newScript("return ALG."+a.String(), nil).src, nil).Int()
		if err != nil || got != int(a) {
			t.Errorf("ALG.%v is %d in Redis (%v), Go's is %d", a, got, err, int(a))
		}
	}
}

// Each algorithm has exactly one core, in the exact script of that
// algorithm and, when it is grantable, in the grant script's branch of its
// ID; the grant script refuses an ID that has no core there. The
// conformance table run through Grant (TestGrantOfNothingIsExact) shows
// that each branch decides as its algorithm.
func TestEachCoreOnce(t *testing.T) {
	// A core as the scripts hold it: its ARG.<name>s in place (the cores
	// read only the prelude's).
	var builtCores [len(cores)]string
	for a, core := range cores {
		builtCores[a] = newScript(core, withPrelude(argNames{})).src
	}
	for _, a := range algo.All {
		if n := strings.Count(scripts[a].src, builtCores[a]); n != 1 {
			t.Errorf("the exact script of %v holds its core %d times", a, n)
		}
		for _, other := range algo.All {
			if other != a && strings.Contains(scripts[a].src, builtCores[other]) {
				t.Errorf("the exact script of %v holds the core of %v", a, other)
			}
		}
		branch := "if algorithm == " + strconv.Itoa(int(a)) + " then\n" + builtCores[a]
		granted := strings.Count(grantScript.src, branch) == 1
		if want := a != algo.SlidingLog; granted != want {
			t.Errorf("the grant script has a branch for %v: %v, want %v", a, granted, want)
		}
	}

	// The hold script of each holder holds its core once, and no other.
	for _, a := range holders {
		for _, other := range append(algo.All, algo.Concurrency) {
			if n := strings.Count(holdScripts[a].src, builtCores[other]); n != map[bool]int{true: 1}[other == a] {
				t.Errorf("the hold script of %v holds the core of %v %d times", a, other, n)
			}
		}
	}

	srv := redistest.Start(t)
	c := srv.Client(t)
	for _, id := range []int{0, int(algo.SlidingLog), 99} {
		err := c.Eval(context.Background(), grantScript.src, []string{"k", "k:p"},
			10, 1000000, 10, 1, 0, id, 0, 0, 0, "pod", -1, 10, 1000000, 0).Err()
		if err == nil || !strings.Contains(err.Error(), "no core for algorithm "+strconv.Itoa(id)) {
			t.Errorf("grant with algorithm %d: %v, want an error naming it", id, err)
		}
	}
}

// NOSCRIPT falls back to EVAL, for the exact and the grant scripts:
// flushing the script cache before every decision loses none.
func TestNoScriptFallback(t *testing.T) {
	srv := redistest.Start(t)
	s := newInternal(t, srv.Addr, nil)
	c := srv.Client(t)
	ctx := context.Background()
	lim := algo.Limit{Algorithm: algo.GCRA, Limit: 20, Period: time.Minute, Burst: 20}
	key := storetest.KeyFor(t, "noscript")
	for i := range 10 {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var r algo.Result
		var err error
		if i%2 == 0 {
			r, err = s.Take(ctx, store.Request{Key: key, Limit: lim, Cost: 1})
		} else {
			var l store.Grant
			l, err = s.Grant(ctx, store.GrantRequest{Key: key, Limit: lim, Cost: 1, Pod: "p", Bound: -1, TTL: time.Second})
			r = l.Result
		}
		if err != nil {
			t.Fatalf("decision %d after SCRIPT FLUSH: %v", i, err)
		}
		if !r.Allowed || r.Remaining != int64(19-i) {
			t.Fatalf("decision %d: %+v, want allowed with %d remaining", i, r, 19-i)
		}
	}
}

// The scripts read every argument by its name (ARG.<name>), never by a
// number, and each entry point reads every name its table gives: Go and
// the scripts can't disagree on a position, and no slot is named and left
// unread.
func TestScriptArgumentsNamed(t *testing.T) {
	allCores := strings.Join(cores[:], "")
	entries := []struct {
		name  string
		src   string
		names argNames
	}{
		{"exact.lua", preludeLua + exactLua + allCores, exactArgNames},
		{"hold.lua", preludeLua + holdLua + allCores, holdArgNames},
		{"grant.lua", preludeLua + grantLua + allCores, grantArgNames},
	}
	byNumber := regexp.MustCompile(`ARGV\[\s*[0-9]`)
	for _, e := range entries {
		if m := byNumber.FindString(e.src); m != "" {
			t.Errorf("%s reads %s...: by number, not by name", e.name, m)
		}
		seen := map[int]string{}
		for name, pos := range e.names {
			if other, ok := seen[pos]; ok {
				t.Errorf("%s: ARG.%s and ARG.%s are both position %d", e.name, name, other, pos)
			}
			seen[pos] = name
			if !strings.Contains(e.src, "ARG."+name) {
				t.Errorf("%s never reads ARG.%s", e.name, name)
			}
		}
		for pos := 1; pos <= len(e.names); pos++ {
			if _, ok := seen[pos]; !ok {
				t.Errorf("%s: position %d has no name", e.name, pos)
			}
		}
	}
	for _, sc := range append([]script{grantScript, multiScript}, append(scripts[:], holdScripts[:]...)...) {
		if m := argName.FindString(sc.src); m != "" {
			t.Errorf("a built script still names an argument: %s", m)
		}
	}
}
