package regions

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/limiter/store"
)

// takeUntilDenied sends requests for key to region n one at a time,
// waiting for its grant calls, until it denies `settle` in a row with no
// call out; it returns how many it admitted.
func (l *lab) takeUntilDenied(t *testing.T, n string, p Policy, key store.Key) int64 {
	t.Helper()
	r := l.regions[n].r
	var admitted int64
	denials := 0
	for i := 0; denials < 5; i++ {
		if i > 100000 {
			t.Fatalf("%s never stopped admitting", n)
		}
		res, err := r.Take(context.Background(), p, store.Request{Key: key, Limit: p.Limit, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			admitted++
			denials = 0
			continue
		}
		l.quiet(t)
		denials++
	}
	return admitted
}

func peerStatus(r *Regions, name string) PeerStatus {
	for _, p := range r.Status().Peers {
		if p.Name == name {
			return p
		}
	}
	return PeerStatus{}
}

// waitPeer waits until region r sees peer name with reason, sending a
// request for key now and then (a call is what finds out).
func waitPeer(t *testing.T, r *Regions, name, reason string, p Policy, key store.Key) PeerStatus {
	t.Helper()
	var st PeerStatus
	eventually(t, fmt.Sprintf("%s to see %s as %s", r.Region(), name, reason), func() (bool, string) {
		_, _ = r.Take(context.Background(), p, store.Request{Key: key, Limit: p.Limit, Cost: 0})
		st = peerStatus(r, name)
		return st.Reason == reason, fmt.Sprintf("%+v", st)
	})
	return st
}

// TestPartitionShareAndHealing: region c, cut off from the home of a key,
// admits what it held plus its share of the limit (1/3), never more; the
// status says since when it can't reach the home. When the link heals,
// what c admitted meanwhile is charged to the home's counter and grants
// resume, so over the whole window the three regions admit no more than
// the limit plus the bound.
func TestPartitionShareAndHealing(t *testing.T) {
	names := []string{"a", "b", "c"}
	p := Policy{ID: "ns/per-user", Limit: longWindow}
	lab := newLab(t, names, []Policy{p}, nil)
	key := keyHomedAt(t, p.ID, "a", names)
	c := lab.regions["c"].r
	g := c.GrantSize(p.Limit)
	share := c.shareLimit(p.Limit).Limit

	// Warm: c holds a grant from a.
	for range 3 {
		if _, err := c.Take(context.Background(), p, store.Request{Key: key, Limit: p.Limit, Cost: 1}); err != nil {
			t.Fatal(err)
		}
		lab.quiet(t)
	}
	if st := peerStatus(c, "a"); !st.Reachable || st.Since.IsZero() {
		t.Fatalf("before the cut c sees a as %+v, want reachable", st)
	}
	lab.regions["c"].links["a"].Cut()
	during := lab.takeUntilDenied(t, "c", p, key)
	st := peerStatus(c, "a")
	t.Logf("cut off, c admitted %d (grant %d, share %d); c sees a as %+v", during, g, share, st)
	if st.Reachable || st.Reason != ReasonUnreachable || st.Since.IsZero() {
		t.Fatalf("c sees a as %+v, want Unreachable since the cut", st)
	}
	if during < share || during > share+g {
		t.Fatalf("cut off, c admitted %d: want its share %d, plus at most its grant %d", during, share, g)
	}

	lab.regions["c"].links["a"].Restore()
	waitPeer(t, c, "a", ReasonReachable, p, key)
	lab.quiet(t)
	after := lab.drive(t, p, key, []int{6, 3, 1})
	total := sum(after) + during + 3
	bound := c.ReachBound(p.Limit)
	t.Logf("healed: admitted %v after, %d in all (limit %d, bound %d)", after, total, p.Limit.Limit, bound)
	if total > p.Limit.Limit+bound {
		t.Fatalf("over the window the regions admitted %d: want at most limit + bound %d (the partition's units charged on healing)", total, p.Limit.Limit+bound)
	}
	if after["c"] == 0 && after["a"] == 0 {
		t.Fatalf("after healing nothing was admitted (%v): grants did not resume", after)
	}
}

// TestBadPeerConfiguration: a wrong token, a home that does not know the
// region, and an endpoint where nothing listens each show in the status
// with their own reason, and the region keeps limiting: it admits its
// partition share, never more.
func TestBadPeerConfiguration(t *testing.T) {
	names := []string{"a", "c"}
	p := Policy{ID: "ns/per-user", Limit: longWindow}
	for _, tc := range []struct {
		name, reason string
		tweak        func(name string, o *Options)
	}{
		{"a certificate of another CA", ReasonUnauthorized, func(n string, o *Options) {
			if n == "c" {
				newLabCA(t).tlsFor(t, o, "c")
			}
		}},
		{"unknown region", ReasonUnknownRegion, func(n string, o *Options) {
			if n == "a" {
				o.Peers = nil // a knows no region but itself: every key is homed there
			}
		}},
		{"unreachable peer", ReasonUnreachable, func(n string, o *Options) {
			if n == "c" {
				o.Peers[0].URL = "https://" + closedAddr(t)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lab := newLab(t, names, []Policy{p}, tc.tweak)
			c := lab.regions["c"].r
			// a key a is home of, in a's and c's eyes alike
			key := keyHomedAt(t, p.ID, "a", names)
			admitted := lab.takeUntilDenied(t, "c", p, key)
			st := peerStatus(c, "a")
			t.Logf("c admitted %d; c sees a as %+v", admitted, st)
			if st.Reachable || st.Reason != tc.reason || st.Message == "" {
				t.Fatalf("c sees a as %+v, want reason %s with a message", st, tc.reason)
			}
			share := c.shareLimit(p.Limit).Limit
			if admitted > share+c.GrantSize(p.Limit) {
				t.Fatalf("c admitted %d: want at most its share %d and a cold advance", admitted, share)
			}
		})
	}
}

// TestAttackHomePartitioned: the home of a key, c, is cut off from the
// other two regions, each with its own redis-server. a and b each admit
// their partition share, and c keeps admitting from its own counter, so
// the regions admit far more than the limit plus B and one region's
// share. What they admit stays within the bound every region states
// (Bound: B plus every region's share), and the home, which has heard
// every peer's share, states exactly that.
func TestAttackHomePartitioned(t *testing.T) {
	names := []string{"a", "b", "c"}
	l := longWindow
	l.Limit = 600
	p := Policy{ID: "ns/per-user", Limit: l}
	lab := newLab(t, names, []Policy{p}, func(_ string, o *Options) { o.PartitionSharePercent = 20 })
	key := keyHomedAt(t, p.ID, "c", names)
	var warm int64
	for range 3 {
		for _, n := range []string{"a", "b", "c"} {
			res, err := lab.regions[n].r.Take(context.Background(), p, store.Request{Key: key, Limit: p.Limit, Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed {
				warm++
			}
			lab.quiet(t)
		}
	}
	for _, n := range []string{"a", "b"} {
		lab.regions[n].links["c"].Cut()
		lab.regions["c"].links[n].Cut()
	}
	admitted := map[string]int64{"warm": warm}
	for _, n := range names {
		admitted[n] = lab.takeUntilDenied(t, n, p, key)
	}
	total := sum(admitted)
	c := lab.regions["c"].r
	reach, share := c.ReachBound(p.Limit), c.shareLimit(p.Limit).Limit
	t.Logf("home c cut off: admitted %v = %d; limit %d, B %d, share %d, stated bounds a %d, b %d, c %d",
		admitted, total, p.Limit.Limit, reach, share, lab.regions["a"].r.Bound(p.Limit), lab.regions["b"].r.Bound(p.Limit), c.Bound(p.Limit))
	if want := reach + 3*share; c.Bound(p.Limit) != want {
		t.Errorf("the home states a bound of %d: want B %d plus the three regions' shares %d = %d", c.Bound(p.Limit), reach, 3*share, want)
	}
	for _, n := range names {
		if b := lab.regions[n].r.Bound(p.Limit); total > p.Limit.Limit+b {
			t.Errorf("the regions admitted %d with the home cut off: over the limit %d + the bound %s states, %d", total, p.Limit.Limit, n, b)
		}
	}
	if admitted["a"] < share || admitted["b"] < share {
		t.Errorf("cut off from the home, a and b admitted %v: want each at least its share %d (they keep limiting, never fail closed)", admitted, share)
	}
}
