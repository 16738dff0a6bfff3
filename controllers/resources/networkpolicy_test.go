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
	"encoding/json"
	"net"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// npOptions is who the operator is in these tests (as in the envtest
// suite's operator, controllers' npOptions): the chart's labels in
// sluice-system, scraped from monitoring.
var npOptions = resources.NetworkPolicyOptions{
	OperatorNamespace:   "sluice-system",
	OperatorPodLabels:   map[string]string{"app.kubernetes.io/name": "sluice", "app.kubernetes.io/component": "operator"},
	MonitoringNamespace: "monitoring",
}

func npFleets() []*v1beta1.LimiterFleet {
	return []*v1beta1.LimiterFleet{
		resFleet("sluice-system", "default"),
		resFleet("edge", "gw", func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis.Mode = ptr.To(v1alpha1.RedisCluster)
			f.Spec.Clients = []v1alpha1.FleetClient{
				{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "ingress"}},
					PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "envoy"}}},
				{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "checkout"}}},
			}
		}),
	}
}

// peerMatches reports whether a NetworkPolicy peer admits a pod with
// podLabels in a namespace with nsLabels, seen from policyNS, as the
// NetworkPolicy API defines it (no ipBlock here).
func peerMatches(t *testing.T, peer networkingv1.NetworkPolicyPeer, policyNS, podNS string, nsLabels, podLabels map[string]string) bool {
	t.Helper()
	match := func(sel *metav1.LabelSelector, set map[string]string) bool {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			t.Fatal(err)
		}
		return s.Matches(labels.Set(set))
	}
	if peer.NamespaceSelector == nil && podNS != policyNS {
		return false
	}
	if peer.NamespaceSelector != nil && !match(peer.NamespaceSelector, nsLabels) {
		return false
	}
	return peer.PodSelector == nil || match(peer.PodSelector, podLabels)
}

// admits reports whether rules admit the pod on the named port.
func admits(t *testing.T, np *networkingv1.NetworkPolicy, port, podNS string, podLabels map[string]string) bool {
	t.Helper()
	nsLabels := map[string]string{corev1.LabelMetadataName: podNS}
	for _, r := range np.Spec.Ingress {
		if !slices.ContainsFunc(r.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port.StrVal == port }) {
			continue
		}
		for _, peer := range r.From {
			if peerMatches(t, peer, np.Namespace, podNS, nsLabels, podLabels) {
				return true
			}
		}
	}
	return false
}

