package regions

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/limiter/store"
)

// post sends body to region a's peer endpoint directly (no proxy) with
// the bearer token tok.
func (l *lab) post(t *testing.T, tok string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://"+l.regions["a"].addr+GrantPath, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func mustJSON(t *testing.T, v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestAttackHostilePeer: calls on a home's peer endpoint that a hostile
// client or peer makes up, in the lab's insecure mode (bearer tokens). Without the token nothing is decided; with it,
// a peer can't be granted more than g, can't credit units it was never
// granted, can't take a grant from a policy that is not Global (Region-scoped
// counters never leave their region) nor from a counter homed elsewhere,
// and can't send a large body. The limit holds afterwards: the regions
// admit at most limit + bound.
func TestAttackHostilePeer(t *testing.T) {
	names := []string{"a", "c"}
	p := Policy{ID: "ns/per-user", Limit: longWindow}
	lab := newLab(t, names, []Policy{p}, func(_ string, o *Options) { o.Insecure = true })
	key := keyHomedAt(t, p.ID, "a", names)
	elsewhere := keyHomedAt(t, p.ID, "c", names)
	a := lab.regions["a"].r
	g := a.GrantSize(p.Limit)
	call := func(mod func(c *grantCall)) []byte {
		c := grantCall{Region: "c", Policy: p.ID, Key: key.String(), Cost: 1, Want: g - 1}
		mod(&c)
		return mustJSON(t, c)
	}
	for _, tc := range []struct {
		name   string
		tok    string
		body   []byte
		status int
		reason string
	}{
		{"no token", "", call(func(*grantCall) {}), http.StatusUnauthorized, ReasonUnauthorized},
		{"wrong token", token("c"), call(func(*grantCall) {}), http.StatusUnauthorized, ReasonUnauthorized},
		{"token prefix", token("a")[:MinTokenBytes-1], call(func(*grantCall) {}), http.StatusUnauthorized, ReasonUnauthorized},
		{"unknown region", token("a"), call(func(c *grantCall) { c.Region = "z" }), http.StatusForbidden, ReasonUnknownRegion},
		{"Region-scoped policy", token("a"), call(func(c *grantCall) { c.Policy = "ns/per-ip" }), http.StatusNotFound, ReasonRefused},
		{"counter homed elsewhere", token("a"), call(func(c *grantCall) { c.Key = elsewhere.String() }), http.StatusMisdirectedRequest, ReasonRefused},
		{"malformed key", token("a"), call(func(c *grantCall) { c.Key = "{slot}" + strings.Repeat("x", 16) }), http.StatusBadRequest, ReasonRefused},
		{"unknown field", token("a"), []byte(`{"region":"c","limit":1000000000}`), http.StatusBadRequest, ReasonRefused},
		{"large body", token("a"), []byte(`{"region":"` + strings.Repeat("c", 2*MaxBodyBytes) + `"}`), http.StatusBadRequest, ReasonRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := lab.post(t, tc.tok, tc.body)
			var ref refusal
			_ = json.Unmarshal(body, &ref)
			if status != tc.status || ref.Reason != tc.reason || ref.Message == "" {
				t.Fatalf("got %d %s, want %d with reason %s and a message", status, body, tc.status, tc.reason)
			}
		})
	}
	t.Run("grant and credit are capped", func(t *testing.T) {
		status, body := lab.post(t, token("a"), call(func(c *grantCall) { c.Want, c.Cost = 1_000_000_000, 1 }))
		var ans grantAnswer
		if err := json.Unmarshal(body, &ans); err != nil || status != http.StatusOK {
			t.Fatalf("got %d %s", status, body)
		}
		if ans.Granted > g-1 {
			t.Fatalf("asked for a billion, granted %d: want at most g-1 = %d", ans.Granted, g-1)
		}
		// Credits of units never granted, again and again: the ledger
		// believes one credit of what was granted, once.
		for range 20 {
			if status, body := lab.post(t, token("a"), call(func(c *grantCall) { c.Credit = 1_000_000 })); status != http.StatusOK {
				t.Fatalf("got %d %s", status, body)
			}
		}
		// The attacker holds its grants (it has the token: it can deny,
		// never admit past the bound); each call spent its unit of cost.
		spentByAttack := int64(1 + 20)
		admitted := lab.drive(t, p, key, []int{3, 1})
		total := sum(admitted) + spentByAttack
		limit := p.Limit.Limit + a.ReachBound(p.Limit) + 1 + ans.Granted // the one credit believed
		t.Logf("after the attack the regions admitted %v; with the attack's units %d, at most %d", admitted, total, limit)
		if total > limit {
			t.Fatalf("the regions and the attacker took %d units: want at most %d", total, limit)
		}
	})
}

