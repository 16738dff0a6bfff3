package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/convert"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/limiter/config"
)

func TestLoadFleet(t *testing.T) {
	snap, err := config.LoadFile("testdata/fleet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Enforcement != config.EnforcementDisabled {
		t.Errorf("enforcement %q: the fleet's Disabled not applied", snap.Enforcement)
	}
	want := []v1alpha1.ForwardAuth{
		{Domain: "admin", OnMissing: ptr.To(v1alpha1.OnMissingDeny), DenyStatus: ptr.To[int32](401),
			Descriptors: []v1alpha1.ForwardAuthDescriptor{{Key: "path", From: v1alpha1.FromPath}}},
		{Domain: "shop", OnMissing: ptr.To(v1alpha1.OnMissingAllow), DenyStatus: ptr.To[int32](429),
			Descriptors: []v1alpha1.ForwardAuthDescriptor{{Key: "api_key", From: v1alpha1.FromHeader, Header: ptr.To("X-Api-Key")}}},
	}
	if len(snap.ForwardAuth) != 2 || !snap.ForwardAuth[0].DenyOnMissing || snap.ForwardAuth[0].DenyStatus != 401 ||
		snap.ForwardAuth[1].DenyOnMissing || snap.ForwardAuth[1].Descriptors[0].Header != "X-Api-Key" {
		t.Errorf("forwardAuth compiled: %+v", snap.ForwardAuth)
	}
	if diff := cmp.Diff(convert.ForwardAuth(want), config.DocumentOf(snap).ForwardAuth); diff != "" {
		t.Errorf("forwardAuth, defaulted and sorted by domain (-want +got):\n%s", diff)
	}
	if m := snap.ForwardAuthFor("shop"); m == nil || m.Domain != "shop" {
		t.Errorf("ForwardAuthFor(shop) = %+v", m)
	}
	if snap.ForwardAuthFor("nope") != nil {
		t.Error("ForwardAuthFor(nope) is not nil")
	}
	// The mapping is part of the version.
	without, err := config.Parse("no-fleet", []byte(strings.Split(readFile(t, "testdata/fleet.yaml"), "---")[0]))
	if err != nil {
		t.Fatal(err)
	}
	if without.Version == snap.Version {
		t.Error("the fleet's forwardAuth and enforcement did not change the version")
	}
	// A snapshot document carries them to limiter pods unchanged.
	data, version := config.EncodeDocument(config.DocumentOf(snap))
	back, err := config.ParseDocument(data)
	if err != nil {
		t.Fatal(err)
	}
	if back.Version != version || version != snap.Version || !cmp.Equal(back.ForwardAuth, snap.ForwardAuth) {
		t.Errorf("document round trip: version %s/%s/%s, forwardAuth %+v", back.Version, version, snap.Version, back.ForwardAuth)
	}
}

// The canonical document sorts and defaults forwardAuth, so the operator
// writes the same bytes whatever the order in the fleet's spec.
func TestDocumentForwardAuthDeterministic(t *testing.T) {
	a := v1alpha1.ForwardAuth{Domain: "a", Descriptors: []v1alpha1.ForwardAuthDescriptor{{Key: "m", From: v1alpha1.FromMethod}}}
	b := v1alpha1.ForwardAuth{Domain: "b", DenyStatus: ptr.To[int32](429), OnMissing: ptr.To(v1alpha1.OnMissingAllow),
		Descriptors: []v1alpha1.ForwardAuthDescriptor{{Key: "p", From: v1alpha1.FromPath}}}
	bDefaulted := b
	bDefaulted.DenyStatus, bDefaulted.OnMissing = nil, nil
	one, v1 := config.EncodeDocument(config.Document{ForwardAuth: convert.ForwardAuth([]v1alpha1.ForwardAuth{a, b})})
	two, v2 := config.EncodeDocument(config.Document{ForwardAuth: convert.ForwardAuth([]v1alpha1.ForwardAuth{bDefaulted, a})})
	if string(one) != string(two) || v1 != v2 {
		t.Fatalf("different documents for the same mappings:\n%s\n%s", one, two)
	}
	if _, v0 := config.EncodeDocument(config.Document{}); v0 == v1 {
		t.Fatal("forwardAuth left the version unchanged")
	}
	if strings.Contains(string(mustEncode(config.Document{})), "forwardAuth") {
		t.Fatal("a document without forwardAuth mentions it: versions of existing snapshots would change")
	}
}

