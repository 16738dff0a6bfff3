package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/limiter/compiled"
)

// TestERLRefusals: every file ERL's loader refuses, Sluice refuses too,
// naming the file and what is wrong (ERL's words) and where.
func TestERLRefusals(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown key", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 2}\n",
			"descriptors[0].rate_limit: config error, unknown key 'burst'"},
		{"unknown top-level key", "domain: d\nlimits: {a: b}\n", "config error, unknown key 'limits'"},
		{"metadata that is no Struct", "domain: d\ndescriptors:\n  - key: k\n    metadata: {a: !!binary \"/w==\"}\n",
			"descriptors[0].metadata: error parsing metadata"},
		{"a float", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1.5}\n", "error checking config"},
		{"a list of scalars", "domain: d\ndescriptors: [a]\n", "yaml file contains list of type other than map"},
		{"not YAML", "domain: d\ndescriptors: [\n", "did not find expected node content"},
		{"empty domain", "descriptors:\n  - key: k\n", "config file cannot have empty domain"},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", "descriptors[0]: descriptor has empty key"},
		{"duplicate composite key", "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
			"descriptors[1]: duplicate descriptor composite key 'd.k_v'"},
		{"invalid unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
			"descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight'"},
		{"no unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n", "invalid rate limit unit ''"},
		{"unit with unlimited", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, unlimited: true}\n",
			"should not specify rate limit unit when unlimited"},
		{"negative requests_per_unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n", "error loading config file"},
		{"empty replaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: \"\"}]}\n",
			"should not have an empty replaces entry"},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: a}]}\n",
			"replaces should not contain name of same descriptor"},
		{"share_threshold without a wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
			"share_threshold can only be used with wildcard values (containing '*'), but found key 'k_v'"},
		{"nested refusal", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: minute}\n        descriptors:\n          - key: \"\"\n",
			"descriptors[0].descriptors[0].descriptors[0]: descriptor has empty key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "erl.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadPath(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), path+": ") {
				t.Fatalf("LoadPath: %v\nwant an error starting with %s: and containing %q", err, path, tc.want)
			}
		})
	}
}

// TestERLDirectory: a folder mixes a policy file and ERL files; a domain
// in two ERL files, or in an ERL file and a policy, is refused naming both.
func TestERLDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	policies, err := os.ReadFile("../../config/samples/policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	write("policies.yaml", string(policies))
	write("a.yaml", "domain: erl-a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")
	write(".hidden.yaml", "not: loaded\n")
	snap, err := LoadPath(dir)
	if err != nil {
		t.Fatalf("LoadPath: %v", err)
	}
	if !(snap.Domain("erl-a").Matching() == compiled.MatchTree) || snap.Domain("payments-api") == nil || (snap.Domain("payments-api").Matching() == compiled.MatchTree) {
		t.Fatalf("domains: erl-a ERL %v, payments-api %v", (snap.Domain("erl-a").Matching() == compiled.MatchTree), snap.Domain("payments-api"))
	}
	v1 := snap.Version
	write("b.yaml", "domain: erl-a\ndescriptors: []\n")
	if _, err := LoadPath(dir); err == nil || !strings.Contains(err.Error(), "duplicate domain 'erl-a'") || !strings.Contains(err.Error(), "a.yaml") {
		t.Fatalf("two files of one domain: %v", err)
	}
	write("b.yaml", "domain: payments-api\ndescriptors: []\n")
	if _, err := LoadPath(dir); err == nil || !strings.Contains(err.Error(), "payments/charges-per-user") {
		t.Fatalf("an ERL domain of a policy: %v", err)
	}
	write("b.yaml", "domain: erl-b\n")
	snap, err = LoadPath(dir)
	if err != nil || snap.Version == v1 || snap.Domain("erl-b").Matching() != compiled.MatchTree {
		t.Fatalf("a third file: %v (version %s, was %s)", err, snap.Version, v1)
	}
}

// TestERLMatching holds the matching to ERL's GetLimit: the value beats
// the key alone, then the first wildcard in file order (a '*' anywhere); a limit only at a
// descriptor's last entry; no deeper than the configuration.
func TestERLMatching(t *testing.T) {
	path := filepath.Join(t.TempDir(), "erl.yaml")
	cfg := `domain: d
descriptors:
  - key: path
    value: /a/b
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /a/*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /a*
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /m/*/x*y
    rate_limit: {unit: minute, requests_per_unit: 7}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: user
    descriptors:
      - key: op
        rate_limit: {unit: hour, requests_per_unit: 5}
  - key: leaf
    rate_limit: {unit: hour, requests_per_unit: 6}
`
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err := LoadPath(path)
	if err != nil {
		t.Fatal(err)
	}
	e := func(kv ...string) []compiled.Entry {
		var out []compiled.Entry
		for i := 0; i < len(kv); i += 2 {
			out = append(out, compiled.Entry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		entries []compiled.Entry
		want    int64 // the matched limit, 0 for none
	}{
		{e("path", "/a/b"), 1},
		{e("path", "/a/c"), 2},
		{e("path", "/ab"), 3},
		{e("path", "/b"), 4},
		// A '*' inside a value (ERL after #1085): any run of bytes, none
		// too, in order, between a prefix and a suffix that don't overlap.
		{e("path", "/m/1/x2y"), 7},
		{e("path", "/m//xy"), 7},
		{e("path", "/m/1/x2y/z"), 4},
		{e("path", "/m/y"), 4},
		{e("path", "/a/*/x"), 2},
		{e("user", "u"), 0},
		{e("user", "u", "op", "x"), 5},
		{e("user", "u", "op", "x", "more", "y"), 0},
		{e("leaf", "v", "more", "y"), 0},
		{e("op", "x"), 0},
	} {
		m := snap.Domain("d").AppendMatches(nil, tc.entries)
		got := int64(0)
		if len(m) == 1 {
			got = m[0].Limit.Limit
		}
		if len(m) > 1 || got != tc.want {
			t.Errorf("%v: matched %d policies, limit %d; want limit %d", tc.entries, len(m), got, tc.want)
		}
	}
}

// BenchmarkERLWildcardMatch is the work of matching a value against '*'
// patterns (ERL after #1085), the most a client can make of it: a
// value of about 1024 bytes (MaxEntryLength) of near-misses against 16 wildcards of
// 8 parts each, none of which matches, so that every one is scanned.
func BenchmarkERLWildcardMatch(b *testing.B) {
	var cfg strings.Builder
	cfg.WriteString("domain: d\ndescriptors:\n")
	for i := range 16 {
		fmt.Fprintf(&cfg, "  - key: path\n    value: \"a*ab*abc*abcd*abcde*abcdef*abcdefg%d*z\"\n    rate_limit: {unit: minute, requests_per_unit: 1}\n", i)
	}
	path := filepath.Join(b.TempDir(), "erl.yaml")
	if err := os.WriteFile(path, []byte(cfg.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	snap, err := LoadPath(path)
	if err != nil {
		b.Fatal(err)
	}
	// The prefix and the suffix match; every middle part but the last is
	// found at once, and the last is looked for in the whole value.
	value := "a" + strings.Repeat("abcdef", 1022/6) + "z"
	entries := []compiled.Entry{{Key: "path", Value: value}}
	dom := snap.Domain("d")
	var m []*compiled.Policy
	b.ReportAllocs()
	for b.Loop() {
		if m = dom.AppendMatches(m[:0], entries); len(m) != 0 {
			b.Fatalf("matched %d", len(m))
		}
	}
}
