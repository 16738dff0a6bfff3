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
	"errors"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
	"github.com/sluice-dev/sluice/limiter/store/redis"
)

// TestBuildLimiterDeployment pins the Deployment: image, replicas, arguments,
// ports, probes, resources, security context and spreading.
func TestBuildLimiterDeployment(t *testing.T) {
	defaultResources := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
	custom := corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}
	cases := []struct {
		name          string
		fleet         *v1beta1.LimiterFleet
		storeURL      string
		wantImage     string
		wantReplicas  int32
		wantResources corev1.ResourceRequirements
	}{
		{
			name:          "defaults",
			fleet:         resFleet("sluice-system", "default"),
			storeURL:      "memory",
			wantImage:     resDefaultImage,
			wantReplicas:  2,
			wantResources: defaultResources,
		},
		{
			name: "image, replicas and resources from the spec",
			fleet: resFleet("payments", "edge", func(f *v1alpha1.LimiterFleet) {
				f.Spec.Image = ptr.To("registry.example.com/limiter:v2")
				f.Spec.Replicas = ptr.To[int32](7)
				f.Spec.Resources = custom.DeepCopy()
			}),
			storeURL:      "redis-cluster://a:6379,b:6379",
			wantImage:     "registry.example.com/limiter:v2",
			wantReplicas:  7,
			wantResources: custom,
		},
		{
			name:          "zero replicas",
			fleet:         resFleet("payments", "off", func(f *v1alpha1.LimiterFleet) { f.Spec.Replicas = ptr.To[int32](0) }),
			storeURL:      "redis://r:6379",
			wantImage:     resDefaultImage,
			wantReplicas:  0,
			wantResources: defaultResources,
		},
		{
			name:          "empty image means the default",
			fleet:         resFleet("payments", "blank", func(f *v1alpha1.LimiterFleet) { f.Spec.Image = ptr.To("") }),
			storeURL:      "memory",
			wantImage:     resDefaultImage,
			wantReplicas:  2,
			wantResources: defaultResources,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := resources.BuildLimiterDeployment(tc.fleet, resources.LimiterDeploymentOptions{DefaultImage: resDefaultImage, StoreURL: tc.storeURL})
			name := tc.fleet.Name + "-limiter"
			selector := resources.LimiterSelectorLabels(tc.fleet)

			if d.Spec.Replicas == nil || *d.Spec.Replicas != tc.wantReplicas {
				t.Errorf("replicas = %v, want %d", d.Spec.Replicas, tc.wantReplicas)
			}
			if diff := cmp.Diff(&metav1.LabelSelector{MatchLabels: selector}, d.Spec.Selector); diff != "" {
				t.Errorf("selector (-want +got):\n%s", diff)
			}
			tmpl := d.Spec.Template
			for k, v := range selector {
				if tmpl.Labels[k] != v {
					t.Errorf("pod label %s = %q, want %q: the selector must select the pods", k, tmpl.Labels[k], v)
				}
			}
			if len(tmpl.Annotations) > 0 {
				t.Errorf("pod annotations %v: nothing in the template may change with the snapshot", tmpl.Annotations)
			}
			if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
				t.Errorf("rolling update %+v: want maxUnavailable 0", ru)
			}

			pod := tmpl.Spec
			if pod.ServiceAccountName != name {
				t.Errorf("serviceAccountName = %q, want %q", pod.ServiceAccountName, name)
			}
			if !ptr.Deref(pod.AutomountServiceAccountToken, false) {
				t.Errorf("the limiter needs its token to watch its ConfigMap")
			}
			wantPodSC := &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](65532),
				RunAsGroup:     ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			}
			if diff := cmp.Diff(wantPodSC, pod.SecurityContext); diff != "" {
				t.Errorf("pod security context (-want +got):\n%s", diff)
			}
			wantSpread := []corev1.TopologySpreadConstraint{
				{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: selector},
					MatchLabelKeys: []string{"pod-template-hash"}, NodeTaintsPolicy: ptr.To(corev1.NodeInclusionPolicyHonor)},
				{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: selector},
					MatchLabelKeys: []string{"pod-template-hash"}, NodeTaintsPolicy: ptr.To(corev1.NodeInclusionPolicyHonor)},
			}
			if diff := cmp.Diff(wantSpread, pod.TopologySpreadConstraints); diff != "" {
				t.Errorf("topology spread (-want +got):\n%s", diff)
			}

			if len(pod.Containers) != 1 {
				t.Fatalf("%d containers, want 1", len(pod.Containers))
			}
			c := pod.Containers[0]
			if c.Name != "limiter" || c.Image != tc.wantImage {
				t.Errorf("container %q image %q, want limiter image %q", c.Name, c.Image, tc.wantImage)
			}
			wantArgs := []string{
				"--snapshot-configmap=" + tc.fleet.Namespace + "/" + tc.fleet.Name + "-snapshot",
				"--store=" + tc.storeURL,
				"--grpc-addr=0.0.0.0:8081",
				"--http-addr=0.0.0.0:8080",
				"--admin-addr=0.0.0.0:8082",
				"--admin-auth=kubernetes",
				"--admin-token-audience=sluice-limiter-admin." + tc.fleet.Namespace + "." + tc.fleet.Name,
				"--log-format=json",
				"--admin-tls-cert=/etc/sluice/admin-tls/tls.crt",
				"--admin-tls-key=/etc/sluice/admin-tls/tls.key",
				"--drain-delay=5s",
			}
			if diff := cmp.Diff(wantArgs, c.Args); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			// GOMEMLIMIT is 90% of the memory limit, when there is one.
			var wantEnv []corev1.EnvVar
			if _, ok := tc.wantResources.Limits[corev1.ResourceMemory]; ok {
				wantEnv = []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: "241591860"}} // of 256Mi
			}
			if len(c.Command) > 0 || !cmp.Equal(wantEnv, c.Env) {
				t.Errorf("command %v env %v: want the image's entrypoint and environment %v", c.Command, c.Env, wantEnv)
			}
			wantPorts := []corev1.ContainerPort{
				{Name: "grpc", ContainerPort: 8081, Protocol: corev1.ProtocolTCP},
				{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
				{Name: "admin", ContainerPort: 8082, Protocol: corev1.ProtocolTCP},
			}
			if diff := cmp.Diff(wantPorts, c.Ports); diff != "" {
				t.Errorf("ports (-want +got):\n%s", diff)
			}
			for _, p := range []struct {
				probe *corev1.Probe
				path  string
			}{{c.ReadinessProbe, "/readyz"}, {c.LivenessProbe, "/healthz"}} {
				if p.probe == nil || p.probe.HTTPGet == nil {
					t.Errorf("no HTTP probe for %s", p.path)
					continue
				}
				if g := p.probe.HTTPGet; g.Path != p.path || g.Port != intstr.FromString("http") {
					t.Errorf("probe %s on %v, want %s on port http", g.Path, g.Port, p.path)
				}
			}
			if diff := cmp.Diff(tc.wantResources, c.Resources); diff != "" {
				t.Errorf("resources (-want +got):\n%s", diff)
			}
			wantSC := &corev1.SecurityContext{
				RunAsNonRoot:             ptr.To(true),
				RunAsUser:                ptr.To[int64](65532),
				RunAsGroup:               ptr.To[int64](65532),
				ReadOnlyRootFilesystem:   ptr.To(true),
				AllowPrivilegeEscalation: ptr.To(false),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			}
			if diff := cmp.Diff(wantSC, c.SecurityContext); diff != "" {
				t.Errorf("container security context (-want +got):\n%s", diff)
			}
			if c.SecurityContext.Privileged != nil || c.SecurityContext.Capabilities.Add != nil {
				t.Errorf("container must not be privileged or add capabilities")
			}
		})
	}
}

