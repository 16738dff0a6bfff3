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

package controllers_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/controllers"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files in testdata/")

func resCluster(mutate ...func(*v1alpha1.LimiterFleet)) func(*v1alpha1.LimiterFleet) {
	return func(f *v1alpha1.LimiterFleet) {
		f.Spec.Redis = v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisCluster)}
		for _, m := range mutate {
			m(f)
		}
	}
}

// redisBuildAll builds every Redis object of a Cluster fleet.
func redisBuildAll(fleet *v1alpha1.LimiterFleet) []client.Object {
	objs := []client.Object{controllers.BuildRedisConfigMap(fleet), controllers.BuildRedisService(fleet)}
	for shard := range int(fleet.Spec.EffectiveShards()) {
		objs = append(objs, controllers.BuildRedisStatefulSet(fleet, shard, ""), controllers.BuildRedisPDB(fleet, shard))
	}
	return objs
}

func renderYAML(t *testing.T, objs []client.Object) []byte {
	t.Helper()
	var buf bytes.Buffer
	for _, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	return buf.Bytes()
}

// TestRedisBuildersGolden pins every Redis object of two fleets: defaults,
// and every option set (storage, auth, resources, image, node timeout, 4
// shards of 3 pods). Run with -update to rewrite testdata/ after a
// deliberate change, and review the diff.
func TestRedisBuildersGolden(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fleet *v1alpha1.LimiterFleet
	}{
		{"redis-cluster-defaults", resFleet("sluice-system", "edge", resCluster())},
		{"redis-cluster-options", resFleet("team-a", "payments", resCluster(func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis.Shards, f.Spec.Redis.ReplicasPerShard = ptr.To[int32](4), ptr.To[int32](2)
			f.Spec.Redis.NodeTimeout = &metav1.Duration{Duration: 3 * time.Second}
			f.Spec.Redis.Storage = &v1alpha1.RedisStorage{Size: resource.MustParse("1Gi"), StorageClassName: ptr.To("fast")}
			f.Spec.Redis.Auth = &v1alpha1.RedisAuth{SecretName: "redis-auth", Key: "pw"}
			f.Spec.Redis.Image = ptr.To("registry.example.com/redis:7.2.4")
			f.Spec.Redis.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}}
		}))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := renderYAML(t, redisBuildAll(tc.fleet))
			if again := renderYAML(t, redisBuildAll(tc.fleet)); !bytes.Equal(got, again) {
				t.Fatal("two builds of one fleet differ")
			}
			path := filepath.Join("testdata", tc.name+".yaml")
			if *updateGolden {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run TestRedisBuildersGolden -update)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("%s differs (-want +got):\n%s", path, diff)
			}
		})
	}
}

// TestRedisConfig checks the directives the issue names, from the spec.
func TestRedisConfig(t *testing.T) {
	conf := controllers.RedisConfig(resFleet("ns", "f", resCluster(func(f *v1alpha1.LimiterFleet) {
		f.Spec.Redis.NodeTimeout = &metav1.Duration{Duration: 1500 * time.Millisecond}
	})))
	for _, line := range []string{
		"cluster-enabled yes",
		"cluster-config-file /data/nodes.conf",
		"cluster-require-full-coverage no",
		"cluster-node-timeout 1500",
		"cluster-preferred-endpoint-type ip",
		"appendonly yes",
	} {
		if !strings.Contains(conf, line+"\n") {
			t.Errorf("redis.conf lacks %q:\n%s", line, conf)
		}
	}
	if def := controllers.RedisConfig(resFleet("ns", "f", resCluster())); !strings.Contains(def, "cluster-node-timeout 5000\n") {
		t.Errorf("default node timeout is not 5s:\n%s", def)
	}
	if strings.Contains(conf, "requirepass") || strings.Contains(conf, "masterauth") {
		t.Errorf("redis.conf carries a password directive:\n%s", conf)
	}
}

