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
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

func tlsCluster(f *v1alpha1.LimiterFleet) { f.Spec.Redis.TLS = &v1alpha1.RedisTLS{} }

// TestRedisTLSBuilders: with spec.redis.tls, redis.conf serves TLS only,
// clients, replication and the bus, with the mounted Secret's files; the
// pods mount the TLS Secret with its hash on their template; the limiters
// dial rediss-cluster:// and verify the Service's name with the CA
// certificate alone, never the key beside it. Without tls, none of it.
func TestRedisTLSBuilders(t *testing.T) {
	fleet := resFleet("ns", "f", resCluster(tlsCluster))
	conf := resources.RedisConfig(fleet)
	for _, line := range []string{"port 0", "tls-port 6379", "tls-cert-file /etc/redis-tls/tls.crt", "tls-key-file /etc/redis-tls/tls.key",
		"tls-ca-cert-file /etc/redis-tls/ca.crt", "tls-auth-clients optional", "tls-replication yes", "tls-cluster yes"} {
		if !strings.Contains(conf, line+"\n") {
			t.Errorf("redis.conf lacks %q:\n%s", line, conf)
		}
	}
	if plain := resources.RedisConfig(resFleet("ns", "f", resCluster())); strings.Contains(plain, "tls-") || !strings.HasPrefix(plain, "port 6379\n") {
		t.Errorf("redis.conf without tls:\n%s", plain)
	}

	set := resources.BuildRedisStatefulSet(fleet, 0, "", resources.RedisSecretHashes{Auth: "a", TLS: "t1"})
	var tlsVol *corev1.SecretVolumeSource
	for _, v := range set.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "f-redis-tls" {
			tlsVol = v.Secret
		}
	}
	if tlsVol == nil || *tlsVol.DefaultMode != 0o440 {
		t.Errorf("volumes %+v: want f-redis-tls, mode 0440", set.Spec.Template.Spec.Volumes)
	}
	mounted := false
	for _, m := range set.Spec.Template.Spec.Containers[0].VolumeMounts {
		mounted = mounted || (m.MountPath == "/etc/redis-tls" && m.ReadOnly)
	}
	if !mounted {
		t.Errorf("no read-only mount at /etc/redis-tls: %+v", set.Spec.Template.Spec.Containers[0].VolumeMounts)
	}
	renewed := resources.BuildRedisStatefulSet(fleet, 0, "", resources.RedisSecretHashes{Auth: "a", TLS: "t2"})
	if a, b := set.Spec.Template.Annotations[resources.RedisTLSHashAnnotation], renewed.Spec.Template.Annotations[resources.RedisTLSHashAnnotation]; a != "t1" || b != "t2" {
		t.Errorf("TLS hash annotations %q, %q: a new certificate must roll the pods", a, b)
	}
	if _, ok := resources.BuildRedisStatefulSet(resFleet("ns", "f", resCluster()), 0, "", resources.RedisSecretHashes{Auth: "a"}).Spec.Template.Annotations[resources.RedisTLSHashAnnotation]; ok {
		t.Error("a TLS hash annotation without tls")
	}

	url, err := resources.StoreURL(fleet)
	if err != nil || url != "rediss-cluster://f-redis-0-0.f-redis.ns.svc:6379,f-redis-1-0.f-redis.ns.svc:6379,f-redis-2-0.f-redis.ns.svc:6379,"+
		"f-redis-0-1.f-redis.ns.svc:6379,f-redis-1-1.f-redis.ns.svc:6379,f-redis-2-1.f-redis.ns.svc:6379" {
		t.Errorf("store URL %q, %v", url, err)
	}
	dep := resources.BuildLimiterDeployment(fleet, resources.LimiterDeploymentOptions{DefaultImage: "limiter:test", StoreURL: url})
	args := strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " ")
	for _, want := range []string{"--redis-ca-file=/etc/sluice/redis-ca/ca.crt", "--redis-tls-server-name=f-redis.ns.svc"} {
		if !strings.Contains(args, want) {
			t.Errorf("limiter args %q lack %s", args, want)
		}
	}
	vols := dep.Spec.Template.Spec.Volumes
	if len(vols) != 2 || vols[0].Secret == nil || vols[0].Secret.SecretName != "f-redis-tls" ||
		len(vols[0].Secret.Items) != 1 || vols[0].Secret.Items[0].Key != "ca.crt" {
		t.Errorf("limiter volumes %+v: want ca.crt of f-redis-tls alone, then the admin TLS", vols)
	}
}
