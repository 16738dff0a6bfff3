package config_test

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/limiter/config"
)

const globalPolicy = `apiVersion: ratelimit.sluice.dev/v1beta1
kind: RateLimitPolicy
metadata: {name: per-user, namespace: payments}
spec:
  domain: payments
  descriptors: [{key: user_id}]
  limit:
    type: Rate
    rate: {limit: 1000, period: 1m, scope: Global%s}
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

// TestGlobalScopeCompiles: a v1beta1 policy file's scope Global reaches
// the compiled policy, survives the snapshot document (whose v1alpha1
// spec has no field for it), and is refused with localTier, as the CRD
// refuses it.
func TestGlobalScopeCompiles(t *testing.T) {
	snap, err := config.Parse("policies.yaml", []byte(strings.Replace(globalPolicy, "%s", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	global := map[string]bool{}
	for _, p := range snap.Policies {
		global[p.ID()] = p.Global
	}
	if !global["payments/per-user"] || global["payments/per-ip"] {
		t.Fatalf("Global by policy: %v; want per-user only", global)
	}
	data, version := config.EncodeDocument(config.DocumentOf(snap))
	again, err := config.ParseDocument(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range again.Policies {
		if p.Global != global[p.ID()] {
			t.Fatalf("%s: Global %v after the document, %v before", p.ID(), p.Global, global[p.ID()])
		}
	}
	if again.Version != version || snap.Version != version {
		t.Fatalf("versions %s, %s, %s: the scope must be part of one version", snap.Version, again.Version, version)
	}
	region, err := config.Parse("policies.yaml", []byte(strings.Replace(strings.Replace(globalPolicy, "%s", "", 1), "scope: Global", "scope: Region", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if region.Version == version {
		t.Fatal("the same version for a Global and a Region policy")
	}

	_, err = config.Parse("policies.yaml", []byte(strings.Replace(globalPolicy, "%s", ", localTier: {ttl: 2s}", 1)))
	if err == nil || !strings.Contains(err.Error(), "spec.limit.rate.scope Global is not supported with") {
		t.Fatalf("Global with localTier: got %v, want the scope's message", err)
	}
}

// TestAttackScopeOnV1alpha1: a tenant writes a v1alpha1 policy with a
// hand-made conversion annotation saying scope Global beside localTier,
// which the v1beta1 schema refuses: the operator's validation refuses it,
// so it never reaches a snapshot (where it would fail every policy).
func TestAttackScopeOnV1alpha1(t *testing.T) {
	p := &v1alpha1.RateLimitPolicy{}
	p.Name, p.Namespace = "sneaky", "payments"
	p.Spec.Domain = "payments"
	p.Spec.Descriptors = []v1alpha1.Descriptor{{Key: "user_id"}}
	p.Spec.Rate.Limit = 10
	p.Spec.Rate.Period.Duration = 60e9
	on := true
	p.Spec.LocalTier = &v1alpha1.LocalTier{Enabled: &on}
	p.Annotations = map[string]string{v1alpha1.V1beta1SpecAnnotation: `{"domain":"payments","descriptors":[{"key":"user_id"}],"limit":{"type":"Rate","rate":{"limit":10,"period":"1m","scope":"Global","localTier":{}}}}`}
	_, err := config.CompileSources(alphaSources(t, *p))
	if err == nil || !strings.Contains(err.Error(), "spec.limit.rate.scope Global is not supported with") {
		t.Fatalf("got %v, want the scope's message", err)
	}
}

// TestForgedAnnotationIsNotBelieved: a conversion annotation that says
// another policy than the spec (a higher limit) is not read for scope or
// requestOverride: the policy compiles Region-scoped, with no override.
func TestForgedAnnotationIsNotBelieved(t *testing.T) {
	p := v1alpha1.RateLimitPolicy{}
	p.Name, p.Namespace = "forged", "payments"
	p.Spec.Domain = "payments"
	p.Spec.Descriptors = []v1alpha1.Descriptor{{Key: "user_id"}}
	p.Spec.Rate.Limit = 10
	p.Spec.Rate.Period.Duration = 60e9
	for _, rate := range []string{`"scope":"Global"`, `"requestOverride":{"maximum":1000000000}`} {
		p.Annotations = map[string]string{v1alpha1.V1beta1SpecAnnotation: `{"domain":"payments","descriptors":[{"key":"user_id"}],"limit":{"type":"Rate","rate":{"limit":1000000,"period":"1m",` + rate + `}}}`}
		snap, err := config.CompileSources(alphaSources(t, p))
		if err != nil {
			t.Fatalf("%s: %v", rate, err)
		}
		if c := snap.Policies[0]; c.Global || c.RequestOverrideMax != 0 {
			t.Errorf("%s: compiled Global=%v, requestOverride maximum %d; want neither", rate, c.Global, c.RequestOverrideMax)
		}
	}
}