// TestNewRefusesBadOptions: each bad option is refused with an error that
// names it.
func TestNewRefusesBadOptions(t *testing.T) {
	ca := newLabCA(t)
	good := func() Options {
		o := Options{Region: "a", Peers: []Peer{{Name: "b", URL: "https://b.example.com:8083"}}}
		ca.tlsFor(t, &o, "a")
		return o
	}
	lab := func(o *Options) { o.Insecure, o.Token, o.Peers[0].Token = true, token("a"), token("b") }
	for _, tc := range []struct {
		name string
		mod  func(o *Options)
		want string
	}{
		{"region not a label", func(o *Options) { o.Region = "A_1" }, `region "A_1": must be a DNS label`},
		{"no TLS", func(o *Options) { o.ClientTLS, o.ServerTLS = nil, nil }, "region a: peers need mutual TLS"},
		{"plain HTTP peer", func(o *Options) { o.Peers[0].URL = "http://b.example.com:8083" }, `peer b: endpoint "http://b.example.com:8083" is plain HTTP: peers need https (mutual TLS), http only in the insecure lab mode`},
		{"short lab token", func(o *Options) { lab(o); o.Token = "short" }, "the peer token peers must present here is 5 bytes, want at least 32"},
		{"short lab peer token", func(o *Options) { lab(o); o.Peers[0].Token = "x" }, "peer b: its token is 1 bytes"},
		{"peer named as the region", func(o *Options) { o.Peers[0].Name = "a" }, "peer a: named twice, or this region's own name"},
		{"peer URL with a path", func(o *Options) { o.Peers[0].URL = "https://b.example.com/x" }, `peer b: endpoint "https://b.example.com/x" must be an https URL`},
		{"peer URL with a user", func(o *Options) { o.Peers[0].URL = "https://u:p@b.example.com" }, "must be an https URL"},
		{"share over 100", func(o *Options) { o.PartitionSharePercent = 101 }, "partition share 101%: must be from 1 to 100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good()
			tc.mod(&o)
			_, err := New(nil, o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := New(nil, good()); err != nil {
		t.Fatalf("good options refused: %v", err)
	}
	o := good()
	lab(&o)
	o.Peers[0].URL = "http://b.example.com:8083"
	if _, err := New(nil, o); err != nil {
		t.Fatalf("the insecure lab's http:// peer refused: %v", err)
	}
}

// TestRegionJoiningAndLeaving: the home of a counter depends on the key
// and the region names only. A region joining takes over only the
// counters it wins, about 1/N, and moves no other; a region leaving hands
// over only its own.
func TestRegionJoiningAndLeaving(t *testing.T) {
	three := []string{"a", "b", "c"}
	four := []string{"a", "b", "c", "d"}
	moved, toD := 0, 0
	const n = 3000
	for i := range n {
		var b store.KeyBuilder
		b.Add("user")
		b.Add(string(rune(i)))
		k := b.Key()
		before, after := home(k, three), home(k, four)
		if before != after {
			moved++
			if after != "d" {
				t.Fatalf("key %d moved from %s to %s when d joined: only d may take counters", i, before, after)
			}
		}
		if after == "d" {
			toD++
		}
		// d leaving again hands its counters back where they were.
		if home(k, three) != before {
			t.Fatal("the home is not a function of the key and the names")
		}
	}
	if moved != toD || toD < n/8 || toD > n*3/8 {
		t.Fatalf("d joining moved %d of %d counters, d homes %d: want about a quarter, all to d", moved, n, toD)
	}
}
