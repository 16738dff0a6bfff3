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
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/rediscluster"
	"github.com/sluice-dev/sluice/controllers/redisfleet"
	"github.com/sluice-dev/sluice/controllers/resources"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files in testdata/")

// testPasswords stand in for generated ones, which are random.
var testPasswords = resources.RedisPasswords{
	Limiter: "limiter-pw-0123456789abcdef0123456789abcdef", Operator: "operator-pw-0123456789abcdef0123456789abcd",
	Replication: "replication-pw-0123456789abcdef0123456789a"}

// redisBuildAll builds every Redis object of a Cluster fleet, its auth
// Secret with testPasswords first.
func redisBuildAll(fleet *v1beta1.LimiterFleet) []client.Object {
	secret := resources.BuildRedisAuthSecret(fleet, testPasswords)
	objs := []client.Object{secret, resources.BuildRedisConfigMap(fleet), resources.BuildRedisService(fleet)}
	for shard := range int(fleet.Spec.EffectiveShards()) {
		objs = append(objs, resources.BuildRedisStatefulSet(fleet, shard, "", resources.RedisSecretHashes{Auth: redisfleet.RedisAuthHash(secret)}), resources.BuildRedisPDB(fleet, shard))
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
		fleet *v1beta1.LimiterFleet
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
	conf := resources.RedisConfig(resFleet("ns", "f", resCluster(func(f *v1alpha1.LimiterFleet) {
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
	if def := resources.RedisConfig(resFleet("ns", "f", resCluster())); !strings.Contains(def, "cluster-node-timeout 2000\n") {
		t.Errorf("default node timeout is not 2s:\n%s", def)
	}
	for _, line := range []string{
		"protected-mode yes",
		"maxmemory 402653175", // 75% of the default 512Mi limit
		"maxmemory-policy allkeys-lru",
		"include /etc/redis-auth/users.conf",
	} {
		if !strings.Contains(conf, line+"\n") {
			t.Errorf("redis.conf lacks %q:\n%s", line, conf)
		}
	}
	for _, word := range []string{"requirepass", "masterauth", "masteruser", "user ", "protected-mode no", "noeviction"} {
		if strings.Contains(conf, word) {
			t.Errorf("redis.conf has %q:\n%s", word, conf)
		}
	}
}

// TestRedisMaxMemory: maxmemory is spec.redis.maxMemory, or 75% of the
// Redis container's memory limit, or unbounded without either.
func TestRedisMaxMemory(t *testing.T) {
	for _, tc := range []struct {
		name  string
		redis func(*v1alpha1.RedisSpec)
		want  int64
	}{
		{"default 512Mi limit", func(*v1alpha1.RedisSpec) {}, 512 << 20 / 100 * 75},
		{"2Gi limit", func(r *v1alpha1.RedisSpec) {
			r.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}}
		}, 2 << 30 / 100 * 75},
		{"maxMemory", func(r *v1alpha1.RedisSpec) {
			r.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}}
			r.MaxMemory = ptr.To(resource.MustParse("1900Mi"))
		}, 1900 << 20},
		{"no limit", func(r *v1alpha1.RedisSpec) {
			r.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := resFleet("ns", "f", resCluster(func(f *v1alpha1.LimiterFleet) { tc.redis(&f.Spec.Redis) }))
			if got := resources.RedisMaxMemory(f); got != tc.want {
				t.Errorf("RedisMaxMemory = %d, want %d", got, tc.want)
			}
			conf := resources.RedisConfig(f)
			if has := strings.Contains(conf, fmt.Sprintf("maxmemory %d\n", tc.want)); has != (tc.want > 0) || (tc.want == 0 && strings.Contains(conf, "maxmemory ")) {
				t.Errorf("redis.conf for maxmemory %d:\n%s", tc.want, conf)
			}
		})
	}
}

// TestNoPasswordOutsideSecrets renders every object of Cluster fleets, with
// and without redis.auth, and of an External fleet with auth, and finds no
// password anywhere but the auth Secret: not in a ConfigMap, not in a
// literal env var (kubectl describe shows those), and not in a container's
// arguments, where neither a literal nor a $(VAR) that the kubelet expands
// from a Secret may stand (the process's argv is readable in /proc).
func TestNoPasswordOutsideSecrets(t *testing.T) {
	for _, fleet := range []*v1beta1.LimiterFleet{
		resFleet("ns", "gen", resCluster()),
		resFleet("ns", "byo", resCluster(func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis.Auth = &v1alpha1.RedisAuth{SecretName: "redis-auth"}
		})),
		resFleet("ns", "ext", func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisExternal), Addresses: []string{"cache:6379"},
				Auth: &v1alpha1.RedisAuth{SecretName: "redis-auth", UsernameKey: ptr.To("user")}}
		}),
	} {
		t.Run(fleet.Name, func(t *testing.T) {
			url, err := resources.StoreURL(fleet)
			if err != nil {
				t.Fatal(err)
			}
			objs := []client.Object{resources.BuildLimiterDeployment(fleet, resources.LimiterDeploymentOptions{DefaultImage: "limiter:test", StoreURL: url})}
			if fleet.Spec.EffectiveStoreType() == v1beta1.StoreCluster {
				objs = append(objs, redisBuildAll(fleet)...)
			}
			for _, o := range objs {
				if sec, ok := o.(*corev1.Secret); ok {
					if !strings.Contains(string(sec.Data[resources.RedisUsersKey]), "user default off") {
						t.Errorf("users file without the default user off:\n%s", sec.Data[resources.RedisUsersKey])
					}
					continue
				}
				doc := string(renderYAML(t, []client.Object{o}))
				for _, pw := range []string{testPasswords.Limiter, testPasswords.Operator, testPasswords.Replication} {
					if strings.Contains(doc, pw) {
						t.Errorf("%T %s holds a password", o, o.GetName())
					}
				}
				var pod *corev1.PodTemplateSpec
				if d, ok := o.(*appsv1.Deployment); ok {
					pod = &d.Spec.Template
				}
				if s, ok := o.(*appsv1.StatefulSet); ok {
					pod = &s.Spec.Template
				}
				if pod == nil {
					continue
				}
				for _, c := range pod.Spec.Containers {
					fromSecret := map[string]bool{}
					for _, e := range c.Env {
						if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
							fromSecret[e.Name] = true
						}
						if strings.Contains(strings.ToLower(e.Name), "password") && e.Value != "" {
							t.Errorf("%s container %s: env %s has a literal value", o.GetName(), c.Name, e.Name)
						}
					}
					for _, a := range append(slices.Clone(c.Command), c.Args...) {
						for name := range fromSecret {
							if strings.Contains(a, "$("+name+")") {
								t.Errorf("%s container %s: argument %q expands Secret env var %s into the process's argv", o.GetName(), c.Name, a, name)
							}
						}
						if strings.Contains(a, "requirepass") || strings.Contains(a, "masterauth") {
							t.Errorf("%s container %s: argument %q", o.GetName(), c.Name, a)
						}
					}
				}
			}
		})
	}
}

