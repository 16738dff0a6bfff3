package resources

import (
	"net"
	"net/url"
	"slices"
	"strconv"

	"github.com/sluice-dev/sluice/api/v1beta1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The NetworkPolicies a fleet owns, built by pure functions like the rest
// of its objects (see limiter.go): the same fleet and
// options give the same objects. Each admits ingress to the fleet's pods
// from named peers only:
//
//   - limiter pods: the data ports (gRPC and HTTP) from spec.dataPlane.clients (the
//     fleet's namespace by default); the admin port from the operator and
//     from the monitoring namespace, whose Prometheus scrapes /metrics
//     there (the limiter authorizes each caller's token as well); with
//     spec.regions (v1beta1) only, the peer port from anywhere: the other
//     regions call from other clusters, through load balancers whose
//     addresses a NetworkPolicy can't name, and the region's bearer token
//     guards it;
//   - Redis pods (mode Cluster): the client port from the fleet's limiters,
//     the operator and the other Redis pods (replication); the cluster bus
//     from the other Redis pods.
//
// The limiters' policy covers their egress too, once the operator knows
// the API server's addresses (APIServerEndpoints): DNS (port 53, UDP and
// TCP, to any address: node-local caches have no pod labels), the API
// server (its endpoints' IPs and ports: the limiters watch their snapshot
// ConfigMap and review admin tokens there), and Redis: the fleet's Redis
// pods on their client port for store type Cluster; for External the ports of
// spec.store.external.addresses on any address (they may be DNS names); none for
// store type Memory; and, with spec.tracing, its endpoint's port on any address
// (the collector, which is named by a host too); with spec.regions,
// the ports of its peers' endpoints on any address (other clusters' load
// balancers, named by hosts). Nothing else: a limiter
// pod can't be made to call anywhere else. Without the API server's addresses the egress stays open, rather
// than cut the limiters off from their snapshot.
//
// Ports are named, as the pods' containers name them, so that a renumbered
// port needs no new policy.

// NetworkPolicyOptions say who the operator is, for the rules that admit
// it; the operator renders no NetworkPolicy when OperatorNamespace is
// empty (it could not reach its own limiters).
type NetworkPolicyOptions struct {
	// OperatorNamespace is the namespace of the operator's pods.
	OperatorNamespace string
	// OperatorPodLabels select the operator's pods in OperatorNamespace;
	// empty selects every pod there.
	OperatorPodLabels map[string]string
	// MonitoringNamespace is the namespace whose pods may scrape /metrics
	// on the limiters' admin port; empty admits none.
	MonitoringNamespace string
	// APIServerEndpoints are the API server's addresses (ip:port, the
	// default/kubernetes Service's endpoints), which the limiters may
	// call; the operator reads them. Empty leaves the limiters' egress
	// open.
	APIServerEndpoints []string
}

// Enabled reports whether the operator renders NetworkPolicies.
func (o NetworkPolicyOptions) Enabled() bool { return o.OperatorNamespace != "" }

// LimiterNetworkPolicyName and RedisNetworkPolicyName name a fleet's
// NetworkPolicies.
func LimiterNetworkPolicyName(fleet *v1beta1.LimiterFleet) string { return LimiterName(fleet) }

// RedisNetworkPolicyName names the NetworkPolicy of the fleet's Redis pods.
func RedisNetworkPolicyName(fleet *v1beta1.LimiterFleet) string { return fleet.Name + "-redis" }

// namespacePeer selects every pod of one namespace, by the label the API
// server gives every namespace.
func namespacePeer(ns string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{
		MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}}
}

// operatorPeer selects the operator's pods.
func (o NetworkPolicyOptions) operatorPeer() networkingv1.NetworkPolicyPeer {
	p := namespacePeer(o.OperatorNamespace)
	p.PodSelector = &metav1.LabelSelector{MatchLabels: copyLabels(o.OperatorPodLabels)}
	return p
}

func copyLabels(l map[string]string) map[string]string {
	if len(l) == 0 {
		return nil
	}
	out := make(map[string]string, len(l))
	for k, v := range l {
		out[k] = v
	}
	return out
}

