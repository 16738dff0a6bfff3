package controllers_test

import (
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
// its conversion annotation) renders the limiters' region flags, the
// tokens as read-only Secret mounts, and the peer port; peers in name
// order whatever their order in the spec. A fleet without regions renders
// none of it.
func TestBuildLimiterDeploymentRegions(t *testing.T) {
	beta := &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: "sluice-system"}}
	beta.Spec.Regions = &v1beta1.FleetRegions{
		Name: "eu-west",
		Auth: v1beta1.SecretKeyRef{SecretName: "peer-token", Key: "token"},
		Peers: []v1beta1.RegionPeer{
			{Name: "us-east", Endpoint: "https://us-east.example.com:8083", Credentials: v1beta1.SecretKeyRef{SecretName: "us-east-token", Key: "token"}},
			{Name: "ap-south", Endpoint: "https://ap-south.example.com:8083", Credentials: v1beta1.SecretKeyRef{SecretName: "ap-south-token", Key: "t"}},
		},
		PartitionSharePercent: ptr.To[int32](40),
	}
	fleet := &v1alpha1.LimiterFleet{}
	if err := fleet.ConvertFrom(beta); err != nil {
		t.Fatal(err)
	}
	d := resources.BuildLimiterDeployment(fleet, resources.LimiterDeploymentOptions{DefaultImage: "sluice/limiter:test", StoreURL: "redis://redis:6379"})
	c := d.Spec.Template.Spec.Containers[0]
	args := strings.Join(c.Args, " ")
	want := "--region eu-west --peer-addr :8083 --region-token-file /var/run/sluice/region/region-auth/token" +
		" --peer ap-south=https://ap-south.example.com:8083 --peer-token-file ap-south=/var/run/sluice/region/region-peer-0/token" +
		" --peer us-east=https://us-east.example.com:8083 --peer-token-file us-east=/var/run/sluice/region/region-peer-1/token" +
		" --partition-share 40"
	if !strings.HasSuffix(args, want) {
		t.Fatalf("args %q\nwant them to end with %q", args, want)
	}
	secrets := map[string]string{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if s := v.Secret; s != nil && strings.HasPrefix(v.Name, "region-") {
			secrets[v.Name] = s.SecretName + "/" + s.Items[0].Key
		}
	}
	wantSecrets := map[string]string{"region-auth": "peer-token/token", "region-peer-0": "ap-south-token/t", "region-peer-1": "us-east-token/token"}
	if len(secrets) != 3 || secrets["region-auth"] != wantSecrets["region-auth"] || secrets["region-peer-0"] != wantSecrets["region-peer-0"] || secrets["region-peer-1"] != wantSecrets["region-peer-1"] {
		t.Fatalf("region Secret volumes %v, want %v", secrets, wantSecrets)
	}
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(m.Name, "region-") && !m.ReadOnly {
			t.Errorf("mount %s is writable", m.Name)
		}
	}
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
