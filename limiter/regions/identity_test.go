package regions

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/limiter/store"
)

// tlsPost sends body to region a's peer endpoint directly (no proxy) over
// TLS, presenting cert (none when nil) and trusting the lab's CA.
func (l *lab) tlsPost(t *testing.T, scheme string, cert *tls.Certificate, body []byte) (int, []byte, error) {
	t.Helper()
	cfg := &tls.Config{RootCAs: l.ca.Roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: cfg}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, scheme+"://"+l.regions["a"].addr+GrantPath, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data, nil
}

// TestAttackPeerActsAsOtherRegion: regions a, b and c peer over mutual
// TLS. A caller holding c's certificate claims in its body to be b, to
// credit back b's grant (admitting past the bound) or to hold grants in
// b's name (making the home deny): refused, the home takes the caller's
// region from its certificate. A certificate of no peer, of another CA,
// or none, and plain HTTP get no grant either; a region can't answer as
// another's home; and a plain http:// peer endpoint is refused at config.
// After the attack the regions admit at most the limit plus B.
func TestAttackPeerActsAsOtherRegion(t *testing.T) {
	names := []string{"a", "b", "c"}
	p := Policy{ID: "ns/per-user", Limit: longWindow}
	lab := newLab(t, names, []Policy{p}, nil)
	key := keyHomedAt(t, p.ID, "a", names)
	a, b := lab.regions["a"].r, lab.regions["b"].r
	g := a.GrantSize(p.Limit)
	// b holds a grant of a's: what it has not spent is b's to credit.
	if _, err := b.Take(context.Background(), p, store.Request{Key: key, Limit: p.Limit, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	lab.quiet(t)
	call := func(region string, mod func(c *grantCall)) []byte {
		c := grantCall{Region: region, Policy: p.ID, Key: key.String(), Cost: 1, Want: g - 1, SharePercent: 33}
		if mod != nil {
			mod(&c)
		}
		return mustJSON(t, c)
	}
	asC, asZ, otherB := lab.ca.issue(t, "c"), lab.ca.issue(t, "z"), newLabCA(t).issue(t, "b")
	for _, tc := range []struct {
		name   string
		cert   *tls.Certificate
		body   []byte
		status int
		reason string
	}{
		{"c's certificate crediting b's grant", asC, call("b", func(c *grantCall) { c.Want, c.Credit = 0, 1_000_000 }), http.StatusForbidden, ReasonUnauthorized},
		{"c's certificate holding grants as b", asC, call("b", nil), http.StatusForbidden, ReasonUnauthorized},
		{"c's certificate with no region said", asC, call("", nil), http.StatusForbidden, ReasonUnauthorized},
		{"a certificate of no peer", asZ, call("z", nil), http.StatusForbidden, ReasonUnknownRegion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, err := lab.tlsPost(t, "https", tc.cert, tc.body)
			var ref refusal
			_ = json.Unmarshal(body, &ref)
			if err != nil || status != tc.status || ref.Reason != tc.reason || ref.Message == "" {
				t.Fatalf("got %d %s (%v), want %d with reason %s and a message", status, body, err, tc.status, tc.reason)
			}
			t.Logf("refused: %s", ref.Message)
		})
	}
	for _, tc := range []struct {
		name, scheme string
		cert         *tls.Certificate
	}{{"no certificate", "https", nil}, {"b's name from another CA", "https", otherB}, {"plain HTTP", "http", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, err := lab.tlsPost(t, tc.scheme, tc.cert, call("b", nil))
			if err == nil && status == http.StatusOK {
				t.Fatalf("got %d %s: want no grant", status, body)
			}
			t.Logf("no grant: %d %v", status, err)
		})
	}
	t.Run("a region answering as another's home", func(t *testing.T) {
		// c's link to a goes to b's endpoint: b's certificate is not a's.
		lab := newLab(t, names, []Policy{p}, func(n string, o *Options) {
			if n == "c" {
				o.Peers[0].URL = "https://" + strings.TrimPrefix(o.Peers[1].URL, "https://")
			}
		})
		admitted := lab.takeUntilDenied(t, "c", p, key)
		c := lab.regions["c"].r
		st := peerStatus(c, "a")
		t.Logf("c admitted %d; c sees a as %+v", admitted, st)
		if st.Reason != ReasonUnauthorized || !strings.Contains(st.Message, `region "b"'s, not "a"'s`) {
			t.Fatalf("c sees a as %+v: want Unauthorized, b's certificate named", st)
		}
		if share := c.shareLimit(p.Limit).Limit; admitted > share+g {
			t.Fatalf("c admitted %d: want at most its share %d and a cold advance %d", admitted, share, g)
		}
	})
	t.Run("a plain http:// peer endpoint", func(t *testing.T) {
		o := Options{Region: "a", Peers: []Peer{{Name: "b", URL: "http://" + lab.regions["b"].addr}}}
		lab.ca.tlsFor(t, &o, "a")
		if _, err := New(nil, o); err == nil || !strings.Contains(err.Error(), "is plain HTTP: peers need https (mutual TLS)") {
			t.Fatalf("New with an http:// peer: %v, want refused", err)
		}
	})
	// The refused calls moved nothing: b's grant and the limit hold.
	admitted := lab.drive(t, p, key, []int{1, 1, 1})
	total := sum(admitted) + 1
	t.Logf("after the attack the regions admitted %v, %d in all (limit %d, B %d)", admitted, total, p.Limit.Limit, a.ReachBound(p.Limit))
	if total > p.Limit.Limit+a.ReachBound(p.Limit) || total < p.Limit.Limit-a.ReachBound(p.Limit) {
		t.Fatalf("the regions admitted %d: want the limit %d within B %d", total, p.Limit.Limit, a.ReachBound(p.Limit))
	}
}
