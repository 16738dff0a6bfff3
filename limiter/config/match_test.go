package config_test

import (
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/store"
)

const matchPolicies = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: a, namespace: m}
spec: {domain: d, descriptors: [{key: user}], rate: {limit: 1, period: 1s}}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: b, namespace: m}
spec: {domain: d, descriptors: [{key: user}, {key: path, value: /x}], rate: {limit: 1, period: 1s}}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: c, namespace: m}
spec: {domain: d, descriptors: [{key: path, value: /x}], rate: {limit: 1, period: 1s}}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: e, namespace: m}
spec: {domain: d, descriptors: [{key: ip}, {key: user}], rate: {limit: 1, period: 1s}}
`

func entries(kv ...string) []config.Entry {
	var out []config.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, config.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

func matchIDs(d *config.Domain, es []config.Entry) string {
	var ids []string
	for _, p := range d.AppendMatches(nil, es) {
		ids = append(ids, p.Name)
	}
	return fmt.Sprint(ids)
}

func TestMatching(t *testing.T) {
	snap, err := config.Parse("inline", []byte(matchPolicies))
	if err != nil {
		t.Fatal(err)
	}
	d := snap.Domain("d")
	for _, tc := range []struct {
		es   []config.Entry
		want string
	}{
		{entries("user", "u"), "[a]"},
		{entries("user", "u", "path", "/x"), "[a b c]"},
		{entries("path", "/x", "user", "u"), "[a b c]"}, // order-free
		{entries("user", "u", "path", "/y"), "[a]"},     // value must be equal
		{entries("path", "/x"), "[c]"},
		{entries("user", "u", "ip", "1.2.3.4"), "[a e]"},
		{entries("user", "u", "user", "v"), "[a]"}, // a repeated key matches once
		{entries("other", "1"), "[]"},
		{nil, "[]"},
	} {
		if got := matchIDs(d, tc.es); got != tc.want {
			t.Errorf("%v: got %s, want %s", tc.es, got, tc.want)
		}
	}
}

// Counter keys depend on the policy and on the values of its keys only.
func TestCounterKeys(t *testing.T) {
	snap, _ := config.Parse("inline", []byte(matchPolicies))
	a, b := snap.Policies[0], snap.Policies[1]
	var kb store.KeyBuilder
	k1 := a.CounterKey(&kb, entries("user", "u", "junk", "1"))
	k2 := a.CounterKey(&kb, entries("junk", "2", "user", "u"))
	k3 := a.CounterKey(&kb, entries("user", "v"))
	k4 := b.CounterKey(&kb, entries("user", "u", "path", "/x"))
	if k1 != k2 || k1 == k3 || k1 == k4 {
		t.Fatalf("keys: %v %v %v %v", k1, k2, k3, k4)
	}
	long := string(make([]byte, 4000)) // spills past the builder's buffer
	if a.CounterKey(&kb, entries("user", long)) == a.CounterKey(&kb, entries("user", long+"x")) {
		t.Fatal("long values collide")
	}
}

// FuzzMatch checks the indexed matcher against a direct reading of the
// rule: a policy matches when the entries carry all its keys, with equal
// values where it gives one.
func FuzzMatch(f *testing.F) {
	snap, err := config.Parse("inline", []byte(matchPolicies))
	if err != nil {
		f.Fatal(err)
	}
	d := snap.Domain("d")
	f.Add([]byte("user\x00u\x00path\x00/x"))
	f.Add([]byte("path\x00/x\x00path\x00/y"))
	f.Add([]byte("ip\x00\x00user\x00"))
	f.Add([]byte("\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var kv []string
		start := 0
		for i, b := range data {
			if b == 0 {
				kv = append(kv, string(data[start:i]))
				start = i + 1
			}
		}
		kv = append(kv, string(data[start:]))
		es := entries(kv...)
		got := map[string]bool{}
		for _, p := range d.AppendMatches(nil, es) {
			if got[p.Name] {
				t.Fatalf("%s matched twice", p.Name)
			}
			got[p.Name] = true
		}
		for _, p := range d.Policies {
			want := true
			for _, pd := range p.Descriptors {
				found := false
				for _, e := range es {
					if e.Key == pd.Key {
						found = pd.Value == nil || *pd.Value == e.Value
						break
					}
				}
				want = want && found
			}
			if got[p.Name] != want {
				t.Fatalf("%s: matched=%v, want %v for %v", p.Name, got[p.Name], want, es)
			}
		}
	})
}
