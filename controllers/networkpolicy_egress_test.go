package controllers_test

import (
	"net"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

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
		fleet *v1alpha1.LimiterFleet
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
