/*
Copyright 2026 The Sluice Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

func regionsBlock() *v1beta1.FleetRegions {
	return &v1beta1.FleetRegions{
		Name: "eu-west",
		TLS:  &v1beta1.RegionTLS{SecretName: "eu-west-peer-tls"},
		Peers: []v1beta1.RegionPeer{
			{Name: "us-east", Endpoint: "https://sluice-peer.us-east.example.com:8083"},
			{Name: "ap-south", Endpoint: "https://10.1.2.3:8083"},
		},
	}
}

// labRegionsBlock is regionsBlock in the insecure lab: bearer tokens, an
// http:// endpoint.
func labRegionsBlock() *v1beta1.FleetRegions {
	r := regionsBlock()
	r.TLS, r.InsecureLab = nil, ptr.To(true)
	r.Auth = &v1beta1.SecretKeyRef{SecretName: "peer-token", Key: "token"}
	r.Peers[0].Credentials = &v1beta1.SecretKeyRef{SecretName: "us-east-token", Key: "token"}
	r.Peers[1].Endpoint, r.Peers[1].Credentials = "http://10.1.2.3:8083", &v1beta1.SecretKeyRef{SecretName: "ap-south-token", Key: "token"}
	return r
}

// TestRegionsCRD shows the message of each rule of spec.limit.rate.scope
// and of a fleet's spec.regions, and that a Global policy and a fleet with
// regions are accepted.
func TestRegionsCRD(t *testing.T) {
	ns := createNamespace(t, "regions-crd")
	global := func(s *v1beta1.RateLimitPolicySpec) { s.Limit.Rate.Scope = ptr.To(v1beta1.ScopeGlobal) }
	policyCases := []struct {
		name   string
		change func(s *v1beta1.RateLimitPolicySpec)
		msg    string
	}{
		{"Global SlidingLog", func(s *v1beta1.RateLimitPolicySpec) {
			global(s)
			s.Limit.Rate.Algorithm = ptr.To(v1beta1.SlidingLog)
		}, "spec.limit.rate.scope Global is not supported with SlidingLog"},
		{"Global with localTier", func(s *v1beta1.RateLimitPolicySpec) {
			global(s)
			s.Limit.Rate.LocalTier = &v1beta1.LocalTier{}
		}, "spec.limit.rate.scope Global is not supported with localTier, cost.reserve, penalty, priority or calendar"},
		{"Global with penalty", func(s *v1beta1.RateLimitPolicySpec) {
			global(s)
			s.Limit.Rate.Penalty = &v1beta1.Penalty{Duration: "10m"}
		}, "spec.limit.rate.scope Global is not supported with localTier"},
		{"Global with reserve", func(s *v1beta1.RateLimitPolicySpec) {
			global(s)
			s.Limit.Rate.Cost = &v1beta1.Cost{Reserve: &v1beta1.Reserve{}}
		}, "spec.limit.rate.scope Global is not supported with localTier"},
		{"Global with priority", func(s *v1beta1.RateLimitPolicySpec) {
			global(s)
			s.Limit.Rate.Priority = levels()
		}, "spec.limit.rate.scope Global is not supported with localTier"},
		{"Global with calendar", func(s *v1beta1.RateLimitPolicySpec) {
			global(s)
			s.Limit.Rate.Algorithm, s.Limit.Rate.Period = ptr.To(v1beta1.FixedWindow), nil
			s.Limit.Rate.Calendar = &v1beta1.Calendar{Period: v1beta1.CalendarDay}
		}, "spec.limit.rate.scope Global is not supported with localTier"},
		{"unknown scope", func(s *v1beta1.RateLimitPolicySpec) {
			s.Limit.Rate.Scope = ptr.To(v1beta1.RegionScope("Planet"))
		}, `supported values: "Region", "Global"`},
	}
	for i, tc := range policyCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := betaBase()
			p.Name, p.Namespace = fmt.Sprintf("bad-scope-%d", i), ns
			tc.change(&p.Spec)
			requireInvalid(t, p, tc.msg)
		})
	}
	fleetCases := []struct {
		name   string
		change func(r *v1beta1.FleetRegions)
		msg    string
	}{
		{"peer named as this region", func(r *v1beta1.FleetRegions) { r.Peers[1].Name = "eu-west" },
			"spec.regions.peers must not name this fleet's own region"},
		{"share without peers", func(r *v1beta1.FleetRegions) {
			r.Peers, r.PartitionSharePercent = nil, ptr.To[int32](50)
		}, "spec.regions.partitionSharePercent needs peers"},
		{"share over 100", func(r *v1beta1.FleetRegions) { r.PartitionSharePercent = ptr.To[int32](101) },
			"should be less than or equal to 100"},
		{"region name not a label", func(r *v1beta1.FleetRegions) { r.Name = "EU_West" },
			"spec.regions.name must be a DNS label"},
		{"peer name not a label", func(r *v1beta1.FleetRegions) { r.Peers[0].Name = "us.east" },
			"spec.regions.peers[].name must be a DNS label"},
		{"endpoint with a user", func(r *v1beta1.FleetRegions) { r.Peers[0].Endpoint = "https://admin:pw@peer.example.com" },
			"spec.regions.peers[].endpoint must be an http or https URL"},
		{"endpoint with a path", func(r *v1beta1.FleetRegions) { r.Peers[0].Endpoint = "https://peer.example.com/x?y" },
			"spec.regions.peers[].endpoint must be an http or https URL"},
		{"endpoint of another scheme", func(r *v1beta1.FleetRegions) { r.Peers[0].Endpoint = "file:///etc/passwd" },
			"spec.regions.peers[].endpoint must be an http or https URL"},
		{"duplicate peer", func(r *v1beta1.FleetRegions) { r.Peers[1].Name = "us-east" },
			"Duplicate value"},
		{"bad credentials Secret", func(r *v1beta1.FleetRegions) {
			*r = *labRegionsBlock()
			r.Peers[0].Credentials.SecretName = "Bad_Name"
		}, "secretName must be a Secret name"},
		{"bad TLS Secret", func(r *v1beta1.FleetRegions) { r.TLS.SecretName = "Bad_Name" },
			"spec.regions.tls.secretName must be a Secret name"},
		{"nine peers", func(r *v1beta1.FleetRegions) {
			for i := range 7 {
				r.Peers = append(r.Peers, v1beta1.RegionPeer{Name: fmt.Sprintf("r%d", i), Endpoint: "https://h"})
			}
		}, "must have at most 8 items"},
		{"peers without TLS", func(r *v1beta1.FleetRegions) { r.TLS = nil },
			"spec.regions.tls is required with peers: regions know each other by their certificates (mutual TLS)"},
		{"plain http endpoint", func(r *v1beta1.FleetRegions) { r.Peers[1].Endpoint = "http://10.1.2.3:8083" },
			"spec.regions.peers[].endpoint must be https://: over plain http anyone on the path can act as a region (spec.regions.insecureLab: true allows it in a lab)"},
		{"a token beside TLS", func(r *v1beta1.FleetRegions) { r.Auth = &v1beta1.SecretKeyRef{SecretName: "peer-token"} },
			"spec.regions.auth and spec.regions.peers[].credentials are the bearer tokens of spec.regions.insecureLab"},
		{"a peer's token beside TLS", func(r *v1beta1.FleetRegions) { r.Peers[0].Credentials = &v1beta1.SecretKeyRef{SecretName: "t"} },
			"spec.regions.auth and spec.regions.peers[].credentials are the bearer tokens of spec.regions.insecureLab"},
		{"the lab without a peer's token", func(r *v1beta1.FleetRegions) {
			*r = *labRegionsBlock()
			r.Peers[1].Credentials = nil
		}, "spec.regions.insecureLab needs spec.regions.auth and every peer's credentials"},
	}
	for i, tc := range fleetCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bad-regions-%d", i), Namespace: ns}}
			f.Spec.Regions = regionsBlock()
			tc.change(f.Spec.Regions)
			requireInvalid(t, f, tc.msg)
		})
	}
	t.Run("accepted", func(t *testing.T) {
		for _, alg := range []v1beta1.Algorithm{v1beta1.TokenBucket, v1beta1.GCRA, v1beta1.FixedWindow, v1beta1.SlidingWindow} {
			p := betaBase()
			p.Name, p.Namespace = "global-"+strings.ToLower(string(alg)), ns
			global(&p.Spec)
			p.Spec.Limit.Rate.Algorithm = ptr.To(alg)
			if err := k8sClient.Create(t.Context(), p); err != nil {
				t.Fatalf("the API server refused a Global %s policy: %v", alg, err)
			}
			deleteAtCleanup(t, p)
		}
		for name, r := range map[string]*v1beta1.FleetRegions{"regional": regionsBlock(), "regional-lab": labRegionsBlock()} {
			f := &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
			f.Spec.Regions = r
			f.Spec.Regions.PartitionSharePercent = ptr.To[int32](100)
			if err := k8sClient.Create(t.Context(), f); err != nil {
				t.Fatalf("the API server refused fleet %s with regions: %v", name, err)
			}
			deleteAtCleanup(t, f)
		}
	})
}

func requireInvalid(t *testing.T, obj client.Object, msg string) {
	t.Helper()
	err := k8sClient.Create(t.Context(), obj)
	if err == nil {
		deleteAtCleanup(t, obj)
		t.Fatalf("the API server accepted %+v", obj)
	}
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), msg) {
		t.Fatalf("API server: got %v, want Invalid with %q", err, msg)
	}
}

// TestRegionsRoundTripV1alpha1 writes a Global policy and a fleet with
// regions as v1beta1, reads them as v1alpha1 (which has no field for
// either) and writes that back unchanged: the v1beta1 objects keep their
// scope and regions, through the conversion annotation.
func TestRegionsRoundTripV1alpha1(t *testing.T) {
	ns := createNamespace(t, "regions-round-trip")
	p := betaBase()
	p.Name, p.Namespace = "global", ns
	p.Spec.Limit.Rate.Scope = ptr.To(v1beta1.ScopeGlobal)
	f := &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Name: "regional", Namespace: ns}}
	f.Spec.Regions = regionsBlock()
	for _, c := range []struct {
		beta, alpha client.Object
		spec        func(client.Object) any
	}{
		{p, &v1alpha1.RateLimitPolicy{}, func(o client.Object) any { return o.(*v1beta1.RateLimitPolicy).Spec }},
		{f, &v1alpha1.LimiterFleet{}, func(o client.Object) any { return o.(*v1beta1.LimiterFleet).Spec }},
	} {
		if err := k8sClient.Create(t.Context(), c.beta); err != nil {
			t.Fatal(err)
		}
		deleteAtCleanup(t, c.beta)
		key := client.ObjectKeyFromObject(c.beta)
		if err := k8sClient.Get(t.Context(), key, c.alpha); err != nil {
			t.Fatalf("reading %s as v1alpha1: %v", key, err)
		}
		if err := k8sClient.Update(t.Context(), c.alpha); err != nil {
			t.Fatalf("writing %s back as v1alpha1: %v", key, err)
		}
		again := c.beta.DeepCopyObject().(client.Object)
		if err := k8sClient.Get(t.Context(), key, again); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(c.spec(c.beta), c.spec(again)); diff != "" {
			t.Errorf("%s lost what only v1beta1 says through a v1alpha1 write (-before +after):\n%s", key, diff)
		}
	}
}

// TestAttackScopeAnnotationCantLiftALimit: a tenant who writes v1alpha1
// policies hand-writes the v1beta1 annotation with scope Global and a
// higher limit; the annotation is believed for the scope only when it says
// the same limit as the spec, so the limit can't be lifted.
func TestAttackScopeAnnotationCantLiftALimit(t *testing.T) {
	alpha := &v1alpha1.RateLimitPolicy{}
	beta := betaBase()
	if err := alpha.ConvertFrom(beta); err != nil {
		t.Fatal(err)
	}
	forged := betaBase()
	forged.Spec.Limit.Rate.Scope = ptr.To(v1beta1.ScopeGlobal)
	forged.Spec.Limit.Rate.Limit = 1000000
	raw := fmt.Sprintf(`{"domain":"payments","descriptors":[{"key":"user_id"}],"limit":{"type":"Rate","rate":{"limit":%d,"period":"1m","scope":"Global"}}}`, forged.Spec.Limit.Rate.Limit)
	alpha.Annotations = map[string]string{v1alpha1.V1beta1SpecAnnotation: raw}
	got := &v1beta1.RateLimitPolicy{}
	if err := alpha.ConvertTo(got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Limit.Rate.Limit != 100 || got.Spec.Limit.Rate.Scope != nil {
		t.Fatalf("a forged annotation changed the policy: limit %d, scope %v; want 100 and no scope", got.Spec.Limit.Rate.Limit, got.Spec.Limit.Rate.Scope)
	}
	// The same annotation with the spec's own limit is believed: it says
	// nothing a v1beta1 writer could not say.
	alpha.Annotations = map[string]string{v1alpha1.V1beta1SpecAnnotation: strings.Replace(raw, "1000000", "100", 1)}
	if err := alpha.ConvertTo(got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Limit.Rate.Scope == nil || *got.Spec.Limit.Rate.Scope != v1beta1.ScopeGlobal {
		t.Fatalf("scope %v: an annotation matching the spec should carry its scope", got.Spec.Limit.Rate.Scope)
	}
	// A scope the schema does not allow is never believed.
	alpha.Annotations = map[string]string{v1alpha1.V1beta1SpecAnnotation: strings.Replace(strings.Replace(raw, "1000000", "100", 1), "Global", "Planet", 1)}
	if err := alpha.ConvertTo(got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Limit.Rate.Scope != nil {
		t.Fatalf("scope %q came from a hand-written annotation", *got.Spec.Limit.Rate.Scope)
	}
}