func TestLimiterArgsTopDescriptors(t *testing.T) {
	base := resources.LimiterArgs(resFleet("ns", "f"), "memory")
	for _, tc := range []struct {
		name  string
		stats *v1alpha1.FleetStats
		want  []string
	}{
		{"no stats section", nil, nil},
		{"zero is off", &v1alpha1.FleetStats{TopDescriptors: ptr.To[int32](0), DescriptorValues: ptr.To(v1alpha1.DescriptorValuesTruncate)}, nil},
		{"hash by default", &v1alpha1.FleetStats{TopDescriptors: ptr.To[int32](5)}, []string{"--top-descriptors=5"}},
		{"truncate", &v1alpha1.FleetStats{TopDescriptors: ptr.To[int32](3), DescriptorValues: ptr.To(v1alpha1.DescriptorValuesTruncate), TruncateTo: ptr.To[int32](12)},
			[]string{"--top-descriptors=3", "--top-descriptor-values=truncate", "--top-descriptor-truncate=12"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := resFleet("ns", "f", func(f *v1alpha1.LimiterFleet) { f.Spec.Stats = tc.stats })
			got := resources.LimiterArgs(f, "memory")
			if diff := cmp.Diff(append(slices.Clone(base), tc.want...), got); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLimiterArgsTrustedProxies(t *testing.T) {
	f := resFleet("ns", "f", func(f *v1alpha1.LimiterFleet) { f.Spec.TrustedProxies = []string{"10.0.0.0/8", "fd00::1"} })
	got := resources.LimiterArgs(f, "memory")
	if !slices.Contains(got, "--trusted-proxies=10.0.0.0/8,fd00::1") {
		t.Errorf("args %q lack --trusted-proxies", got)
	}
	if got := resources.LimiterArgs(resFleet("ns", "f"), "memory"); slices.ContainsFunc(got, func(a string) bool { return strings.HasPrefix(a, "--trusted-proxies") }) {
		t.Errorf("args %q: --trusted-proxies without spec.trustedProxies", got)
	}
}

// TestLimiterRedisCredentialsAndCA: redis.auth reaches the limiter as env
// vars from the Secret (the user too, with usernameKey), redis.tls's CA as
// a read-only Secret volume named in --redis-ca-file, and the server name
// as --redis-tls-server-name; without them, none of it.
// TestGoMemLimitEnv: the limiter container gets GOMEMLIMIT, 90% of its
// memory limit in bytes (the Go runtime's soft limit, so it collects
// before the kernel kills it at the limit), and none without a limit.
func TestGoMemLimitEnv(t *testing.T) {
	for _, tc := range []struct {
		limit string
		want  []corev1.EnvVar
	}{
		{"256Mi", []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: "241591860"}}},
		{"1Gi", []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: "966367620"}}},
		{"", nil},
	} {
		f := resFleet("ns", "f", func(f *v1alpha1.LimiterFleet) {
			f.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
			if tc.limit != "" {
				f.Spec.Resources.Limits[corev1.ResourceMemory] = resource.MustParse(tc.limit)
			}
		})
		c := resources.BuildLimiterDeployment(f, resources.LimiterDeploymentOptions{DefaultImage: "limiter:test", StoreURL: "memory"}).Spec.Template.Spec.Containers[0]
		if diff := cmp.Diff(tc.want, c.Env); diff != "" {
			t.Errorf("memory limit %q: env (-want +got):\n%s", tc.limit, diff)
		}
	}
}

