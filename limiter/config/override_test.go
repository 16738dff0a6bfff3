package config_test

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/limiter/config"
)

const overridePolicy = `apiVersion: ratelimit.sluice.dev/v1beta1
kind: RateLimitPolicy
metadata: {name: per-tenant, namespace: payments}
spec:
  domain: payments
  descriptors: [{key: tenant}]
  limit:
    type: Rate
    rate: {limit: 100, period: 1m, requestOverride: {maximum: 5000}%s}
---
apiVersion: ratelimit.sluice.dev/v1beta1
kind: RateLimitPolicy
metadata: {name: per-ip, namespace: payments}
spec:
  domain: payments
  descriptors: [{key: remote_address}]
  limit:
    type: Rate
    rate: {limit: 100, period: 1m}
`

// TestRequestOverrideCompiles: a v1beta1 policy file's requestOverride
// reaches the compiled policy, survives the snapshot document (whose
// v1alpha1 spec has no field for it) within one version, and is refused
// where the CRD refuses it, with the CRD's message.
func TestRequestOverrideCompiles(t *testing.T) {
	snap, err := config.Parse("policies.yaml", []byte(strings.Replace(overridePolicy, "%s", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	maxOf := map[string]int64{}
	for _, p := range snap.Policies {
		maxOf[p.ID()] = p.RequestOverrideMax
	}
	if maxOf["payments/per-tenant"] != 5000 || maxOf["payments/per-ip"] != 0 {
		t.Fatalf("requestOverride maximum by policy: %v; want 5000 for per-tenant only", maxOf)
	}
	data, version := config.EncodeDocument(config.DocumentOf(snap))
	again, err := config.ParseDocument(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range again.Policies {
		if p.RequestOverrideMax != maxOf[p.ID()] {
			t.Fatalf("%s: maximum %d after the document, %d before", p.ID(), p.RequestOverrideMax, maxOf[p.ID()])
		}
	}
	if again.Version != version || snap.Version != version {
		t.Fatalf("versions %s, %s, %s: the override must be part of one version", snap.Version, again.Version, version)
	}
	other, err := config.Parse("policies.yaml", []byte(strings.Replace(strings.Replace(overridePolicy, "%s", "", 1), "maximum: 5000", "maximum: 6000", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if other.Version == version {
		t.Fatal("the same version for two maximums")
	}

	for _, bad := range []string{", localTier: {ttl: 2s}", ", algorithm: SlidingLog", ", burst: 200", ", scope: Global", ", cost: {reserve: {}}"} {
		_, err = config.Parse("policies.yaml", []byte(strings.Replace(overridePolicy, "%s", bad, 1)))
		if err == nil || !strings.Contains(err.Error(), "spec.limit.rate.requestOverride needs a fixed period and is not supported with") {
			t.Errorf("requestOverride with %q: got %v, want the override's message", bad, err)
		}
	}
}

// TestAttackRequestOverrideDocument: a snapshot document (which the
// limiter reads from a ConfigMap) that carries a requestOverride the CRD
// would refuse is refused whole, naming the field.
func TestAttackRequestOverrideDocument(t *testing.T) {
	snap, err := config.Parse("policies.yaml", []byte(strings.Replace(overridePolicy, "%s", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := config.EncodeDocument(config.DocumentOf(snap))
	for _, tc := range []struct{ from, to, want string }{
		{`"maximum":5000`, `"maximum":0`, "spec.limit.rate.requestOverride.maximum: Invalid value: 0: should be greater than or equal to 1"},
		{`"maximum":5000`, `"maximum":99999999999`, "spec.limit.rate.requestOverride.maximum: Invalid value: 99999999999: should be less than or equal to 1000000000"},
	} {
		forged := strings.Replace(string(data), tc.from, tc.to, 1)
		if forged == string(data) {
			t.Fatalf("%s is not in the document %s", tc.from, data)
		}
		if _, err := config.ParseDocument([]byte(forged)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.to, err, tc.want)
		}
	}
}

// TestAttackRequestOverrideOnV1alpha1: a tenant writes a v1alpha1 policy
// with a hand-made conversion annotation saying requestOverride beside a
// calendar, which the v1beta1 schema refuses: the operator's validation
// refuses it, so it never reaches a snapshot.
func TestAttackRequestOverrideOnV1alpha1(t *testing.T) {
	p := &v1alpha1.RateLimitPolicy{}
	p.Name, p.Namespace = "sneaky", "payments"
	p.Spec.Domain = "payments"
	p.Spec.Descriptors = []v1alpha1.Descriptor{{Key: "tenant"}}
	p.Spec.Rate.Limit = 10
	p.Spec.Rate.Period.Duration = 60e9
	burst := int64(20)
	p.Spec.Burst = &burst
	p.Annotations = map[string]string{v1alpha1.V1beta1SpecAnnotation: `{"domain":"payments","descriptors":[{"key":"tenant"}],"limit":{"type":"Rate","rate":{"limit":10,"period":"1m","burst":20,"requestOverride":{"maximum":1000}}}}`}
	_, err := config.CompileSources(alphaSources(t, *p))
	if err == nil || !strings.Contains(err.Error(), "spec.limit.rate.requestOverride needs a fixed period") {
		t.Fatalf("got %v, want the override's message", err)
	}
}
