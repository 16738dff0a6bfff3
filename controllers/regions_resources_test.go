package controllers_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// TestBuildLimiterDeploymentRegions: a fleet naming its region and peers
// (v1beta1 spec.regions, which the operator's v1alpha1 object carries in
// its conversion annotation) renders the limiters' region flags, its
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
	plain := resources.BuildLimiterDeployment(&v1alpha1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: "sluice-system"}},
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
	fleet := &v1alpha1.LimiterFleet{}
	if err := fleet.ConvertFrom(beta); err != nil {
		t.Fatal(err)
	}
	d := resources.BuildLimiterDeployment(fleet, resources.LimiterDeploymentOptions{DefaultImage: "sluice/limiter:test", StoreURL: "redis://redis:6379"})
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
