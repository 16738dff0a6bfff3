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
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// TestBuildLimiterDeploymentRegions: a fleet naming its region and peers
// (spec.regions) renders the limiters' region flags, its
// certificate Secret (or, in the insecure lab, the tokens) as read-only
// Secret mounts, and the peer port; peers in name order whatever their
// order in the spec. A fleet without regions renders none of it.
func TestBuildLimiterDeploymentRegions(t *testing.T) {
	regions := &v1beta1.FleetRegions{
		Name: "eu-west",
		TLS:  &v1beta1.RegionTLS{SecretName: "eu-west-peer-tls"},
		Peers: []v1beta1.RegionPeer{
			{Name: "us-east", Endpoint: "https://us-east.example.com:8083"},
			{Name: "ap-south", Endpoint: "https://ap-south.example.com:8083"},
		},
		PartitionSharePercent: ptr.To[int32](40),
	}
	c, secrets := renderRegions(t, regions)
	want := "--region eu-west --peer-addr :8083 --peer-cert-file /var/run/sluice/region/region-tls/tls.crt" +
		" --peer-key-file /var/run/sluice/region/region-tls/tls.key --peer-ca-file /var/run/sluice/region/region-tls/ca.crt" +
		" --peer ap-south=https://ap-south.example.com:8083 --peer us-east=https://us-east.example.com:8083 --partition-share 40"
	checkRegionArgs(t, c, secrets, want, map[string]string{"region-tls": "eu-west-peer-tls/tls.crt,tls.key,ca.crt"})

	lab := regions.DeepCopy()
	lab.TLS, lab.InsecureLab = nil, ptr.To(true)
	lab.Auth = &v1beta1.SecretKeyRef{SecretName: "peer-token", Key: "token"}
	lab.Peers[0].Credentials = &v1beta1.SecretKeyRef{SecretName: "us-east-token", Key: "token"}
	lab.Peers[1].Credentials = &v1beta1.SecretKeyRef{SecretName: "ap-south-token", Key: "t"}
	c, secrets = renderRegions(t, lab)
	want = "--region eu-west --peer-addr :8083 --peer-insecure-lab --region-token-file /var/run/sluice/region/region-auth/token" +
		" --peer ap-south=https://ap-south.example.com:8083 --peer-token-file ap-south=/var/run/sluice/region/region-peer-0/token" +
		" --peer us-east=https://us-east.example.com:8083 --peer-token-file us-east=/var/run/sluice/region/region-peer-1/token" +
		" --partition-share 40"
	checkRegionArgs(t, c, secrets, want, map[string]string{"region-auth": "peer-token/token", "region-peer-0": "ap-south-token/t", "region-peer-1": "us-east-token/token"})
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
		return p.Name == resources.LimiterPeerPortName && p.ContainerPort == resources.LimiterPeerPort
	}) {
		t.Fatalf("ports %v: no peer port", c.Ports)
	}

	// Without regions: nothing of it.
	plain := resources.BuildLimiterDeployment(&v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: "sluice-system"}},
		resources.LimiterDeploymentOptions{DefaultImage: "sluice/limiter:test", StoreURL: "redis://redis:6379"})
	pc := plain.Spec.Template.Spec.Containers[0]
	if strings.Contains(strings.Join(pc.Args, " "), "--region") || slices.ContainsFunc(pc.Ports, func(p corev1.ContainerPort) bool { return p.Name == resources.LimiterPeerPortName }) {
		t.Fatalf("a fleet without regions renders region flags or the peer port: %v %v", pc.Args, pc.Ports)
	}
}

// renderRegions renders the limiter container of a fleet with regions,
// and its region Secret volumes as "secret/key,key" by name.
func renderRegions(t *testing.T, regions *v1beta1.FleetRegions) (corev1.Container, map[string]string) {
	t.Helper()
	beta := &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: "sluice-system"}}
	beta.Spec.Regions = regions
	d := resources.BuildLimiterDeployment(beta, resources.LimiterDeploymentOptions{DefaultImage: "sluice/limiter:test", StoreURL: "redis://redis:6379"})
	secrets := map[string]string{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if strings.HasPrefix(v.Name, "region-") {
			secrets[v.Name] = secretItems(v)
		}
	}
	return d.Spec.Template.Spec.Containers[0], secrets
}

// secretItems is a Secret volume as "secret/key,key".
func secretItems(v corev1.Volume) string {
	if v.Secret == nil {
		return "not a Secret"
	}
	var keys []string
	for _, it := range v.Secret.Items {
		keys = append(keys, it.Key)
	}
	return v.Secret.SecretName + "/" + strings.Join(keys, ",")
}

// checkRegionArgs checks c's arguments end with want, and its region
// Secret volumes (from renderRegions) are wantSecrets, mounted read-only.
func checkRegionArgs(t *testing.T, c corev1.Container, secrets map[string]string, want string, wantSecrets map[string]string) {
	t.Helper()
	if args := strings.Join(c.Args, " "); !strings.HasSuffix(args, want) {
		t.Fatalf("args %q\nwant them to end with %q", args, want)
	}
	if !maps.Equal(secrets, wantSecrets) {
		t.Fatalf("region Secret volumes %v, want %v", secrets, wantSecrets)
	}
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(m.Name, "region-") && !m.ReadOnly {
			t.Errorf("mount %s is writable", m.Name)
		}
	}
}

