package resources

import (
	"fmt"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// A fleet's spec.regions (v1beta1 only) becomes the limiters' region
// flags: --region, --peer-addr on LimiterPeerPort and one --peer per
// peer, with --peer-cert-file, --peer-key-file and --peer-ca-file from the
// spec.regions.tls Secret mounted read-only; or, with insecureLab,
// --peer-insecure-lab, --region-token-file and one --peer-token-file per
// peer, each token a key of a Secret in the fleet's namespace.

const (
	// LimiterPeerPort is the limiters' peer endpoint, where other regions
	// take grants of Global limits.
	LimiterPeerPort int32 = 8083
	// LimiterPeerPortName names it on the container.
	LimiterPeerPortName = "peer"
	// regionTokenDir holds the mounted region tokens.
	regionTokenDir = "/var/run/sluice/region"
)

// RegionsOf returns a fleet's spec.regions, nil when it names no region.
func RegionsOf(fleet *v1beta1.LimiterFleet) *v1beta1.FleetRegions { return fleet.Spec.Regions }

// limiterRegions returns what a fleet's regions add to the limiter pods:
// arguments, Secret volumes and their mounts, and the peer port. Peers are
// taken in name order, so the rendering is deterministic.
func limiterRegions(fleet *v1beta1.LimiterFleet) ([]string, []corev1.Volume, []corev1.VolumeMount, []corev1.ContainerPort) {
	r := RegionsOf(fleet)
	if r == nil {
		return nil, nil, nil, nil
	}
	args := []string{"--region", r.Name, "--peer-addr", fmt.Sprintf(":%d", LimiterPeerPort)}
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	secret := func(vol, name string, items ...corev1.KeyToPath) string {
		dir := path.Join(regionTokenDir, vol)
		vols = append(vols, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: name, Items: items, DefaultMode: ptr.To[int32](0o444),
		}}})
		mounts = append(mounts, corev1.VolumeMount{Name: vol, MountPath: dir, ReadOnly: true})
		return dir
	}
	token := func(vol string, ref *v1beta1.SecretKeyRef) string {
		if ref == nil {
			return ""
		}
		key := ref.Key
		if key == "" {
			key = "password"
		}
		return path.Join(secret(vol, ref.SecretName, corev1.KeyToPath{Key: key, Path: "token"}), "token")
	}
	lab := ptr.Deref(r.InsecureLab, false)
	switch {
	case len(r.Peers) == 0:
	case lab:
		args = append(args, "--peer-insecure-lab", "--region-token-file", token("region-auth", r.Auth))
	case r.TLS != nil:
		dir := secret("region-tls", r.TLS.SecretName, corev1.KeyToPath{Key: corev1.TLSCertKey, Path: corev1.TLSCertKey},
			corev1.KeyToPath{Key: corev1.TLSPrivateKeyKey, Path: corev1.TLSPrivateKeyKey}, corev1.KeyToPath{Key: "ca.crt", Path: "ca.crt"})
		args = append(args, "--peer-cert-file", path.Join(dir, corev1.TLSCertKey), "--peer-key-file", path.Join(dir, corev1.TLSPrivateKeyKey),
			"--peer-ca-file", path.Join(dir, "ca.crt"))
	}
	peers := slices.Clone(r.Peers)
	slices.SortFunc(peers, func(a, b v1beta1.RegionPeer) int { return strings.Compare(a.Name, b.Name) })
	for i, p := range peers {
		args = append(args, "--peer", p.Name+"="+p.Endpoint)
		if lab {
			args = append(args, "--peer-token-file", p.Name+"="+token(fmt.Sprintf("region-peer-%d", i), p.Credentials))
		}
	}
	if r.PartitionSharePercent != nil {
		args = append(args, "--partition-share", fmt.Sprint(*r.PartitionSharePercent))
	}
	return args, vols, mounts, []corev1.ContainerPort{{Name: LimiterPeerPortName, ContainerPort: LimiterPeerPort, Protocol: corev1.ProtocolTCP}}
}
