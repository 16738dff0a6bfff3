package config_test

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/limiter/config"
)

func policiesOf(t *testing.T, file string) []config.Source {
	t.Helper()
	snap, err := config.LoadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []config.Source
	for _, p := range snap.Policies {
		obj := config.Source{RateLimitPolicy: v1beta1.RateLimitPolicy{Spec: *config.SpecOf(p)}}
		obj.Namespace, obj.Name, obj.Generation = p.Namespace, p.Name, 3
		out = append(out, obj)
	}
	return out
}

// The operator's encoding and the limiter's parse agree on the version, so
// a pod's acknowledgement names exactly what the operator wrote.
func TestDocumentRoundTrip(t *testing.T) {
	pols := policiesOf(t, "testdata/good.yaml")
	data, version := config.EncodeDocument(config.DocumentFor(pols, config.EnforcementEnabled))
	snap, err := config.ParseDocument(data)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Version != version || len(snap.Policies) != 3 || snap.Policies[0].Generation != 3 {
		t.Fatalf("parsed version %s (want %s), %d policies", snap.Version, version, len(snap.Policies))
	}
	again, v2 := config.EncodeDocument(config.DocumentOf(snap))
	if string(again) != string(data) || v2 != version {
		t.Fatal("re-encoding a parsed document changed it")
	}
	// Order does not matter; enforcement does.
	rev := []config.Source{pols[2], pols[0], pols[1]}
	if _, v := config.EncodeDocument(config.DocumentFor(rev, "")); v != version {
		t.Fatal("order changed the version")
	}
	off, vOff := config.EncodeDocument(config.DocumentFor(pols, config.EnforcementDisabled))
	if vOff == version {
		t.Fatal("the kill switch did not change the version")
	}
	if s, err := config.ParseDocument(off); err != nil || s.Enforcement != config.EnforcementDisabled {
		t.Fatalf("disabled document: %v %v", s, err)
	}
	// An empty document is a valid, empty snapshot.
	empty, _ := config.EncodeDocument(config.Document{})
	if s, err := config.ParseDocument(empty); err != nil || len(s.Policies) != 0 {
		t.Fatalf("empty document: %v %v", s, err)
	}
}

func TestParseDocumentRejectsGarbage(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"policies": [`, "snapshot document"},
		{`{"enforcement":"Maybe","policies":[]}`, `enforcement "Maybe"`},
		{`{"policies":[],"extra":1}`, `unknown field "extra"`},
		{`{"policies":[{"namespace":"a","name":"b","spec":{"domain":"d","descriptors":[{"key":"k"}],"rate":{"limit":0,"period":"1s"}}}]}`, "spec.limit.rate.limit"},
		{`{"format":2,"policies":[{"namespace":"a","name":"b","spec":{"domain":"d","descriptors":[{"key":"k"}],"limit":{"type":"Rate","rate":{"limit":0,"period":"1s"}}}}]}`, "spec.limit.rate.limit"},
	} {
		if _, err := config.ParseDocument([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.in, err, tc.want)
		}
	}
}

// A snapshot's budgets are validated and carried; an invalid one names the
// namespace and the field.
func TestDocumentBudgets(t *testing.T) {
	good := config.Document{Budgets: &config.Budgets{Default: config.NamespaceBudget{MaxPoliciesPerRequest: 32, StoreCallsPerSecond: 100},
		Namespaces: map[string]config.NamespaceBudget{"pay": {MaxPoliciesPerRequest: 64, StoreCallsPerSecond: 1000}}}}
	data, _ := config.EncodeDocument(good)
	snap, err := config.ParseDocument(data)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Budgets.For("pay").MaxPoliciesPerRequest != 64 || snap.Budgets.For("shop").StoreCallsPerSecond != 100 {
		t.Fatalf("budgets %+v", snap.Budgets)
	}
	if _, v := config.EncodeDocument(config.Document{}); v == snap.Version {
		t.Fatal("the budgets do not change the version")
	}
	bad := config.Document{Budgets: &config.Budgets{Default: config.NamespaceBudget{MaxPoliciesPerRequest: 32, StoreCallsPerSecond: 100},
		Namespaces: map[string]config.NamespaceBudget{"pay": {MaxPoliciesPerRequest: 0, StoreCallsPerSecond: 1000}}}}
	data, _ = config.EncodeDocument(bad)
	if _, err := config.ParseDocument(data); err == nil || !strings.Contains(err.Error(), "namespace pay: maxPoliciesPerRequest 0 is below 1") {
		t.Fatalf("got %v", err)
	}
}