// TestBuildLimiterDeploymentTopKKey: a fleet that reports hottest values
// mounts its key Secret read-only and names the key file in
// SLUICE_TOPK_KEY_FILE, the file the mount gives; one that doesn't has
// neither.
func TestBuildLimiterDeploymentTopKKey(t *testing.T) {
	fleet := resFleet("sluice-system", "default", func(f *v1alpha1.LimiterFleet) {
		f.Spec.Stats = &v1alpha1.FleetStats{TopDescriptors: ptr.To[int32](5)}
	})
	pod := resources.BuildLimiterDeployment(fleet, resources.LimiterDeploymentOptions{DefaultImage: resDefaultImage, StoreURL: "memory"}).Spec.Template.Spec
	c := pod.Containers[0]
	if len(pod.Volumes) != 2 || pod.Volumes[0].Secret == nil || pod.Volumes[0].Secret.SecretName != "default-limiter-topk-key" ||
		len(pod.Volumes[0].Secret.Items) != 1 || pod.Volumes[0].Secret.Items[0].Key != "key" {
		t.Fatalf("volumes %+v: want the key of Secret default-limiter-topk-key", pod.Volumes)
	}
	if len(c.VolumeMounts) != 2 || !c.VolumeMounts[0].ReadOnly || c.VolumeMounts[0].Name != pod.Volumes[0].Name {
		t.Fatalf("mounts %+v: want the key volume, read-only, and the admin TLS one", c.VolumeMounts)
	}
	file := path.Join(c.VolumeMounts[0].MountPath, pod.Volumes[0].Secret.Items[0].Path)
	// and GOMEMLIMIT, 90% of the default memory limit (TestGoMemLimitEnv).
	want := []corev1.EnvVar{{Name: "SLUICE_TOPK_KEY_FILE", Value: file}, {Name: "GOMEMLIMIT", Value: "241591860"}}
	if file != "/etc/sluice/topk/key" || len(c.Env) != 2 || c.Env[0] != want[0] || c.Env[1] != want[1] {
		t.Errorf("env %+v, key file %s: want SLUICE_TOPK_KEY_FILE=/etc/sluice/topk/key", c.Env, file)
	}
	if s := resources.BuildTopKKeySecret(fleet, []byte("k")); s.Name != pod.Volumes[0].Secret.SecretName || s.Namespace != fleet.Namespace {
		t.Errorf("the key Secret %s/%s is not the one mounted", s.Namespace, s.Name)
	}
	plain := resources.BuildLimiterDeployment(resFleet("sluice-system", "default"), resources.LimiterDeploymentOptions{DefaultImage: resDefaultImage, StoreURL: "memory"}).Spec.Template.Spec
	if len(plain.Volumes) != 1 || plain.Volumes[0].Name != "admin-tls" || len(plain.Containers[0].Env) != 1 || plain.Containers[0].Env[0].Name != "GOMEMLIMIT" {
		t.Errorf("without hottest values: volumes %+v, env %+v", plain.Volumes, plain.Containers[0].Env)
	}
}