// TestBuildNetworkPolicies: the policies select the pods the builders
// render (and no other), name ports those pods' containers have, admit on
// each port exactly the peers their contract names, and are deterministic.
func TestBuildNetworkPolicies(t *testing.T) {
	operator := npOptions.OperatorPodLabels
	for _, fleet := range npFleets() {
		lim := resources.BuildLimiterNetworkPolicy(fleet, npOptions)
		red := resources.BuildRedisNetworkPolicy(fleet, npOptions)
		if !reflect.DeepEqual(lim, resources.BuildLimiterNetworkPolicy(fleet.DeepCopy(), npOptions)) ||
			!reflect.DeepEqual(red, resources.BuildRedisNetworkPolicy(fleet.DeepCopy(), npOptions)) {
			t.Errorf("%s: not deterministic", fleet.Name)
		}
		a, _ := json.Marshal(lim)
		b, _ := json.Marshal(resources.BuildLimiterNetworkPolicy(fleet, npOptions))
		if string(a) != string(b) {
			t.Errorf("%s: the limiters' policy renders different bytes", fleet.Name)
		}

		storeURL, err := resources.StoreURL(fleet)
		if err != nil {
			t.Fatal(err)
		}
		limiterPod := resources.BuildLimiterDeployment(fleet, resources.LimiterDeploymentOptions{DefaultImage: resDefaultImage, StoreURL: storeURL}).Spec.Template
		redisPod := resources.BuildRedisStatefulSet(fleet, 0, "", resources.RedisSecretHashes{}).Spec.Template
		selects := func(np *networkingv1.NetworkPolicy, l map[string]string) bool {
			s, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			if err != nil {
				t.Fatal(err)
			}
			return s.Matches(labels.Set(l))
		}
		if !selects(lim, limiterPod.Labels) || selects(lim, redisPod.Labels) {
			t.Errorf("%s: the limiters' policy selects limiter pods %v, Redis pods %v", fleet.Name, selects(lim, limiterPod.Labels), selects(lim, redisPod.Labels))
		}
		if !selects(red, redisPod.Labels) || selects(red, limiterPod.Labels) {
			t.Errorf("%s: the Redis policy selects Redis pods %v, limiter pods %v", fleet.Name, selects(red, redisPod.Labels), selects(red, limiterPod.Labels))
		}
		other := resFleet(fleet.Namespace, "other")
		if selects(lim, resources.LimiterSelectorLabels(other)) || selects(red, resources.RedisSelectorLabels(other)) {
			t.Errorf("%s: a policy selects another fleet's pods", fleet.Name)
		}
		// Every port a policy names is a port of the pods it selects. The
		// limiters' admin port comes with the limiter's --admin-addr
		// (branch i16-limiter): check it too once the Deployment has it.
		portNames := func(tmpl corev1.PodTemplateSpec) []string {
			var out []string
			for _, c := range tmpl.Spec.Containers {
				for _, p := range c.Ports {
					out = append(out, p.Name)
				}
			}
			return out
		}
		for _, tc := range []struct {
			np    *networkingv1.NetworkPolicy
			ports []string
		}{{lim, portNames(limiterPod)}, {red, portNames(redisPod)}} {
			for _, r := range tc.np.Spec.Ingress {
				for _, p := range r.Ports {
					if p.Port.StrVal == "admin" && !slices.Contains(tc.ports, "admin") {
						continue // TODO(i16 merge): the Deployment renders the admin port
					}
					if !slices.Contains(tc.ports, p.Port.StrVal) || *p.Protocol != corev1.ProtocolTCP {
						t.Errorf("%s: %s names port %v, the pods have %v", fleet.Name, tc.np.Name, p.Port, tc.ports)
					}
				}
			}
		}

		// Who is admitted where.
		ns := fleet.Namespace
		gateway := map[string]string{"app": "envoy"}
		for _, c := range []struct {
			what        string
			np          *networkingv1.NetworkPolicy
			port, podNS string
			pod         map[string]string
			want        bool
		}{
			{"the operator on the admin port", lim, "admin", "sluice-system", operator, true},
			{"Prometheus on the admin port", lim, "admin", "monitoring", map[string]string{"app": "prometheus"}, true},
			{"a client on the admin port", lim, "admin", ns, gateway, false},
			{"another pod of the operator's namespace on the admin port", lim, "admin", "sluice-system", map[string]string{"app": "x"}, false},
			{"the operator on the Redis port", red, "redis", "sluice-system", operator, true},
			{"the fleet's limiters on the Redis port", red, "redis", ns, limiterPod.Labels, true},
			{"another fleet's limiters on the Redis port", red, "redis", ns, resources.LimiterSelectorLabels(other), false},
			{"the fleet's Redis pods on the Redis port", red, "redis", ns, redisPod.Labels, true},
			{"the fleet's Redis pods on the bus", red, "cluster-bus", ns, redisPod.Labels, true},
			{"the fleet's limiters on the bus", red, "cluster-bus", ns, limiterPod.Labels, false},
			{"the operator on the bus", red, "cluster-bus", "sluice-system", operator, false},
			{"a pod of another namespace on the Redis port", red, "redis", "tenant", limiterPod.Labels, false},
		} {
			if got := admits(t, c.np, c.port, c.podNS, c.pod); got != c.want {
				t.Errorf("%s: %s: admitted %v, want %v", fleet.Name, c.what, got, c.want)
			}
		}
		// The data ports: spec.dataPlane.clients, or the fleet's namespace.
		for _, port := range []string{"grpc", "http"} {
			if fleet.Spec.DataPlane == nil || len(fleet.Spec.DataPlane.Clients) == 0 {
				if !admits(t, lim, port, ns, gateway) || admits(t, lim, port, "tenant", gateway) {
					t.Errorf("%s: the %s port admits other than the fleet's namespace", fleet.Name, port)
				}
				continue
			}
			for _, c := range []struct {
				podNS string
				pod   map[string]string
				want  bool
			}{
				{"ingress", gateway, true},
				{"ingress", map[string]string{"app": "other"}, false},
				{ns, map[string]string{"app": "checkout"}, true},
				{ns, gateway, false},
				{"tenant", map[string]string{"app": "checkout"}, false},
			} {
				if got := admits(t, lim, port, c.podNS, c.pod); got != c.want {
					t.Errorf("%s: %s port, pod %v in %s: admitted %v, want %v", fleet.Name, port, c.pod, c.podNS, got, c.want)
				}
			}
		}
	}
}

// dest is where a limiter pod sends: a pod (labels, namespace, named
// ports) or an address outside the cluster's pods (no namespace).
type dest struct {
	what   string
	ip     string
	ns     string
	labels map[string]string
	ports  map[string]int32 // the destination pod's named ports
	proto  corev1.Protocol
	port   int32
}

