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

package v1alpha1_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// TestFleetDefaultsAgree: the operator reads v1beta1 fleets, so v1beta1's
// Effective* must say of a converted spec what v1alpha1's said of it.
func TestFleetDefaultsAgree(t *testing.T) {
	cluster, external, none := ptr.To(v1alpha1.RedisCluster), ptr.To(v1alpha1.RedisExternal), ptr.To(v1alpha1.RedisNone)
	for name, a := range map[string]v1alpha1.LimiterFleetSpec{
		"empty":                   {},
		"none":                    {Replicas: ptr.To[int32](0), Enforcement: ptr.To(v1alpha1.EnforcementDisabled), Redis: v1alpha1.RedisSpec{Mode: none}},
		"cluster":                 {Redis: v1alpha1.RedisSpec{Mode: cluster}},
		"cluster, set":            {Replicas: ptr.To[int32](5), Redis: v1alpha1.RedisSpec{Mode: cluster, Shards: ptr.To[int32](7), ReplicasPerShard: ptr.To[int32](0), NodeTimeout: &metav1.Duration{Duration: 1500 * time.Millisecond}, Image: ptr.To("own/redis:7.4"), Auth: &v1alpha1.RedisAuth{SecretName: "s"}, TLS: &v1alpha1.RedisTLS{CASecretName: ptr.To("ca")}}},
		"external":                {Redis: v1alpha1.RedisSpec{Mode: external, Addresses: []string{"a:1"}}},
		"external, several":       {Redis: v1alpha1.RedisSpec{Mode: external, Addresses: []string{"a:1", "b:1"}, Auth: &v1alpha1.RedisAuth{SecretName: "s", Key: "k"}, TLS: &v1alpha1.RedisTLS{CASecretName: ptr.To("ca"), CAKey: ptr.To("c.pem")}}},
		"external, cluster false": {Redis: v1alpha1.RedisSpec{Mode: external, Addresses: []string{"a:1", "b:1"}, Cluster: ptr.To(false), TLS: &v1alpha1.RedisTLS{CASecretName: ptr.To("ca")}}},
	} {
		b, err := v1alpha1.FleetSpecToV1beta1(&a)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		type effective struct {
			replicas, shards, perShard int32
			enforcement                string
			mode                       string
			isCluster                  bool
			timeout                    time.Duration
			image, authKey, caKey      string
		}
		mode := map[v1alpha1.RedisMode]string{v1alpha1.RedisNone: "Memory", v1alpha1.RedisCluster: "Cluster", v1alpha1.RedisExternal: "External"}
		got := effective{b.EffectiveReplicas(), b.EffectiveShards(), b.EffectiveReplicasPerShard(), string(b.EffectiveEnforcement()),
			string(b.EffectiveStoreType()), b.RedisIsCluster(), b.EffectiveNodeTimeout(), b.EffectiveRedisImage(), b.EffectiveAuthKey(), b.EffectiveCAKey()}
		want := effective{a.EffectiveReplicas(), a.EffectiveShards(), a.EffectiveReplicasPerShard(), string(a.EffectiveEnforcement()),
			mode[a.EffectiveRedisMode()], a.RedisIsCluster(), a.EffectiveNodeTimeout(), a.EffectiveRedisImage(), a.EffectiveAuthKey(), a.EffectiveCAKey()}
		if a.EffectiveRedisMode() != v1alpha1.RedisExternal {
			want.caKey = "" // v1beta1 has a CA key for External stores only
		}
		if a.EffectiveRedisMode() == v1alpha1.RedisNone {
			want.isCluster = false
		}
		if got != want {
			t.Errorf("%s: v1beta1 says %+v, v1alpha1 %+v", name, got, want)
		}
	}
	if v1alpha1.DefaultRedisImage != v1beta1.DefaultRedisImage || v1alpha1.MaxShards != v1beta1.MaxShards {
		t.Error("v1alpha1 names other defaults than v1beta1")
	}
}