// clientPeers are the peers of spec.dataPlane.clients, or the fleet's namespace.
func clientPeers(fleet *v1beta1.LimiterFleet) []networkingv1.NetworkPolicyPeer {
	if fleet.Spec.DataPlane == nil || len(fleet.Spec.DataPlane.Clients) == 0 {
		return []networkingv1.NetworkPolicyPeer{namespacePeer(fleet.Namespace)}
	}
	out := make([]networkingv1.NetworkPolicyPeer, len(fleet.Spec.DataPlane.Clients))
	for i, c := range fleet.Spec.DataPlane.Clients {
		out[i] = networkingv1.NetworkPolicyPeer{NamespaceSelector: c.NamespaceSelector.DeepCopy(), PodSelector: c.PodSelector.DeepCopy()}
	}
	return out
}

func tcpPort(name string) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromString(name))}
}

// BuildLimiterNetworkPolicy builds the NetworkPolicy of the fleet's
// limiter pods: the data ports from the fleet's clients, the admin port
// from the operator and the monitoring namespace.
func BuildLimiterNetworkPolicy(fleet *v1beta1.LimiterFleet, o NetworkPolicyOptions) *networkingv1.NetworkPolicy {
	admin := []networkingv1.NetworkPolicyPeer{o.operatorPeer()}
	if o.MonitoringNamespace != "" {
		admin = append(admin, namespacePeer(o.MonitoringNamespace))
	}
	np := &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: networkingv1.SchemeGroupVersion.String(), Kind: "NetworkPolicy"},
		ObjectMeta: limiterMeta(fleet, LimiterNetworkPolicyName(fleet)),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: LimiterSelectorLabels(fleet)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{Ports: []networkingv1.NetworkPolicyPort{tcpPort(LimiterGRPCPortName), tcpPort(LimiterHTTPPortName)}, From: clientPeers(fleet)},
				{Ports: []networkingv1.NetworkPolicyPort{tcpPort(LimiterAdminPortName)}, From: admin},
			},
		},
	}
	if RegionsOf(fleet) != nil {
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{
			Ports: []networkingv1.NetworkPolicyPort{tcpPort(LimiterPeerPortName)}})
	}
	if egress := limiterEgress(fleet, o); egress != nil {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		np.Spec.Egress = egress
	}
	return np
}

