package resources

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// A fleet's spec.regions (v1beta1 only) becomes the limiters' region
// flags: --region, --peer-addr on LimiterPeerPort, --region-token-file
// and one --peer and --peer-token-file per peer, each token a key of a
// Secret in the fleet's namespace mounted read-only.

const (
	// LimiterPeerPort is the limiters' peer endpoint, where other regions
	// lease grants of Global limits.
	LimiterPeerPort int32 = 8083
	// LimiterPeerPortName names it on the container.
	LimiterPeerPortName = "peer"
	// regionTokenDir holds the mounted region tokens.
	regionTokenDir = "/var/run/sluice/region"
)

// RegionsOf returns a fleet's spec.regions: the v1alpha1 object the
// operator reads carries it in its v1beta1 conversion annotation, as the
// webhook writes it. nil when the fleet names no region.
func RegionsOf(fleet *v1alpha1.LimiterFleet) *v1beta1.FleetRegions {
	raw, ok := fleet.Annotations[v1alpha1.V1beta1SpecAnnotation]
	if !ok || len(raw) > v1alpha1.MaxConversionAnnotationBytes {
		return nil
	}
	var spec v1beta1.LimiterFleetSpec
	if json.Unmarshal([]byte(raw), &spec) != nil {
		return nil
	}
	return spec.Regions
}

// limiterRegions returns what a fleet's regions add to the limiter pods:
// arguments, Secret volumes and their mounts, and the peer port. Peers are
// taken in name order, so the rendering is deterministic.
func limiterRegions(fleet *v1alpha1.LimiterFleet) ([]string, []corev1.Volume, []corev1.VolumeMount, []corev1.ContainerPort) {
	r := RegionsOf(fleet)
	if r == nil {
		return nil, nil, nil, nil
	}
	args := []string{"--region", r.Name, "--peer-addr", fmt.Sprintf(":%d", LimiterPeerPort)}
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	secret := func(vol string, ref v1beta1.SecretKeyRef) string {
		key := ref.Key
		if key == "" {
			key = "password"
		}
		dir := path.Join(regionTokenDir, vol)
		vols = append(vols, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: ref.SecretName, Items: []corev1.KeyToPath{{Key: key, Path: "token"}}, DefaultMode: ptr.To[int32](0o444),
		}}})
		mounts = append(mounts, corev1.VolumeMount{Name: vol, MountPath: dir, ReadOnly: true})
		return path.Join(dir, "token")
	}
	if len(r.Peers) > 0 {
		args = append(args, "--region-token-file", secret("region-auth", r.Auth))
	}
	peers := slices.Clone(r.Peers)
	slices.SortFunc(peers, func(a, b v1beta1.RegionPeer) int { return strings.Compare(a.Name, b.Name) })
	for i, p := range peers {
		file := secret(fmt.Sprintf("region-peer-%d", i), p.Credentials)
		args = append(args, "--peer", p.Name+"="+p.Endpoint, "--peer-token-file", p.Name+"="+file)
	}
	if r.PartitionSharePercent != nil {
		args = append(args, "--partition-share", fmt.Sprint(*r.PartitionSharePercent))
	}
	return args, vols, mounts, []corev1.ContainerPort{{Name: LimiterPeerPortName, ContainerPort: LimiterPeerPort, Protocol: corev1.ProtocolTCP}}
}