// TestStoreURL maps each redis section to the limiter's --store, and checks
// that the limiter's own parser accepts the result.
func TestStoreURL(t *testing.T) {
	cases := []struct {
		name    string
		mutate  func(*v1alpha1.LimiterFleet)
		want    string
		wantErr string
		is      error
		// storeType, when set, replaces the converted fleet's store.type.
		storeType v1beta1.StoreType
	}{
		{name: "mode unset is None", mutate: func(*v1alpha1.LimiterFleet) {}, want: "memory"},
		{name: "None", mutate: func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Mode = ptr.To(v1alpha1.RedisNone) }, want: "memory"},
		{name: "External, one server", mutate: resExternal(nil, "redis.cache.svc:6379"), want: "redis://redis.cache.svc:6379"},
		{name: "External, IPv6 server", mutate: resExternal(nil, "[fd00::1]:6379"), want: "redis://[fd00::1]:6379"},
		{name: "External, one server, cluster false", mutate: resExternal(ptr.To(false), "r:6379"), want: "redis://r:6379"},
		{name: "External, one cluster seed", mutate: resExternal(ptr.To(true), "r:6379"), want: "redis-cluster://r:6379"},
		{
			name:   "External, several seeds are a cluster",
			mutate: resExternal(nil, "r-0:6379", "r-1:6379", "r-2:6379"),
			want:   "redis-cluster://r-0:6379,r-1:6379,r-2:6379",
		},
		{name: "External, several seeds, cluster true", mutate: resExternal(ptr.To(true), "r-1:6379", "r-0:6379"), want: "redis-cluster://r-1:6379,r-0:6379"},
		{name: "External without addresses", mutate: resExternal(nil), wantErr: "spec.store.external.addresses is required"},
		{name: "External, several addresses, cluster false", mutate: resExternal(ptr.To(false), "a:1", "b:1"), wantErr: "must hold one address"},
		{
			name:   "Cluster: every ordinal of the first three shards by DNS name (a replica each by default), ordinal 0 first",
			mutate: func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Mode = ptr.To(v1alpha1.RedisCluster) },
			want: "redis-cluster://f-redis-0-0.f-redis.ns.svc:6379,f-redis-1-0.f-redis.ns.svc:6379,f-redis-2-0.f-redis.ns.svc:6379," +
				"f-redis-0-1.f-redis.ns.svc:6379,f-redis-1-1.f-redis.ns.svc:6379,f-redis-2-1.f-redis.ns.svc:6379",
		},
		{
			name: "Cluster, 5 shards: the same seeds",
			mutate: func(f *v1alpha1.LimiterFleet) {
				f.Spec.Redis.Mode, f.Spec.Redis.Shards = ptr.To(v1alpha1.RedisCluster), ptr.To[int32](5)
			},
			want: "redis-cluster://f-redis-0-0.f-redis.ns.svc:6379,f-redis-1-0.f-redis.ns.svc:6379,f-redis-2-0.f-redis.ns.svc:6379," +
				"f-redis-0-1.f-redis.ns.svc:6379,f-redis-1-1.f-redis.ns.svc:6379,f-redis-2-1.f-redis.ns.svc:6379",
		},
		{
			name: "Cluster without replicas: ordinal 0 only",
			mutate: func(f *v1alpha1.LimiterFleet) {
				f.Spec.Redis.Mode, f.Spec.Redis.ReplicasPerShard = ptr.To(v1alpha1.RedisCluster), ptr.To[int32](0)
			},
			want: "redis-cluster://f-redis-0-0.f-redis.ns.svc:6379,f-redis-1-0.f-redis.ns.svc:6379,f-redis-2-0.f-redis.ns.svc:6379",
		},
		{
			name: "Cluster with auth: no password in the URL (the limiter reads it from its environment)",
			mutate: func(f *v1alpha1.LimiterFleet) {
				f.Spec.Redis.Mode, f.Spec.Redis.Auth = ptr.To(v1alpha1.RedisCluster), &v1alpha1.RedisAuth{SecretName: "pw"}
			},
			want: "redis-cluster://f-redis-0-0.f-redis.ns.svc:6379,f-redis-1-0.f-redis.ns.svc:6379,f-redis-2-0.f-redis.ns.svc:6379," +
				"f-redis-0-1.f-redis.ns.svc:6379,f-redis-1-1.f-redis.ns.svc:6379,f-redis-2-1.f-redis.ns.svc:6379",
		},
		{
			name: "External over TLS, one server",
			mutate: func(f *v1alpha1.LimiterFleet) {
				resExternal(nil, "redis.example.com:6380")(f)
				f.Spec.Redis.TLS = &v1alpha1.RedisTLS{}
			},
			want: "rediss://redis.example.com:6380",
		},
		{
			name: "External over TLS, a cluster",
			mutate: func(f *v1alpha1.LimiterFleet) {
				resExternal(nil, "r-0:6380", "r-1:6380")(f)
				f.Spec.Redis.TLS = &v1alpha1.RedisTLS{}
			},
			want: "rediss-cluster://r-0:6380,r-1:6380",
		},
		{name: "unknown store type", mutate: func(*v1alpha1.LimiterFleet) {}, storeType: "Sentinel", wantErr: `"Sentinel"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fleet := resFleet("ns", "f", tc.mutate)
			if tc.storeType != "" {
				fleet.Spec.Store.Type = tc.storeType
			}
			got, err := resources.StoreURL(fleet)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("StoreURL = %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				if tc.is != nil && !errors.Is(err, tc.is) {
					t.Errorf("error %v is not %v", err, tc.is)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("StoreURL = %q, %v; want %q", got, err, tc.want)
			}
			if got == "memory" {
				return
			}
			opts, err := redis.ParseURL(got)
			if err != nil {
				t.Fatalf("the limiter rejects --store=%s: %v", got, err)
			}
			f := resFleet("ns", "f", tc.mutate)
			var wantAddrs []string
			if e := f.Spec.Store.External; e != nil {
				wantAddrs = e.Addresses
			}
			wantCluster := f.Spec.RedisIsCluster()
			if f.Spec.EffectiveStoreType() == v1beta1.StoreCluster {
				wantCluster, wantAddrs = true, resources.RedisSeeds(f)
			}
			if opts.Password != "" || opts.Username != "" {
				t.Errorf("credentials in --store=%s", got)
			}
			wantTLS := resources.RedisTLSEnabled(f) || (f.Spec.Store.External != nil && f.Spec.Store.External.TLS != nil)
			if (opts.TLS != nil) != wantTLS {
				t.Errorf("--store=%s: TLS %v, want %v", got, opts.TLS != nil, wantTLS)
			}
			if opts.Cluster != wantCluster || !slices.Equal(opts.Addrs, wantAddrs) {
				t.Errorf("the limiter reads --store=%s as cluster=%v addrs=%v", got, opts.Cluster, opts.Addrs)
			}
		})
	}
}

func TestLimiterRedisCredentialsAndCA(t *testing.T) {
	fleet := resFleet("ns", "f", func(f *v1alpha1.LimiterFleet) {
		resExternal(nil, "redis.example.com:6380")(f)
		f.Spec.Redis.Auth = &v1alpha1.RedisAuth{SecretName: "redis-creds", Key: "pw", UsernameKey: ptr.To("user")}
		f.Spec.Redis.TLS = &v1alpha1.RedisTLS{CASecretName: ptr.To("redis-ca"), ServerName: ptr.To("redis.example.com")}
	})
	dep := resources.BuildLimiterDeployment(fleet, resources.LimiterDeploymentOptions{DefaultImage: "limiter:test", StoreURL: "rediss://redis.example.com:6380"})
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	want := []corev1.EnvVar{
		{Name: limiterwire.RedisPasswordEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "redis-creds"}, Key: "pw"}}},
		{Name: limiterwire.RedisUsernameEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "redis-creds"}, Key: "user"}}},
		{Name: "GOMEMLIMIT", Value: "241591860"}, // 90% of the default 256Mi limit
	}
	if diff := cmp.Diff(want, c.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	if len(pod.Volumes) != 2 || pod.Volumes[0].Secret == nil || pod.Volumes[0].Secret.SecretName != "redis-ca" ||
		!cmp.Equal(pod.Volumes[0].Secret.Items, []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}) {
		t.Errorf("volumes %+v: want the ca.crt of Secret redis-ca", pod.Volumes)
	}
	if len(c.VolumeMounts) != 2 || !c.VolumeMounts[0].ReadOnly || c.VolumeMounts[0].Name != pod.Volumes[0].Name {
		t.Errorf("mounts %+v: want the CA volume, read-only, and the admin TLS one", c.VolumeMounts)
	}
	args := strings.Join(c.Args, " ")
	for _, a := range []string{"--store=rediss://redis.example.com:6380", "--redis-ca-file=" + c.VolumeMounts[0].MountPath + "/ca.crt", "--redis-tls-server-name=redis.example.com"} {
		if !strings.Contains(args, a) {
			t.Errorf("args %q lack %s", args, a)
		}
	}

	plain := resources.BuildLimiterDeployment(resFleet("ns", "f", resExternal(nil, "r:6379")), resources.LimiterDeploymentOptions{DefaultImage: "limiter:test", StoreURL: "redis://r:6379"})
	pc := plain.Spec.Template.Spec.Containers[0]
	if len(pc.Env) != 1 || pc.Env[0].Name != "GOMEMLIMIT" || len(pc.VolumeMounts) != 1 || len(plain.Spec.Template.Spec.Volumes) != 1 || strings.Contains(strings.Join(pc.Args, " "), "--redis-") {
		t.Errorf("without auth and tls: env %v, mounts %v, args %q", pc.Env, pc.VolumeMounts, pc.Args)
	}
}