// TestRedisStatefulSet checks per shard: names, selector, pod count,
// anti-affinity, the data volume (PVC or emptyDir), and that the password
// only ever comes from the Secret.
func TestRedisStatefulSet(t *testing.T) {
	withAuth := resFleet("ns", "f", resCluster(func(f *v1alpha1.LimiterFleet) {
		f.Spec.Redis.ReplicasPerShard = ptr.To[int32](2)
		f.Spec.Redis.Auth = &v1alpha1.RedisAuth{SecretName: "redis-auth"}
		f.Spec.Redis.Storage = &v1alpha1.RedisStorage{Size: resource.MustParse("1Gi")}
	}))
	set := controllers.BuildRedisStatefulSet(withAuth, 2, "")
	if set.Name != "f-redis-2" || *set.Spec.Replicas != 3 || set.Spec.ServiceName != "f-redis" {
		t.Errorf("name %s replicas %d service %s", set.Name, *set.Spec.Replicas, set.Spec.ServiceName)
	}
	sel := set.Spec.Selector.MatchLabels
	if sel[controllers.LabelRedisShard] != "2" || !subsetOf(sel, set.Spec.Template.Labels) {
		t.Errorf("selector %v does not select its template %v", sel, set.Spec.Template.Labels)
	}
	aff := set.Spec.Template.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if len(aff) != 1 || aff[0].TopologyKey != corev1.LabelHostname || !cmp.Equal(aff[0].LabelSelector.MatchLabels, sel) {
		t.Errorf("anti-affinity %+v: want the shard's pods on different nodes", aff)
	}
	if len(set.Spec.VolumeClaimTemplates) != 1 || set.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String() != "1Gi" {
		t.Errorf("claims %+v", set.Spec.VolumeClaimTemplates)
	}
	c := set.Spec.Template.Spec.Containers[0]
	var ref *corev1.SecretKeySelector
	for _, e := range c.Env {
		if e.Name == limiterwire.RedisPasswordEnv {
			ref = e.ValueFrom.SecretKeyRef
		}
		if e.Value != "" {
			t.Errorf("env %s has a literal value", e.Name)
		}
	}
	if ref == nil || ref.Name != "redis-auth" || ref.Key != "password" {
		t.Errorf("password env from %+v, want Secret redis-auth key password", ref)
	}
	if args := strings.Join(c.Args, " "); !strings.Contains(args, "--requirepass $(SLUICE_REDIS_PASSWORD) --masterauth $(SLUICE_REDIS_PASSWORD)") ||
		!strings.Contains(args, "--cluster-announce-hostname $(POD_NAME).f-redis.ns.svc") {
		t.Errorf("args %q", args)
	}
	dep := controllers.BuildLimiterDeployment(withAuth, "limiter:test", "x")
	if env := dep.Spec.Template.Spec.Containers[0].Env; len(env) != 1 || env[0].ValueFrom.SecretKeyRef.Name != "redis-auth" {
		t.Errorf("limiter env %+v: want the password from the Secret", env)
	}

	noStorage := controllers.BuildRedisStatefulSet(resFleet("ns", "f", resCluster()), 0, "")
	if len(noStorage.Spec.VolumeClaimTemplates) != 0 || noStorage.Spec.Template.Spec.Volumes[0].EmptyDir == nil {
		t.Errorf("without storage: claims %v volumes %+v", noStorage.Spec.VolumeClaimTemplates, noStorage.Spec.Template.Spec.Volumes)
	}
	if *noStorage.Spec.Replicas != 2 {
		t.Errorf("default replicasPerShard: %d pods, want 2", *noStorage.Spec.Replicas)
	}
	for _, e := range noStorage.Spec.Template.Spec.Containers[0].Env {
		if e.Name == limiterwire.RedisPasswordEnv {
			t.Errorf("password env without auth")
		}
	}

	// The image: the fleet's, else the operator's --redis-image, else redis:7.2.
	mirrored := resFleet("ns", "f", resCluster(func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Image = ptr.To("own/redis:7.4") }))
	for _, tc := range []struct {
		fleet          *v1alpha1.LimiterFleet
		operator, want string
	}{
		{resFleet("ns", "f", resCluster()), "", v1alpha1.DefaultRedisImage},
		{resFleet("ns", "f", resCluster()), "mirror.example/redis:7.2", "mirror.example/redis:7.2"},
		{mirrored, "mirror.example/redis:7.2", "own/redis:7.4"},
	} {
		if got := controllers.BuildRedisStatefulSet(tc.fleet, 0, tc.operator).Spec.Template.Spec.Containers[0].Image; got != tc.want {
			t.Errorf("spec.redis.image %v, operator's %q: image %s, want %s", tc.fleet.Spec.Redis.Image, tc.operator, got, tc.want)
		}
	}

	// A node timeout change rolls the pods: the config hash changes.
	slow := controllers.BuildRedisStatefulSet(resFleet("ns", "f", resCluster(func(f *v1alpha1.LimiterFleet) {
		f.Spec.Redis.NodeTimeout = &metav1.Duration{Duration: 10 * time.Second}
	})), 0, "")
	if a, b := noStorage.Spec.Template.Annotations[controllers.RedisConfigHashAnnotation], slow.Spec.Template.Annotations[controllers.RedisConfigHashAnnotation]; a == b || a == "" {
		t.Errorf("config hash %q and %q: want a change", a, b)
	}
}

// TestRedisNamesFit shows that the longest Cluster fleet name gives valid
// names: StatefulSets of at most 52 characters (their pods' revision label
// must fit in 63), pod hostnames and the Service as DNS labels.
func TestRedisNamesFit(t *testing.T) {
	f := resFleet("ns", strings.Repeat("f", v1alpha1.MaxClusterFleetNameLength), resCluster(func(f *v1alpha1.LimiterFleet) {
		f.Spec.Redis.Shards = ptr.To(v1alpha1.MaxShards)
	}))
	last := int(v1alpha1.MaxShards) - 1
	if n := controllers.RedisShardName(f, last); len(n) > 52 {
		t.Errorf("StatefulSet %s is %d characters, want at most 52", n, len(n))
	}
	pod := controllers.RedisShardName(f, last) + "-5"
	for _, name := range []string{controllers.RedisName(f), pod, controllers.RedisShardName(f, last)} {
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Errorf("%s: %v", name, errs)
		}
	}
	pdb := controllers.BuildRedisPDB(f, last)
	if pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.Selector.MatchLabels[controllers.LabelRedisShard] != "99" {
		t.Errorf("PDB %+v", pdb.Spec)
	}
}

func subsetOf(want, have map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
