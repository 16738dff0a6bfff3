package regions

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-dev/sluice/limiter/store"
)

// takeEach sends n requests of cost to region r in turn and counts those
// admitted; a decision is never an error.
func takeEach(t *testing.T, r *Regions, ctx context.Context, p Policy, key store.Key, cost int64, n int) int64 {
	t.Helper()
	var admitted int64
	for i := range n {
		res, err := r.Take(ctx, p, store.Request{Key: key, Limit: p.Limit, Cost: cost})
		if err != nil {
			t.Fatalf("request %d of cost %d: %v, want a decision", i, cost, err)
		}
		if res.Allowed {
			admitted++
		}
	}
	return admitted
}

// TestCostAboveAGrant: a request that costs more than a grant holds
// (limit/(20·N): 16 of 1000 over 3 regions) is decided exactly at the key's
// home, from another region over the link, at the home in its store. Before,
// no grant could cover it and it was denied in every region, whatever was
// left of the limit. A home that can't be reached leaves it to the
// partition share, and a request whose deadline is too near to wait for
// the link to the share too, never to an error.
func TestCostAboveAGrant(t *testing.T) {
	names := []string{"a", "b", "c"}
	p := Policy{ID: "ns/tokens", Limit: longWindow}
	lab := newLab(t, names, []Policy{p}, nil)
	b := lab.regions["b"]
	if g := b.r.GrantSize(p.Limit); g >= 100 {
		t.Fatalf("grant %d: the test wants costs above it", g)
	}
	ctx := context.Background()

	// From another region: 10 of 12 requests of 100 fit in 1000.
	key := keyHomedAt(t, p.ID, "a", names)
	if got := takeEach(t, b.r, ctx, p, key, 100, 12); got != 10 {
		t.Errorf("region b admitted %d requests of cost 100 homed at a, want 10 (limit 1000, decided at the home)", got)
	}
	if n := testutil.ToFloat64(b.r.metrics.decisions.WithLabelValues("remote")); n != 12 {
		t.Errorf("sluice_region_decisions_total{path=remote} = %.0f at b, want 12", n)
	}
	// They were spent at the home: once its first grant call for the key
	// is answered (before, a cold key's advance of at most a grant), the
	// home admits nothing more.
	a, g := lab.regions["a"], b.r.GrantSize(p.Limit)
	if got := takeEach(t, a.r, ctx, p, key, 1, 20); got > g {
		t.Errorf("the home admitted %d of cost 1 on a spent counter, more than a cold key's advance %d", got, g)
	}
	lab.quiet(t)
	if got := takeEach(t, a.r, ctx, p, key, 1, 20); got > 0 {
		t.Errorf("the home admitted %d of cost 1 after 1000 units were spent from b", got)
	}

	// At the home: exact in its own store.
	key2 := keyHomedAt(t, p.ID+"-2", "a", names)
	p2 := Policy{ID: p.ID + "-2", Limit: longWindow}
	for _, n := range names {
		lab.regions[n].r.Swap([]Policy{p, p2})
	}
	if got := takeEach(t, a.r, ctx, p2, key2, 100, 12); got != 10 {
		t.Errorf("the home admitted %d requests of cost 100, want 10", got)
	}

	// A request whose deadline leaves no time for the link (80ms each
	// way) is decided from the share at once.
	key3 := keyHomedAt(t, p2.ID, "c", names)
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := b.r.Take(short, p2, store.Request{Key: key3, Limit: p2.Limit, Cost: 100}); err != nil {
		t.Fatalf("a request with 20ms left: %v, want a decision", err)
	}
	if took := time.Since(start); took >= labLatency {
		t.Logf("a request with 20ms left took %v (a loaded machine?)", took)
	}
	if n := testutil.ToFloat64(b.r.metrics.decisions.WithLabelValues("share")); n != 1 {
		t.Errorf("sluice_region_decisions_total{path=share} = %.0f at b after a request with 20ms left, want 1", n)
	}

	// The link to the home cut: the partition share decides.
	lab.quiet(t)
	b.links["c"].Cut()
	share := b.r.shareLimit(p2.Limit).Limit
	got := takeEach(t, b.r, ctx, p2, key3, 100, 10)
	t.Logf("with the link to the home cut, b admitted %d requests of cost 100 (share %d)", got, share)
	if got > share/100 {
		t.Errorf("with the link cut, b admitted %d requests of cost 100: over its share %d", got, share)
	}
}

// TestAttackCostlyFloodKeepsGrants: a client floods a region with requests
// that each cost more than a grant, for a key homed elsewhere, while the
// link is slow. Those wait on their own calls, at most maxSpendInFlight at
// once (the rest are decided from the share at once, never an error), and
// the grant calls every other key needs still go out.
func TestAttackCostlyFloodKeepsGrants(t *testing.T) {
	names := []string{"a", "b", "c"}
	p := Policy{ID: "ns/tokens", Limit: longWindow}
	lab := newLab(t, names, []Policy{p}, nil)
	b := lab.regions["b"]
	costly := keyHomedAt(t, p.ID, "a", names)
	var other store.Key
	for i := range 10000 {
		var kb store.KeyBuilder
		kb.Add(fmt.Sprint("other-", i))
		if k := kb.Key(); home(globalKey(p.ID, k), lab.names) == "a" {
			other = k
			break
		}
	}
	b.links["a"].SetLatency(2 * time.Second)
	const flood = 100
	var wg sync.WaitGroup
	var errs atomic.Int64
	for range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.r.Take(context.Background(), p, store.Request{Key: costly, Limit: p.Limit, Cost: 100}); err != nil {
				errs.Add(1)
			}
		}()
	}
	pe := b.r.peers["a"]
	eventually(t, "the costly calls holding every slot of their own", func() (bool, string) {
		return len(pe.spendSem) == maxSpendInFlight, fmt.Sprintf("%d of %d", len(pe.spendSem), maxSpendInFlight)
	})
	if _, err := b.r.Take(context.Background(), p, store.Request{Key: other, Limit: p.Limit, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	if n := b.r.inFlight(); n != 1 {
		t.Errorf("%d grant calls out for another key during the flood, want 1: the flood held up its grant", n)
	}
	b.links["a"].SetLatency(labLatency)
	wg.Wait()
	if n := errs.Load(); n != 0 {
		t.Errorf("%d of %d costly requests got an error, want decisions", n, flood)
	}
	share := testutil.ToFloat64(b.r.metrics.decisions.WithLabelValues("share"))
	remote := testutil.ToFloat64(b.r.metrics.decisions.WithLabelValues("remote"))
	t.Logf("of %d costly requests: %.0f decided at the home, %.0f from the share", flood, remote, share)
	if remote > maxSpendInFlight || remote+share != flood {
		t.Errorf("remote %.0f, share %.0f: want at most %d at the home at once and the rest from the share", remote, share, maxSpendInFlight)
	}
}
