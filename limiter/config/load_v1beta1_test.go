package config_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/limiter/config"
)

// otherVersion rewrites each RateLimitPolicy of a policy file in the other
// version (v1alpha1 <-> v1beta1) with the webhook's conversion, and keeps
// every other document.
func otherVersion(t *testing.T, data []byte) (out []byte, converted int) {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var tm struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(raw, &tm); err != nil || tm.Kind != "RateLimitPolicy" {
			docs = append(docs, raw)
			continue
		}
		var obj any
		switch tm.APIVersion {
		case v1alpha1.GroupVersion.String():
			var a v1alpha1.RateLimitPolicy
			if err := yaml.UnmarshalStrict(raw, &a); err != nil {
				t.Fatal(err)
			}
			b := &v1beta1.RateLimitPolicy{}
			if err := a.ConvertTo(b); err != nil {
				t.Fatal(err)
			}
			b.APIVersion, b.Kind = v1beta1.GroupVersion.String(), "RateLimitPolicy"
			obj = b
		case v1beta1.GroupVersion.String():
			var b v1beta1.RateLimitPolicy
			if err := yaml.UnmarshalStrict(raw, &b); err != nil {
				t.Fatal(err)
			}
			a := &v1alpha1.RateLimitPolicy{}
			if err := a.ConvertFrom(&b); err != nil {
				t.Fatal(err)
			}
			a.APIVersion, a.Kind = v1alpha1.GroupVersion.String(), "RateLimitPolicy"
			obj = a
		default:
			t.Fatalf("apiVersion %q", tm.APIVersion)
		}
		js, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, js)
		converted++
	}
	return bytes.Join(docs, []byte("\n---\n")), converted
}

// A policy file loads the same in either version: every sample and good
// test file, rewritten in the other version, gives the same snapshot
// (its version is a hash of the compiled policies).
func TestLoadV1beta1SameAsV1alpha1(t *testing.T) {
	files, _ := filepath.Glob("../../config/samples/*.yaml")
	more, _ := filepath.Glob("../../config/samples/gateways/*/*.yaml")
	files = append(append(files, more...), "testdata/good.yaml", "testdata/fleet.yaml")
	total := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte("kind: RateLimitPolicy")) {
			continue
		}
		want, err := config.Parse(f, data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		other, n := otherVersion(t, data)
		got, err := config.Parse(f+" (other version)", other)
		if err != nil {
			t.Fatalf("%s in the other version: %v\n%s", f, err, other)
		}
		if got.Version != want.Version || len(got.Policies) != len(want.Policies) {
			t.Errorf("%s: snapshot %s with %d policies; in the other version %s with %d", f, want.Version, len(want.Policies), got.Version, len(got.Policies))
		}
		total += n
	}
	if total < 10 {
		t.Fatalf("converted %d policies: the samples were not found", total)
	}
	t.Logf("%d policies load the same in both versions", total)
}

// A v1beta1 policy file is refused with the field that is wrong: a duration
// the API server refuses (Go's 1.5s), an unknown field.
func TestLoadV1beta1Refuses(t *testing.T) {
	base := `apiVersion: ratelimit.sluice.dev/v1beta1
kind: RateLimitPolicy
metadata: {name: p, namespace: shop}
spec:
  domain: shop
  descriptors: [{key: user}]
  limit:
    type: Rate
    rate: {limit: 10, period: 1m}
`
	if _, err := config.Parse("good", []byte(base)); err != nil {
		t.Fatalf("the base is refused: %v", err)
	}
	for name, tc := range map[string]struct{ from, to, want string }{
		"Go duration":           {"period: 1m", "period: 1.5s", `spec.limit.rate.period: Invalid value: "1.5s": "1.5s" is not a duration`},
		"unknown field":         {"limit: 10,", "limit: 10, burts: 3,", `unknown field "spec.limit.rate.burts"`},
		"v1alpha1 field":        {"  limit:\n", "  shadow: true\n  limit:\n", `unknown field "spec.shadow"`},
		"rule after conversion": {"{limit: 10, period: 1m}", "{limit: 10, period: 1m, burst: 11, cost: {max: 12}}", "spec.limit.rate.cost.max"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := config.Parse(name, []byte(strings.Replace(base, tc.from, tc.to, 1)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
			t.Log(err)
		})
	}
}