// limiterEgress are the limiters' egress rules (see above); nil while the
// API server's addresses are unknown.
func limiterEgress(fleet *v1beta1.LimiterFleet, o NetworkPolicyOptions) []networkingv1.NetworkPolicyEgressRule {
	if len(o.APIServerEndpoints) == 0 {
		return nil
	}
	numbered := func(proto corev1.Protocol, port int) networkingv1.NetworkPolicyPort {
		return networkingv1.NetworkPolicyPort{Protocol: ptr.To(proto), Port: ptr.To(intstr.FromInt(port))}
	}
	out := []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{numbered(corev1.ProtocolUDP, 53), numbered(corev1.ProtocolTCP, 53)}}}

	api := networkingv1.NetworkPolicyEgressRule{}
	seenIP, seenPort := map[string]bool{}, map[int]bool{}
	for _, ep := range o.APIServerEndpoints {
		host, portStr, err := net.SplitHostPort(ep)
		ip := net.ParseIP(host)
		port, perr := strconv.Atoi(portStr)
		if err != nil || ip == nil || perr != nil || port < 1 || port > 65535 {
			continue
		}
		cidr := host + "/32"
		if ip.To4() == nil {
			cidr = host + "/128"
		}
		if !seenIP[cidr] {
			seenIP[cidr] = true
			api.To = append(api.To, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr}})
		}
		if !seenPort[port] {
			seenPort[port] = true
			api.Ports = append(api.Ports, numbered(corev1.ProtocolTCP, port))
		}
	}
	if len(api.To) == 0 {
		return nil
	}
	out = append(out, api)

	switch fleet.Spec.EffectiveStoreType() {
	case v1beta1.StoreCluster:
		out = append(out, networkingv1.NetworkPolicyEgressRule{
			Ports: []networkingv1.NetworkPolicyPort{tcpPort(RedisPortName)},
			To:    []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: RedisSelectorLabels(fleet)}}},
		})
	case v1beta1.StoreExternal:
		redis := networkingv1.NetworkPolicyEgressRule{}
		seen := map[int]bool{}
		for _, a := range externalAddresses(fleet) {
			_, portStr, err := net.SplitHostPort(a)
			port, perr := strconv.Atoi(portStr)
			if err != nil || perr != nil || port < 1 || port > 65535 || seen[port] {
				continue
			}
			seen[port] = true
			redis.Ports = append(redis.Ports, numbered(corev1.ProtocolTCP, port))
		}
		if len(redis.Ports) > 0 {
			out = append(out, redis)
		}
	}
	// The collector of spec.tracing, wherever its host resolves: like an
	// external Redis, it is named by a host, which a NetworkPolicy can't
	// select, so its port is opened to every destination.
	if port := tracingPort(fleet); port != 0 {
		out = append(out, networkingv1.NetworkPolicyEgressRule{Ports: []networkingv1.NetworkPolicyPort{numbered(corev1.ProtocolTCP, port)}})
	}
	// The peers of spec.regions, on their endpoints' ports: in other
	// clusters, named by hosts, so opened to every destination as well.
	if ports := peerPorts(fleet); len(ports) > 0 {
		peers := networkingv1.NetworkPolicyEgressRule{}
		for _, port := range ports {
			peers.Ports = append(peers.Ports, numbered(corev1.ProtocolTCP, port))
		}
		out = append(out, peers)
	}
	return out
}

// peerPorts are the ports of the fleet's region peers' endpoints, sorted
// and each once: the URL's port, else 443 for https and 80 for http.
func peerPorts(fleet *v1beta1.LimiterFleet) []int {
	r := RegionsOf(fleet)
	if r == nil {
		return nil
	}
	var out []int
	for _, p := range r.Peers {
		u, err := url.Parse(p.Endpoint)
		if err != nil {
			continue
		}
		port, err := strconv.Atoi(u.Port())
		switch {
		case u.Port() == "" && u.Scheme == "https":
			port, err = 443, nil
		case u.Port() == "" && u.Scheme == "http":
			port, err = 80, nil
		}
		if err != nil || port < 1 || port > 65535 || slices.Contains(out, port) {
			continue
		}
		out = append(out, port)
	}
	slices.Sort(out)
	return out
}

// BuildRedisNetworkPolicy builds the NetworkPolicy of the fleet's Redis
// pods (mode Cluster): the client port from the fleet's limiters, the
// operator and the fleet's Redis pods; the cluster bus from the fleet's
// Redis pods.
func BuildRedisNetworkPolicy(fleet *v1beta1.LimiterFleet, o NetworkPolicyOptions) *networkingv1.NetworkPolicy {
	redis := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: RedisSelectorLabels(fleet)}}
	limiters := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: LimiterSelectorLabels(fleet)}}
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: networkingv1.SchemeGroupVersion.String(), Kind: "NetworkPolicy"},
		ObjectMeta: redisMeta(fleet, RedisNetworkPolicyName(fleet)),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: RedisSelectorLabels(fleet)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{Ports: []networkingv1.NetworkPolicyPort{tcpPort(RedisPortName)}, From: []networkingv1.NetworkPolicyPeer{limiters, o.operatorPeer(), redis}},
				{Ports: []networkingv1.NetworkPolicyPort{tcpPort(RedisBusPortName)}, From: []networkingv1.NetworkPolicyPeer{redis}},
			},
		},
	}
}

// externalAddresses is store.external.addresses, or none.
func externalAddresses(fleet *v1beta1.LimiterFleet) []string {
	if e := fleet.Spec.Store.External; e != nil {
		return e.Addresses
	}
	return nil
}
