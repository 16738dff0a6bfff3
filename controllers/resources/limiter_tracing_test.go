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

package resources_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// TestLimiterTracingRendered: spec.tracing becomes --tracing, the sample
// ratio as a fraction, the OTLP traces endpoint, the service name and the
// fleet's resource attributes; a fleet without it renders none of them.
func TestLimiterTracingRendered(t *testing.T) {
	opts := resources.LimiterDeploymentOptions{DefaultImage: resDefaultImage, StoreURL: "memory"}
	plain := resources.BuildLimiterDeployment(resFleet("edge", "f"), opts).Spec.Template.Spec.Containers[0]
	for _, tc := range []struct {
		name       string
		perMillion *int32
		ratio      string
	}{
		{"default 1%", nil, "0.01"},
		{"all", ptr.To[int32](1000000), "1"},
		{"none", ptr.To[int32](0), "0"},
		{"one in a million", ptr.To[int32](1), "0.000001"},
		{"12.5%", ptr.To[int32](125000), "0.125"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := resFleet("edge", "f", func(f *v1alpha1.LimiterFleet) {
				f.Spec.Tracing = &v1alpha1.FleetTracing{Endpoint: "https://otel.observability:4317", SamplesPerMillion: tc.perMillion}
			})
			c := resources.BuildLimiterDeployment(f, opts).Spec.Template.Spec.Containers[0]
			if diff := cmp.Diff(append(slices.Clone(plain.Args), "--tracing", "--trace-sample-ratio="+tc.ratio), c.Args); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			want := append(slices.Clone(plain.Env),
				corev1.EnvVar{Name: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", Value: "https://otel.observability:4317"},
				corev1.EnvVar{Name: "OTEL_SERVICE_NAME", Value: "sluice-limiter"},
				corev1.EnvVar{Name: "OTEL_RESOURCE_ATTRIBUTES", Value: "k8s.namespace.name=edge,sluice.fleet=f"})
			if diff := cmp.Diff(want, c.Env); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
	for _, a := range plain.Args {
		if strings.HasPrefix(a, "--trac") {
			t.Errorf("without spec.tracing: arg %s", a)
		}
	}
	for _, e := range plain.Env {
		if strings.HasPrefix(e.Name, "OTEL_") {
			t.Errorf("without spec.tracing: env %s", e.Name)
		}
	}
}

// Attack: a fleet that traces lets its limiters reach the collector's port,
// and nothing more: the egress it opens is that one TCP port, so tracing
// can't be used to open the internet, a tenant's database or the cloud
// metadata service to pods holding the Redis password.
func TestAttackTracingEgress(t *testing.T) {
	opts := npOptions
	opts.APIServerEndpoints = []string{"10.0.0.1:6443"}
	f := resFleet("edge", "traced", func(f *v1alpha1.LimiterFleet) {
		f.Spec.Tracing = &v1alpha1.FleetTracing{Endpoint: "http://otel-collector.observability:4317"}
	})
	np := resources.BuildLimiterNetworkPolicy(f, opts)
	collector := dest{what: "the collector", ip: "10.244.3.3", ns: "observability", labels: map[string]string{"app": "otel"}, proto: corev1.ProtocolTCP, port: 4317}
	if !egressAllows(t, np, collector) {
		t.Errorf("the limiters may not reach the collector on 4317: egress %+v", np.Spec.Egress)
	}
	for _, d := range []dest{
		{what: "the internet on 443", ip: "203.0.113.7", proto: corev1.ProtocolTCP, port: 443},
		{what: "a tenant's pod", ip: "10.244.1.9", ns: "tenant", labels: map[string]string{"app": "db"}, proto: corev1.ProtocolTCP, port: 5432},
		{what: "the cloud metadata service", ip: "169.254.169.254", proto: corev1.ProtocolTCP, port: 80},
		{what: "the collector's port over UDP", ip: "10.244.3.3", proto: corev1.ProtocolUDP, port: 4317},
	} {
		if egressAllows(t, np, d) {
			t.Errorf("a traced fleet's limiters may reach %s (%s %s:%d)", d.what, d.proto, d.ip, d.port)
		}
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
		t.Errorf("policy types %v", np.Spec.PolicyTypes)
	}
	if got, plain := len(np.Spec.Egress), len(resources.BuildLimiterNetworkPolicy(resFleet("edge", "traced"), opts).Spec.Egress); got != plain+1 {
		t.Errorf("%d egress rules with tracing, %d without: want one more", got, plain)
	}
}