// regionFleet is a fleet with spec.regions.
func regionFleet(t *testing.T, r *v1beta1.FleetRegions) *v1beta1.LimiterFleet {
	t.Helper()
	beta := &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: "sluice-system"}}
	beta.Spec.Regions = r
	return beta
}

// peerIngress reports whether the policy admits some source, in or out of
// the cluster, on the limiters' peer port, and whether that rule admits
// any source.
func peerIngress(np *networkingv1.NetworkPolicy) (opened, fromAnywhere bool) {
	for _, r := range np.Spec.Ingress {
		if !slices.ContainsFunc(r.Ports, func(p networkingv1.NetworkPolicyPort) bool {
			return p.Port != nil && (p.Port.StrVal == resources.LimiterPeerPortName || p.Port.IntVal == resources.LimiterPeerPort)
		}) {
			continue
		}
		opened = true
		fromAnywhere = fromAnywhere || len(r.From) == 0
	}
	return opened, fromAnywhere
}

// TestBuildLimiterNetworkPolicyRegions: a fleet with spec.regions opens
// its peer port (8083, named as the container names it) to ingress from
// anywhere, as the other regions call from other clusters, and its egress
// to the ports of its peers' endpoints (each once; 443 for an https
// endpoint without a port), and nowhere else it could not reach before.
func TestBuildLimiterNetworkPolicyRegions(t *testing.T) {
	opts := npOptions
	opts.APIServerEndpoints = []string{"10.0.0.1:6443"}
	fleet := regionFleet(t, &v1beta1.FleetRegions{
		Name: "eu-west",
		TLS:  &v1beta1.RegionTLS{SecretName: "eu-west-peer-tls"},
		Peers: []v1beta1.RegionPeer{
			{Name: "us-east", Endpoint: "https://us-east.example.com:8083"},
			{Name: "ap-south", Endpoint: "https://ap-south.example.com"},
			{Name: "sa-east", Endpoint: "http://sa-east.example.com:8083/"}, // a lab's
		},
	})
	np := resources.BuildLimiterNetworkPolicy(fleet, opts)
	if opened, anywhere := peerIngress(np); !opened || !anywhere {
		t.Fatalf("peer port ingress: opened %v, from anywhere %v; want both: %+v", opened, anywhere, np.Spec.Ingress)
	}
	d := resources.BuildLimiterDeployment(fleet, resources.LimiterDeploymentOptions{DefaultImage: "sluice/limiter:test", StoreURL: "redis://redis:6379"})
	if !slices.ContainsFunc(d.Spec.Template.Spec.Containers[0].Ports, func(p corev1.ContainerPort) bool {
		return p.Name == resources.LimiterPeerPortName && p.ContainerPort == resources.LimiterPeerPort
	}) {
		t.Fatalf("the policy opens port %q, which the limiter container does not name", resources.LimiterPeerPortName)
	}
	for _, d := range []dest{
		{what: "us-east's and sa-east's endpoint", ip: "198.51.100.8", proto: corev1.ProtocolTCP, port: 8083},
		{what: "ap-south's endpoint (https, no port)", ip: "198.51.100.9", proto: corev1.ProtocolTCP, port: 443},
	} {
		if !egressAllows(t, np, d) {
			t.Errorf("the limiters may not reach %s (%s:%d)", d.what, d.ip, d.port)
		}
	}
	for _, d := range []dest{
		{what: "the internet on 80", ip: "203.0.113.7", proto: corev1.ProtocolTCP, port: 80},
		{what: "the cloud metadata service", ip: "169.254.169.254", proto: corev1.ProtocolTCP, port: 80},
		{what: "a tenant's pod", ip: "10.244.1.9", ns: "tenant", labels: map[string]string{"app": "db"}, proto: corev1.ProtocolTCP, port: 5432},
	} {
		if egressAllows(t, np, d) {
			t.Errorf("the limiters may reach %s (%s:%d)", d.what, d.ip, d.port)
		}
	}
	var ports []int32
	for _, r := range np.Spec.Egress {
		for _, p := range r.Ports {
			if p.Port.IntVal == 8083 {
				ports = append(ports, p.Port.IntVal)
			}
		}
	}
	if len(ports) != 1 {
		t.Errorf("port 8083 opened %d times for egress, want once", len(ports))
	}
}

// Attack: the peer port takes grant calls from anywhere. A fleet that
// names no region must not open it: its limiters listen on no peer port,
// but a pod that did (a tenant's image, a debug build) would be reachable
// from every cluster that routes to it. Neither does a fleet without
// regions gain egress on 8083.
func TestAttackPeerPortWithoutRegions(t *testing.T) {
	opts := npOptions
	opts.APIServerEndpoints = []string{"10.0.0.1:6443"}
	for _, fleet := range append(npFleets(), resFleets()...) {
		np := resources.BuildLimiterNetworkPolicy(fleet, opts)
		if opened, _ := peerIngress(np); opened {
			t.Errorf("fleet %s/%s without regions opens the peer port: %+v", fleet.Namespace, fleet.Name, np.Spec.Ingress)
		}
		if egressAllows(t, np, dest{what: "a peer endpoint", ip: "198.51.100.8", proto: corev1.ProtocolTCP, port: 8083}) &&
			slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			t.Errorf("fleet %s/%s without regions may send to port 8083 anywhere", fleet.Namespace, fleet.Name)
		}
	}
}
