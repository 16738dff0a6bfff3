package config_test

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/limiter/config"
)

// golden1 is testdata/format1/snapshot.json, a format-1 document as main
// (ca0d833) encoded testdata/format1/policies.yaml, with its version.
func golden1(t *testing.T) (data []byte, version string) {
	t.Helper()
	data, err := os.ReadFile("testdata/format1/snapshot.json")
	if err != nil {
		t.Fatal(err)
	}
	v, err := os.ReadFile("testdata/format1/version")
	if err != nil {
		t.Fatal(err)
	}
	return []byte(strings.TrimSpace(string(data))), strings.TrimSpace(string(v))
}

// samePolicies fails unless a and b compiled the same policies.
func samePolicies(t *testing.T, what string, a, b *config.Snapshot) {
	t.Helper()
	if len(a.Policies) != len(b.Policies) {
		t.Fatalf("%s: %d policies, want %d", what, len(b.Policies), len(a.Policies))
	}
	for i := range a.Policies {
		pa, pb := *a.Policies[i], *b.Policies[i]
		pa.Source, pb.Source = nil, nil // compared below: what compiled it, not how it was read
		if !reflect.DeepEqual(pa, pb) {
			t.Errorf("%s: policy %s compiled to\n%+v\nwant\n%+v", what, pa.ID(), pb, pa)
		}
		if !reflect.DeepEqual(config.SpecOf(a.Policies[i]), config.SpecOf(b.Policies[i])) {
			t.Errorf("%s: policy %s compiled from the spec\n%+v\nwant\n%+v", what, pa.ID(), *config.SpecOf(b.Policies[i]), *config.SpecOf(a.Policies[i]))
		}
	}
	if a.Pods != b.Pods || a.Enforcement != b.Enforcement || !reflect.DeepEqual(a.Budgets, b.Budgets) ||
		!reflect.DeepEqual(config.DocumentOf(a).ForwardAuth, config.DocumentOf(b).ForwardAuth) {
		t.Errorf("%s: pods, enforcement, budgets or forwardAuth differ", what)
	}
}

// A limiter of this version loads what the operator of the version before
// writes (format 1): the same snapshot as the policies behind it and as
// its format-2 form, acknowledged with the version that operator computed
// (the ConfigMap's data.version, which kube.Decode checks).
func TestDocumentFormat1Golden(t *testing.T) {
	data, version := golden1(t)
	old, err := config.ParseDocument(data)
	if err != nil {
		t.Fatal(err)
	}
	if old.Version != version {
		t.Errorf("format-1 document acknowledged as version %s, want %s (its writer's)", old.Version, version)
	}
	want, err := config.LoadFile("testdata/format1/policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want.Pods = 3
	want.Budgets = &config.Budgets{Default: config.NamespaceBudget{MaxPoliciesPerRequest: 4, StoreCallsPerSecond: 100}}
	samePolicies(t, "format 1", want, old)

	data2, v2 := config.EncodeDocument(config.DocumentOf(old))
	for _, s := range []string{`"format":2`, `"entries":{"lease":"upload_lease"}`, `"entries":{"priority":"tier"}`,
		`"scope":"Global"`, `"requestOverride":{"maximum":300}`, `"cost":{"max":5}`, `"mode":"Soft"`} {
		if !strings.Contains(string(data2), s) {
			t.Errorf("format-2 document lacks %s:\n%s", s, data2)
		}
	}
	if v2 == version {
		t.Error("the format-2 document has the format-1 document's version")
	}
	snap2, err := config.ParseDocument(data2)
	if err != nil {
		t.Fatal(err)
	}
	if snap2.Version != v2 {
		t.Errorf("format-2 document acknowledged as %s, want %s", snap2.Version, v2)
	}
	samePolicies(t, "format 2", want, snap2)
	if again, _ := config.EncodeDocument(config.DocumentOf(snap2)); string(again) != string(data2) {
		t.Errorf("re-encoding a format-2 document changed it:\n%s\n%s", data2, again)
	}
}

// A format this version does not know is refused, naming it and the
// highest this version knows; the caller keeps its snapshot
// (limiter/app TestNewerDocumentFormatKeepsLastGood).
func TestDocumentFormatRefused(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{`{"format":3,"enforcement":"Enabled","policies":[],"whatever":{"new":true}}`, "format 3 is newer than this limiter knows (formats up to 2)"},
		{`{"format":0,"enforcement":"Enabled","policies":[]}`, "format 0: want a whole number from 1 to 2"},
		{`{"format":"2","enforcement":"Enabled","policies":[]}`, "snapshot document"},
		{`{"format":1.5,"enforcement":"Enabled","policies":[]}`, "format 1.5: want a whole number"},
		// Format 1 is strict about format 2's fields, and the other way round.
		{`{"format":1,"enforcement":"Enabled","policies":[{"namespace":"a","name":"b","spec":{"domain":"d","descriptors":[{"key":"k"}],"limit":{"type":"Rate"}}}]}`, `policies[0].spec (a/b): unknown field "limit"`},
		{`{"format":2,"enforcement":"Enabled","policies":[{"namespace":"a","name":"b","spec":{"domain":"d","descriptors":[{"key":"k"}],"rate":{"limit":1}}}]}`, `unknown field "policies[0].spec.rate"`},
		{`{"format":2,"enforcement":"Enabled","policies":[{"namespace":"a","name":"b","entries":{"accept":"x"},"spec":{"domain":"d","descriptors":[{"key":"k"}],"limit":{"type":"Rate","rate":{"limit":1,"period":"1s"}}}}]}`,
			"a/b: entries: Forbidden: only lease and priority"},
		{`{"format":2,"enforcement":"Enabled","policies":[{"namespace":"a","name":"b","spec":{"domain":"d","descriptors":[{"key":"k"}],"limit":{"type":"Rate","rate":{"limit":1,"period":"1.5s"}}}}]}`,
			"a/b: spec.limit.rate.period"},
	} {
		if _, err := config.ParseDocument([]byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.doc, err, tc.want)
		}
	}
}

// The canonical encoding is deterministic: a duration's spelling (60s or
// 1m) and a Region scope said or left out give the same bytes, so the same
// version.
func TestDocumentFormat2Canonical(t *testing.T) {
	const policy = `apiVersion: ratelimit.sluice.dev/v1beta1
kind: RateLimitPolicy
metadata: {name: p, namespace: shop}
spec:
  domain: shop
  descriptors: [{key: user}]
  limit: {type: Rate, rate: {limit: 10, period: %s}}
`
	var versions []string
	for _, period := range []string{"1m", "60s", "1m, scope: Region", "0h1m"} {
		snap, err := config.Parse("p.yaml", []byte(strings.Replace(policy, "%s", period, 1)))
		if err != nil {
			t.Fatalf("%s: %v", period, err)
		}
		data, v := config.EncodeDocument(config.DocumentOf(snap))
		if v != snap.Version || !strings.Contains(string(data), `"period":"1m"`) || strings.Contains(string(data), "scope") {
			t.Errorf("%s: version %s (snapshot %s), document %s", period, v, snap.Version, data)
		}
		versions = append(versions, v)
	}
	for _, v := range versions[1:] {
		if v != versions[0] {
			t.Fatalf("versions %v: the spelling changed the document", versions)
		}
	}
}
