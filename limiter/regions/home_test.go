package regions

import (
	"context"
	"regexp"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/store"
)

// scriptCalls is how many scripts (EVALSHA and EVAL) srv has run.
func scriptCalls(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	out, err := srv.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, m := range regexp.MustCompile(`cmdstat_(?:evalsha|eval):calls=(\d+)`).FindAllStringSubmatch(out.(string), -1) {
		v, _ := strconv.ParseInt(m[1], 10, 64)
		n += v
	}
	return n
}

// TestHomeSpendsItsOwnGrant: the home region decides its own keys from a
// grant it takes from its own store, as the others do from theirs over
// the link: a script run per half grant, not per decision, and no message
// to another region. Alone on the key, it admits the whole limit and no
// more than the bound above it.
func TestHomeSpendsItsOwnGrant(t *testing.T) {
	names := []string{"a", "b", "c"}
	p := Policy{ID: "ns/per-user", Limit: longWindow}
	lab := newLab(t, names, []Policy{p}, nil)
	key := keyHomedAt(t, p.ID, "a", names)
	a := lab.regions["a"]
	before := scriptCalls(t, a.redis)
	admitted := lab.drive(t, p, key, []int{10, 0, 0})
	calls := scriptCalls(t, a.redis) - before
	bound, g := a.r.ReachBound(p.Limit), a.r.GrantSize(p.Limit)
	t.Logf("the home admitted %d (limit %d, bound %d, grant %d) with %d script runs in its Redis, %d grant calls to peers",
		admitted["a"], p.Limit.Limit, bound, g, calls, lab.grantCalls())
	if admitted["a"] < p.Limit.Limit || admitted["a"] > p.Limit.Limit+bound {
		t.Errorf("the home admitted %d: want from the limit %d to limit + bound %d", admitted["a"], p.Limit.Limit, p.Limit.Limit+bound)
	}
	// A grant of g asked for at half a grant: about 2 runs per g decisions,
	// and the denials after the limit ask again at most per denial.
	if calls == 0 || calls > admitted["a"]/4 {
		t.Errorf("%d script runs for %d decisions at the home: want a run per grant (g = %d), not per decision", calls, admitted["a"], g)
	}
	if n := lab.grantCalls(); n != 0 {
		t.Errorf("%d grant calls to other regions for a key homed here", n)
	}
	// The first decisions, before the first grant, are a cold key's advance.
	home, advance := testutil.ToFloat64(a.r.metrics.decisions.WithLabelValues("home")), testutil.ToFloat64(a.r.metrics.decisions.WithLabelValues("advance"))
	if home+advance < float64(admitted["a"]) || advance > float64(g) {
		t.Errorf("sluice_region_decisions_total{path=home} = %.0f and {path=advance} = %.0f: want every admitted decision of the %d, and at most a grant's %d on advance",
			home, advance, admitted["a"], g)
	}
}