// TestRedisStatefulSet checks per shard: names, selector, pod count,
// anti-affinity, the data volume (PVC or emptyDir), the users file mounted
// from the auth Secret, and the limiters' password from its Secret.
func TestRedisStatefulSet(t *testing.T) {
	withAuth := resFleet("ns", "f", resCluster(func(f *v1alpha1.LimiterFleet) {
		f.Spec.Redis.ReplicasPerShard = ptr.To[int32](2)
		f.Spec.Redis.Auth = &v1alpha1.RedisAuth{SecretName: "redis-auth"}
		f.Spec.Redis.Storage = &v1alpha1.RedisStorage{Size: resource.MustParse("1Gi")}
	}))
	set := resources.BuildRedisStatefulSet(withAuth, 2, "", resources.RedisSecretHashes{Auth: "hash1"})
	if set.Name != "f-redis-2" || *set.Spec.Replicas != 3 || set.Spec.ServiceName != "f-redis" {
		t.Errorf("name %s replicas %d service %s", set.Name, *set.Spec.Replicas, set.Spec.ServiceName)
	}
	sel := set.Spec.Selector.MatchLabels
	if sel[resources.LabelRedisShard] != "2" || !subsetOf(sel, set.Spec.Template.Labels) {
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
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
			t.Errorf("Redis env %s is not the pod's name or IP", e.Name)
		}
	}
	if args := strings.Join(c.Args, " "); args != "/etc/redis/redis.conf --cluster-announce-ip $(POD_IP) --cluster-announce-hostname $(POD_NAME).f-redis.ns.svc" {
		t.Errorf("args %q", args)
	}
	var auth *corev1.SecretVolumeSource
	for _, v := range set.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			auth = v.Secret
		}
	}
	if auth == nil || auth.SecretName != "f-redis-auth" || len(auth.Items) != 1 || auth.Items[0].Key != resources.RedisUsersKey || *auth.DefaultMode != 0o440 {
		t.Errorf("auth volume %+v: want f-redis-auth's users.conf alone, mode 0440", auth)
	}
	if h := set.Spec.Template.Annotations[resources.RedisAuthHashAnnotation]; h != "hash1" {
		t.Errorf("auth hash annotation %q", h)
	}
	limiterEnv := func(f *v1beta1.LimiterFleet) string {
		var out []string
		for _, e := range resources.BuildLimiterDeployment(f, resources.LimiterDeploymentOptions{DefaultImage: "limiter:test", StoreURL: "x"}).Spec.Template.Spec.Containers[0].Env {
			if e.ValueFrom != nil {
				out = append(out, e.Name+"<-"+e.ValueFrom.SecretKeyRef.Name+"/"+e.ValueFrom.SecretKeyRef.Key)
			} else {
				out = append(out, e.Name+"="+e.Value)
			}
		}
		return strings.Join(out, " ")
	}
	if env := limiterEnv(withAuth); env != "SLUICE_REDIS_USERNAME=sluice-limiter SLUICE_REDIS_PASSWORD<-redis-auth/password GOMEMLIMIT=241591860" {
		t.Errorf("limiter env with redis.auth: %s", env)
	}
	generated := resFleet("ns", "f", resCluster())
	if env := limiterEnv(generated); env != "SLUICE_REDIS_USERNAME=sluice-limiter SLUICE_REDIS_PASSWORD<-f-redis-auth/limiter-password GOMEMLIMIT=241591860" {
		t.Errorf("limiter env without redis.auth: %s", env)
	}

	noStorage := resources.BuildRedisStatefulSet(generated, 0, "", resources.RedisSecretHashes{Auth: "hash1"})
	if len(noStorage.Spec.VolumeClaimTemplates) != 0 || noStorage.Spec.Template.Spec.Volumes[0].EmptyDir == nil {
		t.Errorf("without storage: claims %v volumes %+v", noStorage.Spec.VolumeClaimTemplates, noStorage.Spec.Template.Spec.Volumes)
	}
	if *noStorage.Spec.Replicas != 2 {
		t.Errorf("default replicasPerShard: %d pods, want 2", *noStorage.Spec.Replicas)
	}

	// The image: the fleet's, else the operator's --redis-image, else redis:7.2.
	mirrored := resFleet("ns", "f", resCluster(func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Image = ptr.To("own/redis:7.4") }))
	for _, tc := range []struct {
		fleet          *v1beta1.LimiterFleet
		operator, want string
	}{
		{resFleet("ns", "f", resCluster()), "", v1beta1.DefaultRedisImage},
		{resFleet("ns", "f", resCluster()), "mirror.example/redis:7.2", "mirror.example/redis:7.2"},
		{mirrored, "mirror.example/redis:7.2", "own/redis:7.4"},
	} {
		if got := resources.BuildRedisStatefulSet(tc.fleet, 0, tc.operator, resources.RedisSecretHashes{Auth: "hash1"}).Spec.Template.Spec.Containers[0].Image; got != tc.want {
			t.Errorf("spec.store.cluster.image or %s, operator's %q: image %s, want %s", tc.fleet.Spec.EffectiveRedisImage(), tc.operator, got, tc.want)
		}
	}

	// A node timeout change rolls the pods: the config hash changes.
	slow := resources.BuildRedisStatefulSet(resFleet("ns", "f", resCluster(func(f *v1alpha1.LimiterFleet) {
		f.Spec.Redis.NodeTimeout = &metav1.Duration{Duration: 10 * time.Second}
	})), 0, "", resources.RedisSecretHashes{Auth: "hash1"})
	if a, b := noStorage.Spec.Template.Annotations[resources.RedisConfigHashAnnotation], slow.Spec.Template.Annotations[resources.RedisConfigHashAnnotation]; a == b || a == "" {
		t.Errorf("config hash %q and %q: want a change", a, b)
	}
}