// egressAllows reports whether the policy lets its pods send to d, as
// the NetworkPolicy API defines it: no Egress policy type allows all.
func egressAllows(t *testing.T, np *networkingv1.NetworkPolicy, d dest) bool {
	t.Helper()
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		return true
	}
	for _, r := range np.Spec.Egress {
		portOK := len(r.Ports) == 0
		for _, p := range r.Ports {
			proto := ptr.Deref(p.Protocol, corev1.ProtocolTCP)
			switch {
			case proto != d.proto:
			case p.Port == nil:
				portOK = true
			case p.Port.StrVal != "":
				portOK = portOK || (d.ports != nil && d.ports[p.Port.StrVal] == d.port)
			default:
				portOK = portOK || p.Port.IntVal == d.port
			}
		}
		if !portOK {
			continue
		}
		if len(r.To) == 0 {
			return true
		}
		for _, peer := range r.To {
			if peer.IPBlock != nil {
				_, cidr, err := net.ParseCIDR(peer.IPBlock.CIDR)
				if err != nil {
					t.Fatal(err)
				}
				if cidr.Contains(net.ParseIP(d.ip)) {
					return true
				}
				continue
			}
			if d.ns != "" && peerMatches(t, peer, np.Namespace, d.ns, map[string]string{corev1.LabelMetadataName: d.ns}, d.labels) {
				return true
			}
		}
	}
	return false
}

// Attack (issue 24, 3): the limiters' NetworkPolicy covers ingress only,
// so a limiter pod (which holds the fleet's Redis password and receives
// the operator's token) can send anywhere: to the internet, to any pod's
// port, to another fleet's Redis. Its egress is now DNS, the API server
// and its own Redis alone.
func TestAttackLimiterEgressAnywhere(t *testing.T) {
	opts := npOptions
	opts.APIServerEndpoints = []string{"10.0.0.1:6443", "10.0.0.2:6443"}
	cluster := resFleet("edge", "gw", func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Mode = ptr.To(v1alpha1.RedisCluster) })
	external := resFleet("edge", "ext", func(f *v1alpha1.LimiterFleet) {
		f.Spec.Redis.Mode = ptr.To(v1alpha1.RedisExternal)
		f.Spec.Redis.Addresses = []string{"redis.example.com:6380"}
	})
	none := resFleet("edge", "mem")
	other := resFleet("edge", "other", func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Mode = ptr.To(v1alpha1.RedisCluster) })
	redisPorts := map[string]int32{"redis": 6379, "cluster-bus": 16379}
	dns := dest{what: "kube-dns", ip: "10.96.0.10", ns: "kube-system", labels: map[string]string{"k8s-app": "kube-dns"}, proto: corev1.ProtocolUDP, port: 53}
	api := dest{what: "the API server", ip: "10.0.0.2", proto: corev1.ProtocolTCP, port: 6443}
	internet := dest{what: "the internet on 443", ip: "203.0.113.7", proto: corev1.ProtocolTCP, port: 443}
	tenantPod := dest{what: "a tenant's pod", ip: "10.244.1.9", ns: "tenant", labels: map[string]string{"app": "db"}, proto: corev1.ProtocolTCP, port: 5432}
	metadata := dest{what: "the cloud metadata service", ip: "169.254.169.254", proto: corev1.ProtocolTCP, port: 80}
	for _, tc := range []struct {
		fleet *v1beta1.LimiterFleet
		to    []dest
		deny  []dest
	}{
		{cluster,
			[]dest{dns, api, {what: "its own Redis", ip: "10.244.0.5", ns: "edge", labels: resources.RedisSelectorLabels(cluster), ports: redisPorts, proto: corev1.ProtocolTCP, port: 6379}},
			[]dest{internet, tenantPod, metadata,
				{what: "its Redis's bus", ip: "10.244.0.5", ns: "edge", labels: resources.RedisSelectorLabels(cluster), ports: redisPorts, proto: corev1.ProtocolTCP, port: 16379},
				{what: "another fleet's Redis", ip: "10.244.0.6", ns: "edge", labels: resources.RedisSelectorLabels(other), ports: redisPorts, proto: corev1.ProtocolTCP, port: 6379}}},
		{external,
			[]dest{dns, api, {what: "the external Redis", ip: "198.51.100.4", proto: corev1.ProtocolTCP, port: 6380}},
			[]dest{internet, tenantPod, metadata}},
		{none, []dest{dns, api}, []dest{internet, tenantPod, metadata,
			{what: "a Redis pod", ip: "10.244.0.6", ns: "edge", labels: resources.RedisSelectorLabels(other), ports: redisPorts, proto: corev1.ProtocolTCP, port: 6379}}},
	} {
		np := resources.BuildLimiterNetworkPolicy(tc.fleet, opts)
		for _, d := range tc.to {
			if !egressAllows(t, np, d) {
				t.Errorf("fleet %s: the limiters may not reach %s (%s %s:%d)", tc.fleet.Name, d.what, d.proto, d.ip, d.port)
			}
		}
		for _, d := range tc.deny {
			if egressAllows(t, np, d) {
				t.Errorf("fleet %s: the limiters may reach %s (%s %s:%d)", tc.fleet.Name, d.what, d.proto, d.ip, d.port)
			}
		}
	}
	// Until the operator knows the API server's addresses, egress stays
	// open rather than cut the limiters off from their snapshot.
	if np := resources.BuildLimiterNetworkPolicy(cluster, npOptions); slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		t.Errorf("without the API server's endpoints: policy types %v, want ingress only", np.Spec.PolicyTypes)
	}
}