func mustEncode(d config.Document) []byte {
	b, _ := config.EncodeDocument(d)
	return b
}

func TestParseDocumentRejectsBadForwardAuth(t *testing.T) {
	_, err := config.ParseDocument([]byte(`{"enforcement":"Enabled","policies":[],"forwardAuth":[{"domain":"a","denyStatus":200,"descriptors":[{"key":"k","from":"Header"}]}]}`))
	for _, want := range []string{"snapshot document", "forwardAuth[0].denyStatus", "denyStatus must be a 4xx status", "forwardAuth[0].descriptors[0].header", "header is required when from is Header"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want it to contain %q", err, want)
		}
	}
}

// One fixture per bad LimiterFleet in a policy file; each error names the
// file, the document and fleet, and what is wrong.
func TestLoadBadFleet(t *testing.T) {
	want := map[string][]string{
		"header-missing.yaml":   {"document 2 (LimiterFleet gw/edge)", "spec.dataPlane.forwardAuth[0].descriptors[0].header", "header is required when from is Header"},
		"deny-status.yaml":      {"document 2 (LimiterFleet gw/edge)", "spec.dataPlane.forwardAuth[0].denyStatus", "denyStatus must be a 4xx status, from 400 to 499"},
		"duplicate-domain.yaml": {"document 2 (LimiterFleet gw/edge)", "spec.dataPlane.forwardAuth[1]", "Duplicate value", `domain \"shop\"`},
		"unknown-from.yaml":     {"document 2 (LimiterFleet gw/edge)", "spec.dataPlane.forwardAuth[0].descriptors[0].from", `Unsupported value: "Cookie"`, `"Method", "Path", "Host", "ClientIP", "Header"`},
		"unknown-field.yaml":    {"document 2 (gw/edge)", `unknown field "spec.forwardAuth[0].domian"`},
		"enforcement.yaml":      {"document 2 (LimiterFleet gw/edge)", "spec.enforcement", `Unsupported value: "Paused"`},
		"second-fleet.yaml":     {"document 3: a second LimiterFleet (gw/other), after", "document 2 (gw/edge)", "at most one"},
		// A v1beta1 fleet is checked as the operator reads it, converted
		// to v1alpha1, whose field paths the messages name.
		"v1beta1-flat-field.yaml":     {"document 2 (gw/edge)", `unknown field "spec.forwardAuth"`},
		"v1beta1-header-missing.yaml": {"document 2 (LimiterFleet gw/edge)", "header is required when from is Header"},
	}
	files, _ := filepath.Glob("testdata/bad-fleet/*.yaml")
	if len(files) != len(want) {
		t.Fatalf("%d fixtures, %d expectations", len(files), len(want))
	}
	for _, f := range files {
		_, err := config.LoadFile(f)
		if err == nil {
			t.Errorf("%s: loaded", f)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, f+": ") {
			t.Errorf("%s: error does not start with the file name: %s", f, msg)
		}
		for _, w := range want[filepath.Base(f)] {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: error %q lacks %q", f, msg, w)
			}
		}
	}
}

func TestLoadGatewaySamples(t *testing.T) {
	snap, err := config.LoadFile("../../config/samples/gateways/policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if m := snap.ForwardAuthFor("gateway"); m == nil || m.DenyStatus != 403 {
		t.Fatalf("the gateway sample maps no domain gateway with denyStatus 403: %+v", snap.ForwardAuth)
	}
	if len(snap.Domain("gateway").Policies) != 2 {
		t.Fatalf("the gateway sample has %d policies in domain gateway, want 2", len(snap.Domain("gateway").Policies))
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