// TestRedisUsersConf: the users file turns the default user off, gives
// each user its rules and the SHA-256 of its password (never the password
// itself), and makes replicas authenticate as the replication user.
func TestRedisUsersConf(t *testing.T) {
	conf := resources.RedisUsersConf(testPasswords)
	for _, pw := range []string{testPasswords.Limiter, testPasswords.Operator} {
		if strings.Contains(conf, pw) {
			t.Errorf("users file holds a password in clear:\n%s", conf)
		}
	}
	hash := func(pw string) string { s := sha256.Sum256([]byte(pw)); return "#" + hex.EncodeToString(s[:]) }
	for _, want := range []string{
		"user default off resetpass resetkeys resetchannels -@all\n",
		"user sluice-limiter on resetpass " + hash(testPasswords.Limiter) + " " + redisstore.ACLRules("") + "\n",
		"user sluice-operator on resetpass " + hash(testPasswords.Operator) + " " + rediscluster.OperatorACLRules() + "\n",
		"user sluice-replication on resetpass " + hash(testPasswords.Replication) + " " + rediscluster.ReplicaACLRules() + "\n",
		"masteruser sluice-replication\n",
		"masterauth " + testPasswords.Replication + "\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("users file lacks %q:\n%s", want, conf)
		}
	}
	// The limiters' password is in the Secret only when generated.
	gen := resources.BuildRedisAuthSecret(resFleet("ns", "f", resCluster()), testPasswords)
	byo := resources.BuildRedisAuthSecret(resFleet("ns", "f", resCluster(func(f *v1alpha1.LimiterFleet) {
		f.Spec.Redis.Auth = &v1alpha1.RedisAuth{SecretName: "mine"}
	})), testPasswords)
	if _, ok := gen.Data[resources.RedisLimiterPasswordKey]; !ok || gen.Name != "f-redis-auth" {
		t.Errorf("generated: %s keys %v", gen.Name, slices.Collect(maps.Keys(gen.Data)))
	}
	if _, ok := byo.Data[resources.RedisLimiterPasswordKey]; ok {
		t.Errorf("with redis.auth the limiters' password is the user's Secret's, not copied")
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
	if n := resources.RedisShardName(f, last); len(n) > 52 {
		t.Errorf("StatefulSet %s is %d characters, want at most 52", n, len(n))
	}
	pod := resources.RedisShardName(f, last) + "-5"
	for _, name := range []string{resources.RedisName(f), pod, resources.RedisShardName(f, last)} {
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Errorf("%s: %v", name, errs)
		}
	}
	pdb := resources.BuildRedisPDB(f, last)
	if pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.Selector.MatchLabels[resources.LabelRedisShard] != "99" {
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

// TestRedisLimiterAuthHash shows what rolls the limiters: their pod
// template carries a hash that changes with their password and with
// nothing a tenant can read a password back from.
func TestRedisLimiterAuthHash(t *testing.T) {
	f := resFleet("ns", "f", resCluster())
	hash := func(pw resources.RedisPasswords) string {
		return redisfleet.RedisLimiterAuthHash(resources.BuildRedisAuthSecret(f, pw))
	}
	base := hash(testPasswords)
	if base == "" || base != hash(testPasswords) {
		t.Fatalf("hash %q is not deterministic", base)
	}
	newLimiter, newReplication := testPasswords, testPasswords
	newLimiter.Limiter = "limiter-pw-rotated-0123456789abcdef012345678"
	newReplication.Replication = "replication-pw-rotated-0123456789abcdef012"
	if hash(newLimiter) == base {
		t.Error("a new limiter password keeps the hash: the limiters would keep the old one")
	}
	if hash(newReplication) != base {
		t.Error("a new replication password changes the limiters' hash: they would roll for nothing")
	}
	// Keyed by the operator's password, so that a Deployment reader can't
	// test guesses against it: neither the password nor its plain SHA-256
	// (the users file's) appears in it.
	sum := sha256.Sum256([]byte(testPasswords.Limiter))
	if strings.Contains(hex.EncodeToString(sum[:]), base) || strings.Contains(testPasswords.Limiter, base) {
		t.Errorf("hash %q is a piece of the password's SHA-256", base)
	}
	if got := redisfleet.RedisLimiterAuthHash(&corev1.Secret{}); got != "" {
		t.Errorf("a Secret without a users file: %q", got)
	}

	d := resources.BuildLimiterDeployment(f, resources.LimiterDeploymentOptions{DefaultImage: "limiter:test", StoreURL: "redis-cluster://x", RedisAuth: base})
	if got := d.Spec.Template.Annotations[resources.RedisLimiterAuthAnnotation]; got != base {
		t.Errorf("pod template annotation %q, want %q", got, base)
	}
	if d := resources.BuildLimiterDeployment(f, resources.LimiterDeploymentOptions{DefaultImage: "limiter:test", StoreURL: "memory"}); len(d.Spec.Template.Annotations) != 0 {
		t.Errorf("no hash, yet annotations %v", d.Spec.Template.Annotations)
	}
}
