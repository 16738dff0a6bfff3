package regions

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testnet"
	"github.com/sluice-dev/sluice/internal/testtier"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// The lab: each region a redis-server and a Regions on an address of its
// own, the peer endpoint served over mutual TLS (each region a certificate
// of the lab's CA named after it; plain HTTP and tokens when a tweak sets
// Insecure), and every link from one region to another through a TCP
// proxy that adds 80ms and can be cut.

const labLatency = 80 * time.Millisecond

type labRegion struct {
	name  string
	redis *redistest.Server
	st    *redisstore.Store
	r     *Regions
	srv   *http.Server
	addr  string
	// links are this region's proxies to each peer's endpoint.
	links map[string]*redistest.Proxy
}

type lab struct {
	regions map[string]*labRegion
	names   []string
	ca      *labCA
}

func token(name string) string { return strings.Repeat(name[:1], MinTokenBytes) + "-token" }

// newLab starts regions named names (ip offsets from 40 up), each peering
// with every other; tweak may change each region's options before New.
func newLab(t testing.TB, names []string, policies []Policy, tweak func(name string, o *Options)) *lab {
	t.Helper()
	testtier.Integration(t, "redis-server")
	l := &lab{regions: map[string]*labRegion{}, names: names, ca: newLabCA(t)}
	for i, n := range names {
		ip := testnet.IP(40 + i)
		lr := &labRegion{name: n, links: map[string]*redistest.Proxy{}}
		lr.redis = redistest.StartAt(t, redistest.FreeAddr(t, ip))
		st, err := redisstore.New(redisstore.Options{Addrs: []string{lr.redis.Addr}, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		lr.st = st
		ln, err := net.Listen("tcp", redistest.FreeAddr(t, ip))
		if err != nil {
			t.Fatal(err)
		}
		lr.addr = ln.Addr().String()
		l.regions[n] = lr
		defer func(lr *labRegion, ln net.Listener) {
			lr.srv = &http.Server{Handler: lr.r.Handler(), ReadHeaderTimeout: 10 * time.Second}
			if cfg := lr.r.ServerTLS(); cfg != nil {
				ln = tls.NewListener(ln, cfg)
			}
			go func() { _ = lr.srv.Serve(ln) }()
			t.Cleanup(func() { _ = lr.srv.Close() })
		}(lr, ln)
	}
	for _, n := range names {
		lr := l.regions[n]
		// A loaded machine may take seconds to answer: only a cut link
		// (refused at once) makes a home unreachable here.
		opts := Options{Region: n, Token: token(n), GrantTTL: time.Minute, CallTimeout: time.Minute}
		l.ca.tlsFor(t, &opts, n)
		for _, m := range names {
			if m == n {
				continue
			}
			px := redistest.StartProxy(t, l.regions[m].addr)
			px.SetLatency(labLatency)
			lr.links[m] = px
			opts.Peers = append(opts.Peers, Peer{Name: m, URL: "https://" + px.Addr, Token: token(m)})
		}
		if tweak != nil {
			tweak(n, &opts)
		}
		if opts.Insecure {
			opts.ClientTLS, opts.ServerTLS = nil, nil
			for i := range opts.Peers {
				opts.Peers[i].URL = strings.Replace(opts.Peers[i].URL, "https://", "http://", 1)
			}
		}
		r, err := New(lr.st, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		r.Swap(policies)
		lr.r = r
	}
	return l
}

// keyHomedAt returns a counter key of policy whose home is region.
func keyHomedAt(t testing.TB, policy, region string, names []string) store.Key {
	sorted := slices.Sorted(slices.Values(names))
	for i := range 10000 {
		var b store.KeyBuilder
		b.Add(fmt.Sprint("user-", i))
		k := b.Key()
		if home(globalKey(policy, k), sorted) == region {
			return k
		}
	}
	t.Fatalf("no key homed at %s", region)
	return store.Key{}
}

// inFlight is the number of grant calls out.
func (r *Regions) inFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.keys {
		if e.busy {
			n++
		}
	}
	return n
}

// eventually waits for cond with a generous deadline, saying what it last
// saw.
func eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 2 minutes for %s; last saw %s", what, seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// quiet waits until no region has a grant call out.
func (l *lab) quiet(t testing.TB) {
	t.Helper()
	eventually(t, "every grant call to come back", func() (bool, string) {
		var out []string
		for _, n := range l.names {
			if c := l.regions[n].r.inFlight(); c > 0 {
				out = append(out, fmt.Sprintf("%s: %d", n, c))
			}
		}
		return len(out) == 0, fmt.Sprint(out)
	})
}

// drive sends rounds of requests for key, weights[i] per round to region
// names[i] (concurrently within a round), waiting between rounds for the
// grant calls, until a round is denied everywhere. It returns what each
// region admitted.
func (l *lab) drive(t *testing.T, p Policy, key store.Key, weights []int) map[string]int64 {
	t.Helper()
	admitted := map[string]int64{}
	for round := 0; ; round++ {
		if round > 10000 {
			t.Fatal("the regions never stopped admitting")
		}
		var mu sync.Mutex
		var any atomic.Bool
		var wg sync.WaitGroup
		for i, n := range l.names {
			for range weights[i] {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := l.regions[n].r.Take(context.Background(), p, store.Request{Key: key, Limit: p.Limit, Cost: 1})
					if err != nil {
						t.Error(err)
						return
					}
					if res.Allowed {
						any.Store(true)
						mu.Lock()
						admitted[n]++
						mu.Unlock()
					}
				}()
			}
		}
		wg.Wait()
		l.quiet(t)
		if !any.Load() && l.noHeld(p, key) {
			return admitted
		}
	}
}

// noHeld reports that no region holds units of key or is waiting on a
// denial to expire with units owed.
func (l *lab) noHeld(p Policy, key store.Key) bool {
	gk := globalKey(p.ID, key)
	for _, n := range l.names {
		r := l.regions[n].r
		r.mu.Lock()
		e := r.keys[gk]
		held := e != nil && e.held > 0
		r.mu.Unlock()
		if held {
			return false
		}
	}
	return true
}

func sum(m map[string]int64) int64 {
	var s int64
	for _, v := range m {
		s += v
	}
	return s
}

// longWindow is the tests' global limit: a FixedWindow of 1000 in 720h.
// An hour's window (Redis TIME, aligned to the epoch) could end while a
// test drives the regions, and the fresh window would admit a second
// limit on top of the first.
var longWindow = algo.Limit{Algorithm: algo.FixedWindow, Limit: 1000, Period: 720 * time.Hour}

// TestGlobalBoundUnderSkewedLoad: three regions 80ms apart spend one
// global limit of 1000 per window under load spread 60/30/10: together they
// admit at least the limit (every unit that left the counter was spent)
// and at most the limit plus the declared bound.
func TestGlobalBoundUnderSkewedLoad(t *testing.T) {
	names := []string{"a", "b", "c"}
	for _, alg := range []algo.Algorithm{algo.FixedWindow, algo.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			l := longWindow
			l.Algorithm = alg
			if alg.UsesBurst() {
				// A day's refill: nothing comes back within the test.
				l.Period, l.Burst = 24*time.Hour, l.Limit
			}
			p := Policy{ID: "ns/per-user-" + alg.String(), Limit: l}
			lab := newLab(t, names, []Policy{p}, nil)
			key := keyHomedAt(t, p.ID, "b", names)
			admitted := lab.drive(t, p, key, []int{6, 3, 1})
			bound := lab.regions["a"].r.ReachBound(p.Limit)
			total := sum(admitted)
			t.Logf("admitted %v = %d; limit %d, bound %d", admitted, total, p.Limit.Limit, bound)
			if total < p.Limit.Limit || total > p.Limit.Limit+bound {
				t.Fatalf("admitted %d (%v): want from the limit %d to limit + bound %d", total, admitted, p.Limit.Limit, p.Limit.Limit+bound)
			}
			if admitted["a"] <= admitted["c"] {
				t.Errorf("admitted %v: the region with 60%% of the load should admit more than the one with 10%%", admitted)
			}
		})
	}
}

// closedAddr is an address where nothing listens.
func closedAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", redistest.FreeAddr(t, testnet.IP(49)))
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