// TestHomeStoreDownDecidesFromShare: the home's own store stops answering.
// Its keys are then decided from the partition share, as a region cut off
// from a home decides, never with an error (which a gateway would fail
// open on); when the store is back, grants resume and what the share
// admitted is charged to the counter.
func TestHomeStoreDownDecidesFromShare(t *testing.T) {
	names := []string{"a", "b", "c"}
	p := Policy{ID: "ns/per-user", Limit: longWindow}
	lab := newLab(t, names, []Policy{p}, nil)
	key := keyHomedAt(t, p.ID, "a", names)
	a := lab.regions["a"]
	a.redis.Stop()
	share := a.r.shareLimit(p.Limit).Limit
	g := a.r.GrantSize(p.Limit)
	var admitted int64
	for i := range 2 * share {
		res, err := a.r.Take(context.Background(), p, store.Request{Key: key, Limit: p.Limit, Cost: 1})
		if err != nil {
			t.Fatalf("decision %d with the home's store down: %v, want a decision", i, err)
		}
		if res.Allowed {
			admitted++
		}
		lab.quiet(t)
	}
	t.Logf("with its store down, the home admitted %d of %d (share %d, grant %d)", admitted, 2*share, share, g)
	if admitted < share || admitted > share+g {
		t.Errorf("the home admitted %d with its store down: want its share %d, and at most a grant's %d of cold advance more", admitted, share, g)
	}

	a.redis.Restart(t)
	eventually(t, "the home deciding from its grant again", func() (bool, string) {
		before := testutil.ToFloat64(a.r.metrics.decisions.WithLabelValues("home"))
		_, err := a.r.Take(context.Background(), p, store.Request{Key: key, Limit: p.Limit, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		after := testutil.ToFloat64(a.r.metrics.decisions.WithLabelValues("home"))
		return after > before, "decided from the share"
	})
	lab.quiet(t)
	// The counter was charged what the share admitted (as far as it
	// admits): what is left for every region is the limit less that.
	shared := func(n string) float64 {
		return testutil.ToFloat64(lab.regions[n].r.metrics.decisions.WithLabelValues("share"))
	}
	sharedBefore := map[string]float64{"b": shared("b"), "c": shared("c")}
	admittedAfter := lab.drive(t, p, key, []int{1, 1, 1})
	total := admitted + sum(admittedAfter)
	bound := p.Limit.Limit + a.r.ReachBound(p.Limit) + share
	for n, before := range sharedBefore {
		// On a loaded machine a grant call may time out: that region
		// then decides from its own share, as the bound allows.
		if shared(n) > before {
			t.Logf("region %s decided %v from its share (a grant call failed)", n, shared(n)-before)
			bound += lab.regions[n].r.shareLimit(p.Limit).Limit
		}
	}
	t.Logf("after the store came back the regions admitted %v; with the share's %d, %d (limit %d, bound %d)",
		admittedAfter, admitted, total, p.Limit.Limit, a.r.ReachBound(p.Limit))
	if total > bound {
		t.Errorf("%d admitted in all: over limit + bound + the shares decided from, %d", total, bound)
	}
}

// TestHomeReplaysIdempotentRetries: a request with an idempotency key is
// decided exactly in the home's store, so its retry is replayed there and
// spends nothing, beside the home's grant on the same counter.
func TestHomeReplaysIdempotentRetries(t *testing.T) {
	names := []string{"a", "b", "c"}
	p := Policy{ID: "ns/per-user", Limit: longWindow}
	lab := newLab(t, names, []Policy{p}, nil)
	key := keyHomedAt(t, p.ID, "a", names)
	a := lab.regions["a"]
	var b store.KeyBuilder
	b.Add("retry-7")
	req := store.Request{Key: key, Limit: p.Limit, Cost: 10, Idempotency: b.Key()}
	first, err := a.r.Take(context.Background(), p, req)
	if err != nil || !first.Allowed || first.Replayed {
		t.Fatalf("the first request: %+v, %v; want allowed, not a replay", first, err)
	}
	again, err := a.r.Take(context.Background(), p, req)
	if err != nil || !again.Allowed || !again.Replayed || again.Remaining != first.Remaining {
		t.Fatalf("its retry: %+v, %v; want the first decision replayed (%+v)", again, err, first)
	}
	// The grant path and the exact one share the counter: what the regions
	// admit after is the limit less the one request's 10.
	shared := func(n string) float64 {
		return testutil.ToFloat64(lab.regions[n].r.metrics.decisions.WithLabelValues("share"))
	}
	sharedBefore := map[string]float64{"b": shared("b"), "c": shared("c")}
	admitted := lab.drive(t, p, key, []int{2, 1, 1})
	bound := a.r.ReachBound(p.Limit)
	for n, before := range sharedBefore {
		// On a loaded machine a grant call may time out: that region
		// then decides from its own share, as the bound allows.
		if shared(n) > before {
			t.Logf("region %s decided %v from its share (a grant call failed)", n, shared(n)-before)
			bound += lab.regions[n].r.shareLimit(p.Limit).Limit
		}
	}
	if total := sum(admitted); total < p.Limit.Limit-10-a.r.ReachBound(p.Limit) || total > p.Limit.Limit-10+bound {
		t.Errorf("admitted %v = %d after the request of 10: want %d within the bound %d (with the shares decided from)", admitted, total, p.Limit.Limit-10, bound)
	}
}
