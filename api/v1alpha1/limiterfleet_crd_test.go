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
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// baseFleet is a valid fleet with nothing set; each case fills in what it needs.
func baseFleet(name string) *v1alpha1.LimiterFleet {
	return &v1alpha1.LimiterFleet{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "LimiterFleet"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}
}

// fleetBadCase is a fleet the API server must reject. typed changes the Go
// object; raw then changes the whole object as JSON, for values the Go types
// cannot hold or omit.
type fleetBadCase struct {
	name  string
	typed func(f *v1alpha1.LimiterFleet)
	raw   func(obj map[string]any)
	// field is the path the API server names, and message a substring of
	// its message for that field.
	field   string
	message string
}

func external(addrs ...string) v1alpha1.RedisSpec {
	return v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisExternal), Addresses: addrs}
}

func clusterMode() v1alpha1.RedisSpec {
	return v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisCluster)}
}

func addresses(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("redis-%d.cache.svc:6379", i)
	}
	return out
}

func rawRedis(obj map[string]any) map[string]any {
	spec, ok := obj["spec"].(map[string]any)
	if !ok {
		spec = map[string]any{}
		obj["spec"] = spec
	}
	redis, ok := spec["redis"].(map[string]any)
	if !ok {
		redis = map[string]any{}
		spec["redis"] = redis
	}
	return redis
}

// rootField is what the API server names for a rule on the whole object: a
// CEL rule on the root cannot point its fieldPath into metadata.
const rootField = "<nil>"

const (
	nameMessage         = "metadata.name must be a DNS label of at most 46 characters that starts with a letter"
	addressMessage      = "each address must be host:port with a port from 1 to 65535"
	onlyExternalAddress = "spec.redis.addresses applies only when spec.redis.mode is External"
)

var fleetBadCases = []fleetBadCase{
	{
		name: "Cluster name longer than 43",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Name = strings.Repeat("f", v1alpha1.MaxClusterFleetNameLength+1)
			f.Spec.Redis = clusterMode()
		},
		field:   rootField,
		message: "metadata.name must be at most 43 characters when spec.redis.mode is Cluster",
	},
	// metadata.name prefixes the names of the fleet's objects.
	{
		name:    "name longer than 46",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Name = strings.Repeat("f", v1alpha1.MaxFleetNameLength+1) },
		field:   rootField,
		message: nameMessage,
	},
	{
		name:    "name starting with a digit",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Name = "1fleet" },
		field:   rootField,
		message: nameMessage,
	},
	{
		name:    "name with a dot",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Name = "fleet.one" },
		field:   rootField,
		message: nameMessage,
	},

	// replicas, enforcement, image
	{
		name:    "replicas negative",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Replicas = ptr.To[int32](-1) },
		field:   "spec.replicas",
		message: "should be greater than or equal to 0",
	},
	{
		name:    "replicas above 100",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Replicas = ptr.To(v1alpha1.MaxFleetReplicas + 1) },
		field:   "spec.replicas",
		message: "should be less than or equal to 100",
	},
	{
		name:    "unknown enforcement",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Enforcement = ptr.To(v1alpha1.EnforcementMode("Off")) },
		field:   "spec.enforcement",
		message: `Unsupported value: "Off": supported values: "Enabled", "Disabled"`,
	},
	{
		name:    "empty image",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Image = ptr.To("") },
		field:   "spec.image",
		message: "should be at least 1 chars long",
	},
	{
		name:    "image too long",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Image = ptr.To(strings.Repeat("i", 513)) },
		field:   "spec.image",
		message: "may not be more than 512 bytes",
	},

	// redis.mode
	{
		name:    "unknown redis mode",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Mode = ptr.To(v1alpha1.RedisMode("Sentinel")) },
		field:   "spec.redis.mode",
		message: `Unsupported value: "Sentinel": supported values: "Cluster", "External", "None"`,
	},

	// redis.addresses
	{
		name:    "External without addresses",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Redis = external() },
		field:   "spec.redis.addresses",
		message: "spec.redis.addresses is required when spec.redis.mode is External",
	},
	{
		name:    "External with an empty address list",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Redis = external() },
		raw:     func(obj map[string]any) { rawRedis(obj)["addresses"] = []any{} },
		field:   "spec.redis.addresses",
		message: "should have at least 1 items",
	},
	{
		name:    "addresses with mode omitted (None)",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Addresses = []string{"redis:6379"} },
		field:   "spec.redis.addresses",
		message: onlyExternalAddress,
	},
	{
		name: "addresses with None",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = external("redis:6379")
			f.Spec.Redis.Mode = ptr.To(v1alpha1.RedisNone)
		},
		field:   "spec.redis.addresses",
		message: onlyExternalAddress,
	},
	{
		name: "addresses with Cluster",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.Addresses = []string{"redis:6379"}
		},
		field:   "spec.redis.addresses",
		message: onlyExternalAddress,
	},
	{
		name:    "17 addresses",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Redis = external(addresses(v1alpha1.MaxRedisAddresses + 1)...) },
		field:   "spec.redis.addresses",
		message: "must have at most 16 items",
	},
	{
		name:    "duplicate addresses",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Redis = external("redis:6379", "redis:6379") },
		field:   "spec.redis.addresses[1]",
		message: `Duplicate value: "redis:6379"`,
	},
	{
		name:    "address without port",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Redis = external("redis.cache.svc") },
		field:   "spec.redis.addresses",
		message: addressMessage,
	},
	{
		name:    "address with port 0",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Redis = external("redis:0") },
		field:   "spec.redis.addresses",
		message: addressMessage,
	},
	{
		name:    "address with port 65536",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Redis = external("redis:65536") },
		field:   "spec.redis.addresses",
		message: addressMessage,
	},
	{
		name:    "address as a URL",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Redis = external("redis://redis:6379") },
		field:   "spec.redis.addresses",
		message: addressMessage,
	},
	{
		name:    "address with credentials",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Redis = external("user:secret@redis:6379") },
		field:   "spec.redis.addresses",
		message: addressMessage,
	},
	{
		name:    "unbracketed IPv6 address",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Redis = external("fd00::1:6379") },
		field:   "spec.redis.addresses",
		message: addressMessage,
	},
	{
		name:    "one bad address among good ones",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Redis = external("redis-0:6379", "redis-1:6379/0") },
		field:   "spec.redis.addresses",
		message: addressMessage,
	},
	{
		name:    "address too long",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Redis = external(strings.Repeat("r", 257) + ":6379") },
		field:   "spec.redis.addresses[0]",
		message: "may not be more than 261 bytes",
	},

	// redis.cluster
	{
		name:    "cluster with mode omitted (None)",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Cluster = ptr.To(true) },
		field:   "spec.redis.cluster",
		message: "spec.redis.cluster applies only when spec.redis.mode is External",
	},
	{
		name: "cluster with Cluster mode",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.Cluster = ptr.To(false)
		},
		field:   "spec.redis.cluster",
		message: "spec.redis.cluster applies only when spec.redis.mode is External",
	},
	{
		name: "cluster false with two addresses",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = external("redis-0:6379", "redis-1:6379")
			f.Spec.Redis.Cluster = ptr.To(false)
		},
		field:   "spec.redis.addresses",
		message: "spec.redis.addresses must hold one address when spec.redis.cluster is false",
	},

	// Cluster-only fields
	{
		name:    "shards with mode omitted (None)",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Shards = ptr.To[int32](3) },
		field:   "spec.redis.shards",
		message: "spec.redis.shards applies only when spec.redis.mode is Cluster",
	},
	{
		name: "shards with External",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = external("redis:6379")
			f.Spec.Redis.Shards = ptr.To[int32](3)
		},
		field:   "spec.redis.shards",
		message: "spec.redis.shards applies only when spec.redis.mode is Cluster",
	},
	{
		name: "2 shards",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.Shards = ptr.To[int32](2)
		},
		field:   "spec.redis.shards",
		message: "spec.redis.shards must be at least 3: a Redis Cluster needs 3 primaries",
	},
	{
		name: "more than 100 shards",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.Shards = ptr.To(v1alpha1.MaxShards + 1)
		},
		field:   "spec.redis.shards",
		message: "should be less than or equal to 100",
	},
	{
		name:    "trustedProxies not a CIDR",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.TrustedProxies = []string{"10.0.0.0/8", "gateway.local"} },
		field:   "spec.trustedProxies",
		message: "each trusted proxy must be a CIDR such as 10.0.0.0/8 or an IP address",
	},
	{
		name:    "stats.topDescriptors above 20",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Stats = &v1alpha1.FleetStats{TopDescriptors: ptr.To[int32](21)} },
		field:   "spec.stats.topDescriptors",
		message: "should be less than or equal to 20",
	},
	{
		name: "stats.truncateTo above 16",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Stats = &v1alpha1.FleetStats{TopDescriptors: ptr.To[int32](5),
				DescriptorValues: ptr.To(v1alpha1.DescriptorValuesTruncate), TruncateTo: ptr.To[int32](17)}
		},
		field:   "spec.stats.truncateTo",
		message: "should be less than or equal to 16",
	},
	{
		name: "stats.truncateTo without Truncate",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Stats = &v1alpha1.FleetStats{TopDescriptors: ptr.To[int32](5), TruncateTo: ptr.To[int32](4)}
		},
		field:   "spec.stats.truncateTo",
		message: "spec.stats.truncateTo applies only when spec.stats.descriptorValues is Truncate",
	},
	{
		name: "tracing.endpoint with a path",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Tracing = &v1alpha1.FleetTracing{Endpoint: "http://otel:4317/v1/traces"}
		},
		field:   "spec.tracing.endpoint",
		message: "spec.tracing.endpoint must be http:// or https:// then host:port with a port from 1 to 65535 and nothing else",
	},
	{
		name: "tracing.endpoint with a password",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Tracing = &v1alpha1.FleetTracing{Endpoint: "https://user:secret@otel:4317"}
		},
		field:   "spec.tracing.endpoint",
		message: "spec.tracing.endpoint must be http:// or https:// then host:port with a port from 1 to 65535 and nothing else",
	},
	{
		name:    "tracing.endpoint without a port",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Tracing = &v1alpha1.FleetTracing{Endpoint: "http://otel"} },
		field:   "spec.tracing.endpoint",
		message: "spec.tracing.endpoint must be http:// or https:// then host:port with a port from 1 to 65535 and nothing else",
	},
	{
		name: "tracing.endpoint another scheme",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Tracing = &v1alpha1.FleetTracing{Endpoint: "unix:///var/run/otel.sock"}
		},
		field:   "spec.tracing.endpoint",
		message: "spec.tracing.endpoint must be http:// or https:// then host:port with a port from 1 to 65535 and nothing else",
	},
	{
		name: "tracing.endpoint too long",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Tracing = &v1alpha1.FleetTracing{Endpoint: "http://" + strings.Repeat("a", 250) + ":4317"}
		},
		field:   "spec.tracing.endpoint",
		message: "Too long: may not be more than 256 bytes",
	},
	{
		name: "tracing without endpoint",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Tracing = &v1alpha1.FleetTracing{SamplesPerMillion: ptr.To[int32](5)}
		},
		raw:     func(obj map[string]any) { delete(obj["spec"].(map[string]any)["tracing"].(map[string]any), "endpoint") },
		field:   "spec.tracing.endpoint",
		message: "Required value",
	},
	{
		name: "tracing.samplesPerMillion above a million",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Tracing = &v1alpha1.FleetTracing{Endpoint: "http://otel:4317", SamplesPerMillion: ptr.To[int32](1000001)}
		},
		field:   "spec.tracing.samplesPerMillion",
		message: "should be less than or equal to 1000000",
	},
	{
		name: "tracing.samplesPerMillion negative",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Tracing = &v1alpha1.FleetTracing{Endpoint: "http://otel:4317", SamplesPerMillion: ptr.To[int32](-1)}
		},
		field:   "spec.tracing.samplesPerMillion",
		message: "should be greater than or equal to 0",
	},
	{
		name: "stats.descriptorValues unknown",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Stats = &v1alpha1.FleetStats{DescriptorValues: ptr.To(v1alpha1.DescriptorValues("Plain"))}
		},
		field:   "spec.stats.descriptorValues",
		message: `supported values: "Hash", "Truncate"`,
	},
	{
		name: "replicasPerShard with External",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = external("redis:6379")
			f.Spec.Redis.ReplicasPerShard = ptr.To[int32](1)
		},
		field:   "spec.redis.replicasPerShard",
		message: "spec.redis.replicasPerShard applies only when spec.redis.mode is Cluster",
	},
	{
		name: "replicasPerShard negative",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.ReplicasPerShard = ptr.To[int32](-1)
		},
		field:   "spec.redis.replicasPerShard",
		message: "should be greater than or equal to 0",
	},
	{
		name: "replicasPerShard above 5",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.ReplicasPerShard = ptr.To(v1alpha1.MaxReplicasPerShard + 1)
		},
		field:   "spec.redis.replicasPerShard",
		message: "should be less than or equal to 5",
	},
	{
		name: "storage with None",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis.Mode = ptr.To(v1alpha1.RedisNone)
			f.Spec.Redis.Storage = &v1alpha1.RedisStorage{Size: resource.MustParse("1Gi")}
		},
		field:   "spec.redis.storage",
		message: "spec.redis.storage applies only when spec.redis.mode is Cluster",
	},
	{
		name: "storage without size",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.Storage = &v1alpha1.RedisStorage{Size: resource.MustParse("1Gi")}
		},
		raw:     func(obj map[string]any) { delete(rawRedis(obj)["storage"].(map[string]any), "size") },
		field:   "spec.redis.storage.size",
		message: "Required value",
	},
	{
		name: "storage size zero",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.Storage = &v1alpha1.RedisStorage{Size: resource.MustParse("0")}
		},
		field:   "spec.redis.storage.size",
		message: "spec.redis.storage.size must be greater than zero",
	},
	{
		name: "storage size negative",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.Storage = &v1alpha1.RedisStorage{Size: resource.MustParse("-1Gi")}
		},
		field:   "spec.redis.storage.size",
		message: "spec.redis.storage.size must be greater than zero",
	},
	{
		name: "storage size not a quantity",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.Storage = &v1alpha1.RedisStorage{Size: resource.MustParse("1Gi")}
		},
		raw:     func(obj map[string]any) { rawRedis(obj)["storage"].(map[string]any)["size"] = "lots" },
		field:   "spec.redis.storage.size",
		message: "spec.redis.storage.size must be a quantity such as 1Gi or 500Mi",
	},
	{
		name:    "nodeTimeout with mode omitted (None)",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.NodeTimeout = &metav1.Duration{Duration: 5 * time.Second} },
		field:   "spec.redis.nodeTimeout",
		message: "spec.redis.nodeTimeout applies only when spec.redis.mode is Cluster",
	},
	{
		name:    "nodeTimeout not a duration",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Redis = clusterMode() },
		raw:     func(obj map[string]any) { rawRedis(obj)["nodeTimeout"] = "fast" },
		field:   "spec.redis.nodeTimeout",
		message: "spec.redis.nodeTimeout must be a Go duration such as 5s or 1500ms",
	},
	{
		name: "nodeTimeout under 1s",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.NodeTimeout = &metav1.Duration{Duration: 500 * time.Millisecond}
		},
		field:   "spec.redis.nodeTimeout",
		message: "spec.redis.nodeTimeout must be between 1s and 60s",
	},
	{
		name: "nodeTimeout over 60s",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.NodeTimeout = &metav1.Duration{Duration: 2 * time.Minute}
		},
		field:   "spec.redis.nodeTimeout",
		message: "spec.redis.nodeTimeout must be between 1s and 60s",
	},
	{
		name: "auth with None",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisNone), Auth: &v1alpha1.RedisAuth{SecretName: "redis-auth"}}
		},
		field:   "spec.redis.auth",
		message: "spec.redis.auth applies only when spec.redis.mode is Cluster or External",
	},
	{
		name: "auth usernameKey with Cluster",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.Auth = &v1alpha1.RedisAuth{SecretName: "redis-auth", UsernameKey: ptr.To("user")}
		},
		field:   "spec.redis.auth.usernameKey",
		message: "spec.redis.auth.usernameKey applies only when spec.redis.mode is External",
	},
	{
		name: "auth usernameKey not a key",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = external("redis:6379")
			f.Spec.Redis.Auth = &v1alpha1.RedisAuth{SecretName: "redis-auth", UsernameKey: ptr.To("user name")}
		},
		field:   "spec.redis.auth.usernameKey",
		message: "spec.redis.auth.usernameKey must be a Secret key",
	},
	{
		name: "maxMemory with External",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = external("redis:6379")
			f.Spec.Redis.MaxMemory = ptr.To(resource.MustParse("400Mi"))
		},
		field:   "spec.redis.maxMemory",
		message: "spec.redis.maxMemory applies only when spec.redis.mode is Cluster",
	},
	{
		name: "maxMemory under 1Mi",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.MaxMemory = ptr.To(resource.MustParse("1023Ki"))
		},
		field:   "spec.redis.maxMemory",
		message: "spec.redis.maxMemory must be at least 1Mi",
	},
	{
		name:    "maxMemory not a quantity",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Redis = clusterMode() },
		raw:     func(obj map[string]any) { rawRedis(obj)["maxMemory"] = "lots" },
		field:   "spec.redis.maxMemory",
		message: "spec.redis.maxMemory",
	},
	{
		name: "tls with None",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisNone), TLS: &v1alpha1.RedisTLS{}}
		},
		field:   "spec.redis.tls",
		message: "spec.redis.tls applies only when spec.redis.mode is Cluster or External",
	},
	{
		name: "tls caKey with Cluster",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.TLS = &v1alpha1.RedisTLS{CASecretName: ptr.To("redis-ca"), CAKey: ptr.To("ca.crt")}
		},
		field:   "spec.redis.tls.caKey",
		message: "spec.redis.tls.caKey applies only when spec.redis.mode is External",
	},
	{
		name: "tls serverName with Cluster",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.TLS = &v1alpha1.RedisTLS{ServerName: ptr.To("redis.example.com")}
		},
		field:   "spec.redis.tls.serverName",
		message: "spec.redis.tls.serverName applies only when spec.redis.mode is External",
	},
	{
		name: "tls caSecretName not a name",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = external("redis:6379")
			f.Spec.Redis.TLS = &v1alpha1.RedisTLS{CASecretName: ptr.To("Redis_CA")}
		},
		field:   "spec.redis.tls.caSecretName",
		message: "spec.redis.tls.caSecretName must be a Secret name",
	},
	{
		name: "tls caKey not a key",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = external("redis:6379")
			f.Spec.Redis.TLS = &v1alpha1.RedisTLS{CASecretName: ptr.To("redis-ca"), CAKey: ptr.To("ca/crt")}
		},
		field:   "spec.redis.tls.caKey",
		message: "spec.redis.tls.caKey must be a Secret key",
	},
	{
		name: "tls serverName not a DNS name",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = external("redis:6379")
			f.Spec.Redis.TLS = &v1alpha1.RedisTLS{ServerName: ptr.To("redis example com")}
		},
		field:   "spec.redis.tls.serverName",
		message: "spec.redis.tls.serverName must be a DNS name",
	},
	{
		name: "auth without secretName",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.Auth = &v1alpha1.RedisAuth{SecretName: "redis-auth"}
		},
		raw:     func(obj map[string]any) { delete(rawRedis(obj)["auth"].(map[string]any), "secretName") },
		field:   "spec.redis.auth.secretName",
		message: "Required value",
	},
	{
		name: "auth secretName not a name",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.Auth = &v1alpha1.RedisAuth{SecretName: "Redis_Auth"}
		},
		field:   "spec.redis.auth.secretName",
		message: "spec.redis.auth.secretName must be a Secret name",
	},
	{
		name: "auth key not a key",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.Auth = &v1alpha1.RedisAuth{SecretName: "redis-auth", Key: "pass/word"}
		},
		field:   "spec.redis.auth.key",
		message: "spec.redis.auth.key must be a Secret key",
	},
	{
		name: "resources with External",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = external("redis:6379")
			f.Spec.Redis.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
		},
		field:   "spec.redis.resources",
		message: "spec.redis.resources applies only when spec.redis.mode is Cluster",
	},
	{
		name:    "image with None",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Image = ptr.To("redis:7.2") },
		field:   "spec.redis.image",
		message: "spec.redis.image applies only when spec.redis.mode is Cluster",
	},
	{
		name: "empty storageClassName",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.Storage = &v1alpha1.RedisStorage{Size: resource.MustParse("1Gi"), StorageClassName: ptr.To("")}
		},
		field:   "spec.redis.storage.storageClassName",
		message: "should be at least 1 chars long",
	},
}

// TestFleetCRDRejects shows the message of every schema and CEL rule of the
// LimiterFleet CRD.
func TestFleetCRDRejects(t *testing.T) {
	ns := createNamespace(t, "fleet-crd-rejects")
	for i, tc := range fleetBadCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := baseFleet(fmt.Sprintf("bad-%d", i))
			f.Namespace = ns
			if tc.typed != nil {
				tc.typed(f)
			}
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(f)
			if err != nil {
				t.Fatal(err)
			}
			if tc.raw != nil {
				tc.raw(obj)
			}
			err = k8sClient.Create(t.Context(), &unstructured.Unstructured{Object: obj})
			if err == nil {
				deleteAtCleanup(t, f)
			}
			requireCause(t, err, tc.field, tc.message)
		})
	}
}

// fleetGoodCase is a fleet at the edge of a rule, which the API server must
// accept. raw, when set, changes the object as JSON after typed.
type fleetGoodCase struct {
	name  string
	typed func(f *v1alpha1.LimiterFleet)
	raw   func(obj map[string]any)
}

var fleetGoodCases = []fleetGoodCase{
	{name: "empty spec, all defaults", typed: func(*v1alpha1.LimiterFleet) {}},
	{name: "no spec at all", typed: func(*v1alpha1.LimiterFleet) {}, raw: func(obj map[string]any) { delete(obj, "spec") }},
	{name: "longest name", typed: func(f *v1alpha1.LimiterFleet) { f.Name = strings.Repeat("f", v1alpha1.MaxFleetNameLength) }},
	{name: "zero replicas", typed: func(f *v1alpha1.LimiterFleet) { f.Spec.Replicas = ptr.To[int32](0) }},
	{name: "100 replicas", typed: func(f *v1alpha1.LimiterFleet) { f.Spec.Replicas = ptr.To(v1alpha1.MaxFleetReplicas) }},
	{name: "enforcement Disabled", typed: func(f *v1alpha1.LimiterFleet) { f.Spec.Enforcement = ptr.To(v1alpha1.EnforcementDisabled) }},
	{
		name: "External with auth, an ACL user and TLS",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = external("master.cache.example.com:6380")
			f.Spec.Redis.Auth = &v1alpha1.RedisAuth{SecretName: "redis-auth", Key: "token", UsernameKey: ptr.To("user")}
			f.Spec.Redis.TLS = &v1alpha1.RedisTLS{CASecretName: ptr.To("redis-ca"), CAKey: ptr.To("ca.pem"), ServerName: ptr.To("cache.example.com")}
		},
	},
	{
		name: "External with TLS and the image's CAs",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = external("a:6380", "b:6380")
			f.Spec.Redis.TLS = &v1alpha1.RedisTLS{}
		},
	},
	{name: "trusted proxies", typed: func(f *v1alpha1.LimiterFleet) {
		f.Spec.TrustedProxies = []string{"10.0.0.0/8", "192.168.1.7", "fd00::/8"}
	}},
	{
		name: "stats with truncated values",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Stats = &v1alpha1.FleetStats{TopDescriptors: ptr.To[int32](20),
				DescriptorValues: ptr.To(v1alpha1.DescriptorValuesTruncate), TruncateTo: ptr.To[int32](16)}
		},
	},
	{
		name: "tracing at the edges",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Tracing = &v1alpha1.FleetTracing{Endpoint: "https://[fd00::7]:65535", SamplesPerMillion: ptr.To[int32](1000000)}
		},
	},
	{
		name: "tracing at none",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Tracing = &v1alpha1.FleetTracing{Endpoint: "http://otel-collector.observability:1", SamplesPerMillion: ptr.To[int32](0)}
		},
	},
	{
		name: "selectors, image and resources",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.PolicySelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}
			f.Spec.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{"payments", "identity"},
			}}}
			f.Spec.Image = ptr.To("registry.example.com/sluice/limiter:v0.1.0@sha256:" + strings.Repeat("0", 64))
			f.Spec.Resources = &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
			}
		},
	},
	{
		name: "empty selectors",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.PolicySelector, f.Spec.NamespaceSelector = &metav1.LabelSelector{}, &metav1.LabelSelector{}
		},
	},
	{name: "explicit None", typed: func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Mode = ptr.To(v1alpha1.RedisNone) }},
	{name: "External, one server", typed: func(f *v1alpha1.LimiterFleet) { f.Spec.Redis = external("redis.cache.svc.cluster.local:6379") }},
	{
		name:  "External, 16 cluster seeds",
		typed: func(f *v1alpha1.LimiterFleet) { f.Spec.Redis = external(addresses(v1alpha1.MaxRedisAddresses)...) },
	},
	{
		name:  "External, IP addresses and edge ports",
		typed: func(f *v1alpha1.LimiterFleet) { f.Spec.Redis = external("10.0.0.1:1", "[fd00::1]:65535", "[::1]:6379") },
	},
	{
		name:  "External, longest address",
		typed: func(f *v1alpha1.LimiterFleet) { f.Spec.Redis = external(strings.Repeat("r", 256) + ":6379") },
	},
	{
		name: "External, one cluster seed",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = external("redis-cluster:6379")
			f.Spec.Redis.Cluster = ptr.To(true)
		},
	},
	{
		name: "External, cluster false with one address",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = external("redis:6379")
			f.Spec.Redis.Cluster = ptr.To(false)
		},
	},
	{name: "Cluster with defaults", typed: func(f *v1alpha1.LimiterFleet) { f.Spec.Redis = clusterMode() }},
	{
		name: "Cluster, longest name",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Name = strings.Repeat("c", v1alpha1.MaxClusterFleetNameLength)
			f.Spec.Redis = clusterMode()
		},
	},
	{
		name: "Cluster, smallest",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.Shards, f.Spec.Redis.ReplicasPerShard = ptr.To(v1alpha1.MinShards), ptr.To[int32](0)
		},
	},
	{
		name: "Cluster, largest, with storage",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.Shards, f.Spec.Redis.ReplicasPerShard = ptr.To(v1alpha1.MaxShards), ptr.To(v1alpha1.MaxReplicasPerShard)
			f.Spec.Redis.Storage = &v1alpha1.RedisStorage{Size: resource.MustParse("10Gi"), StorageClassName: ptr.To("fast-ssd")}
		},
	},
	{
		name: "Cluster, every option at its edge",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.NodeTimeout = &metav1.Duration{Duration: time.Second}
			f.Spec.Redis.Auth = &v1alpha1.RedisAuth{SecretName: "redis.auth-1", Key: "redis_password.v2"}
			f.Spec.Redis.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
			f.Spec.Redis.Image = ptr.To("registry.example.com/redis:7.2")
			f.Spec.Redis.MaxMemory = ptr.To(resource.MustParse("1Mi"))
		},
	},
	{
		name: "Cluster with TLS, the operator's CA or yours",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.TLS = &v1alpha1.RedisTLS{}
		},
	},
	{
		name: "Cluster with TLS from a CA Secret",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.TLS = &v1alpha1.RedisTLS{CASecretName: ptr.To("redis-ca")}
		},
	},
	{
		name: "Cluster, nodeTimeout 60s",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.NodeTimeout = &metav1.Duration{Duration: time.Minute}
		},
	},
}

// TestFleetCRDAccepts shows that the API server accepts fleets at the edge of
// each rule, and that it defaults exactly what the Effective helpers assume.
func TestFleetCRDAccepts(t *testing.T) {
	ns := createNamespace(t, "fleet-crd-accepts")
	for i, tc := range fleetGoodCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := baseFleet(fmt.Sprintf("good-%d", i))
			f.Namespace = ns
			tc.typed(f)
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(f)
			if err != nil {
				t.Fatal(err)
			}
			if tc.raw != nil {
				tc.raw(obj)
			}
			requireFleetAccepted(t, &unstructured.Unstructured{Object: obj}, f)
		})
	}
}

// TestFleetSampleAccepted applies the LimiterFleet sample.
func TestFleetSampleAccepted(t *testing.T) {
	for _, tc := range []struct {
		file     string
		replicas int32
	}{
		{"ratelimit_v1beta1_limiterfleet.yaml", 1},
		{filepath.Join("v1alpha1", "limiterfleet.yaml"), 1},
		{filepath.Join("redis-cluster", "limiterfleet.yaml"), 3},
		{filepath.Join("external-redis", "limiterfleet.yaml"), 3},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("..", "..", "config", "samples", tc.file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f := &v1alpha1.LimiterFleet{}
			if strings.Contains(string(data), "apiVersion: "+v1beta1.GroupVersion.String()) {
				// Created as v1alpha1, as the operator reads it.
				b := &v1beta1.LimiterFleet{}
				if err := yaml.UnmarshalStrict(data, b); err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				if err := f.ConvertFrom(b); err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				f.APIVersion, f.Kind = v1alpha1.GroupVersion.String(), b.Kind
			} else if err := yaml.UnmarshalStrict(data, f); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if f.APIVersion != v1alpha1.GroupVersion.String() || f.Kind != "LimiterFleet" {
				t.Fatalf("%s: unexpected %s %s", path, f.APIVersion, f.Kind)
			}
			createNamespace(t, f.Namespace)
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(f)
			if err != nil {
				t.Fatal(err)
			}
			got := requireFleetAccepted(t, &unstructured.Unstructured{Object: obj}, f)
			if got.Spec.EffectiveReplicas() != tc.replicas {
				t.Errorf("sample replicas = %d, want %d", got.Spec.EffectiveReplicas(), tc.replicas)
			}
		})
	}
}

// requireFleetAccepted creates obj, the unstructured form of f, and checks
// that the API server's defaults are those of withFleetDefaults and agree with
// the Effective helpers. It returns the fleet as created.
func requireFleetAccepted(t *testing.T, obj *unstructured.Unstructured, f *v1alpha1.LimiterFleet) *v1alpha1.LimiterFleet {
	t.Helper()
	ctx := t.Context()
	if err := k8sClient.Create(ctx, obj); err != nil {
		t.Fatalf("API server rejected the fleet: %v", err)
	}
	got := &v1alpha1.LimiterFleet{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, got); err != nil {
		t.Fatal(err)
	}
	deleteAtCleanup(t, got)

	want := withFleetDefaults(f.Spec)
	if diff := cmp.Diff(want, got.Spec); diff != "" {
		t.Errorf("API server defaults (-want +got):\n%s", diff)
	}
	in, out := f.Spec, got.Spec
	for _, c := range []struct {
		name    string
		in, out any
	}{
		{"EffectiveReplicas", in.EffectiveReplicas(), out.EffectiveReplicas()},
		{"EffectiveEnforcement", in.EffectiveEnforcement(), out.EffectiveEnforcement()},
		{"EffectiveRedisMode", in.EffectiveRedisMode(), out.EffectiveRedisMode()},
		{"EffectiveShards", in.EffectiveShards(), out.EffectiveShards()},
		{"EffectiveReplicasPerShard", in.EffectiveReplicasPerShard(), out.EffectiveReplicasPerShard()},
		{"RedisIsCluster", in.RedisIsCluster(), out.RedisIsCluster()},
		{"EffectiveNodeTimeout", in.EffectiveNodeTimeout(), out.EffectiveNodeTimeout()},
		{"EffectiveRedisImage", in.EffectiveRedisImage(), out.EffectiveRedisImage()},
		{"EffectiveAuthKey", in.EffectiveAuthKey(), out.EffectiveAuthKey()},
	} {
		if c.in != c.out {
			t.Errorf("%s: %v before the API server, %v after", c.name, c.in, c.out)
		}
	}
	return got
}

// withFleetDefaults is spec with the defaults the CRD declares: replicas 2,
// enforcement Enabled and redis.mode None. The Cluster-only fields have no
// schema default, since setting them outside Cluster mode is an error.
func withFleetDefaults(spec v1alpha1.LimiterFleetSpec) v1alpha1.LimiterFleetSpec {
	s := *spec.DeepCopy()
	if s.Replicas == nil {
		s.Replicas = ptr.To(v1alpha1.DefaultFleetReplicas)
	}
	if s.Enforcement == nil {
		s.Enforcement = ptr.To(v1alpha1.DefaultEnforcement)
	}
	if s.Redis.Mode == nil {
		s.Redis.Mode = ptr.To(v1alpha1.DefaultRedisMode)
	}
	if s.Redis.Auth != nil && s.Redis.Auth.Key == "" {
		s.Redis.Auth.Key = v1alpha1.DefaultRedisAuthKey
	}
	return s
}

// TestFleetEffectiveDefaults pins the Effective helpers on an empty spec, and
// shows that Cluster-only defaults are not written by the API server.
func TestFleetEffectiveDefaults(t *testing.T) {
	var s v1alpha1.LimiterFleetSpec
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"EffectiveReplicas", s.EffectiveReplicas(), int32(2)},
		{"EffectiveEnforcement", s.EffectiveEnforcement(), v1alpha1.EnforcementEnabled},
		{"EffectiveRedisMode", s.EffectiveRedisMode(), v1alpha1.RedisNone},
		{"EffectiveShards", s.EffectiveShards(), int32(3)},
		{"EffectiveReplicasPerShard", s.EffectiveReplicasPerShard(), int32(1)},
		{"RedisIsCluster", s.RedisIsCluster(), false},
		{"EffectiveNodeTimeout", s.EffectiveNodeTimeout(), 2 * time.Second},
		{"EffectiveRedisImage", s.EffectiveRedisImage(), "redis:7.2"},
		{"EffectiveAuthKey", s.EffectiveAuthKey(), ""},
	} {
		if c.got != c.want {
			t.Errorf("%s() = %v, want %v", c.name, c.got, c.want)
		}
	}
	for _, c := range []struct {
		redis v1alpha1.RedisSpec
		want  bool
	}{
		{external("a:1"), false},
		{external("a:1", "b:1"), true},
		{v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisExternal), Addresses: []string{"a:1"}, Cluster: ptr.To(true)}, true},
	} {
		s := v1alpha1.LimiterFleetSpec{Redis: c.redis}
		if got := s.RedisIsCluster(); got != c.want {
			t.Errorf("RedisIsCluster(%v) = %v, want %v", c.redis.Addresses, got, c.want)
		}
	}
}

// TestFleetStatusSubresource writes every status field through the status
// subresource and reads it back.
func TestFleetStatusSubresource(t *testing.T) {
	ctx := t.Context()
	f := baseFleet("with-status")
	f.Namespace = createNamespace(t, "fleet-crd-status")
	if err := k8sClient.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	deleteAtCleanup(t, f)

	now := metav1.NewTime(time.Now().Truncate(time.Second))
	f.Status = v1alpha1.LimiterFleetStatus{
		ObservedGeneration: f.Generation,
		Conditions: []metav1.Condition{
			{Type: v1beta1.ReadyCondition, Status: metav1.ConditionTrue, Reason: v1beta1.PodsSyncedReason, ObservedGeneration: f.Generation, LastTransitionTime: now},
			{Type: v1beta1.SnapshotSyncedCondition, Status: metav1.ConditionTrue, Reason: v1beta1.PodsSyncedReason, Message: "3/3 pods on snapshot 0123abcd", ObservedGeneration: f.Generation, LastTransitionTime: now},
			{Type: v1beta1.RedisReadyCondition, Status: metav1.ConditionTrue, Reason: v1beta1.RedisNotManagedReason, ObservedGeneration: f.Generation, LastTransitionTime: now},
		},
		Snapshot: &v1alpha1.SnapshotStatus{
			Version: "0123456789abcdef", Policies: 12, ConfigMapName: "with-status-snapshot", Bytes: 700_000, Compressed: true,
		},
		Limiters: &v1alpha1.LimitersStatus{Ready: 3, Synced: 3},
		Redis: &v1alpha1.RedisStatus{
			ClusterState: "ok", SlotsAssigned: 16384, Operation: "MigratingSlots",
			Primaries:   []v1alpha1.RedisNodeStatus{{Pod: "with-status-redis-0-0", Shard: 0, NodeID: strings.Repeat("a", 40), Address: "10.0.0.7:6379", Link: "connected", Slots: 16384}},
			Replicas:    []v1alpha1.RedisNodeStatus{{Pod: "with-status-redis-0-1", Shard: 0, NodeID: strings.Repeat("b", 40), Address: "10.0.0.8:6379", Link: "disconnected"}},
			Migration:   &v1alpha1.RedisMigration{Moves: []v1alpha1.RedisSlotMove{{First: 0, Last: 99, FromShard: 0, ToShard: 3}}},
			LastActions: []v1alpha1.RedisAction{{Time: now, Action: "CLUSTER MEET 10.0.0.8:6379 on with-status-redis-0-0"}},
			DataLoss:    "slots 0-99 of shard 0 were assigned afresh",
		},
	}
	want := f.Status.DeepCopy()
	if err := k8sClient.Status().Update(ctx, f); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.LimiterFleet{}
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(f), got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(*want, got.Status); diff != "" {
		t.Errorf("status after round trip (-want +got):\n%s", diff)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, v1beta1.ReadyCondition) {
		t.Errorf("Ready condition lost: %+v", got.Status.Conditions)
	}

	// Zero counts survive too: policies, ready and synced are required.
	got.Status.Snapshot = &v1alpha1.SnapshotStatus{Version: "fedcba9876543210", ConfigMapName: "with-status-snapshot"}
	got.Status.Limiters = &v1alpha1.LimitersStatus{}
	if err := k8sClient.Status().Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	again := &v1alpha1.LimiterFleet{}
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(f), again); err != nil {
		t.Fatal(err)
	}
	if again.Status.Limiters == nil || again.Status.Snapshot == nil || again.Status.Snapshot.Policies != 0 {
		t.Errorf("zero counts lost: %+v", again.Status)
	}
}

// TestFleetShardsScaleIn shows the transition rule on spec.redis.shards:
// raising is allowed, lowering (or unsetting above the default) is refused
// with a message that says why; leaving Cluster mode is allowed.
func TestFleetShardsScaleIn(t *testing.T) {
	ctx := t.Context()
	f := baseFleet("scale-in")
	f.Namespace = createNamespace(t, "fleet-crd-scale-in")
	f.Spec.Redis = clusterMode()
	f.Spec.Redis.Shards = ptr.To[int32](4)
	if err := k8sClient.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	deleteAtCleanup(t, f)
	update := func(change func(*v1alpha1.LimiterFleet)) error {
		got := &v1alpha1.LimiterFleet{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(f), got); err != nil {
			t.Fatal(err)
		}
		change(got)
		return k8sClient.Update(ctx, got)
	}
	const msg = "spec.redis.shards cannot be lowered: removing shards (scale-in) is not supported"
	requireCause(t, update(func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Shards = ptr.To[int32](3) }), "spec.redis.shards", msg)
	requireCause(t, update(func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Shards = nil }), "spec.redis.shards", msg)
	if err := update(func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Shards = ptr.To[int32](6) }); err != nil {
		t.Fatalf("raising shards: %v", err)
	}
	requireCause(t, update(func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Shards = ptr.To[int32](5) }), "spec.redis.shards",
		msg)
	const storageMsg = "spec.redis.storage cannot change while spec.redis.mode is Cluster"
	requireCause(t, update(func(f *v1alpha1.LimiterFleet) {
		f.Spec.Redis.Storage = &v1alpha1.RedisStorage{Size: resource.MustParse("1Gi")}
	}), "spec.redis.storage", storageMsg)
	if err := update(func(f *v1alpha1.LimiterFleet) { f.Spec.Redis = v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisNone)} }); err != nil {
		t.Fatalf("leaving Cluster mode: %v", err)
	}
}

// TestFleetStorageImmutable: a Cluster fleet's storage is fixed at creation.
func TestFleetStorageImmutable(t *testing.T) {
	ctx := t.Context()
	f := baseFleet("storage")
	f.Namespace = createNamespace(t, "fleet-crd-storage")
	f.Spec.Redis = clusterMode()
	f.Spec.Redis.Storage = &v1alpha1.RedisStorage{Size: resource.MustParse("1Gi")}
	if err := k8sClient.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	deleteAtCleanup(t, f)
	update := func(change func(*v1alpha1.LimiterFleet)) error {
		got := &v1alpha1.LimiterFleet{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(f), got); err != nil {
			t.Fatal(err)
		}
		change(got)
		return k8sClient.Update(ctx, got)
	}
	const msg = "spec.redis.storage cannot change while spec.redis.mode is Cluster"
	requireCause(t, update(func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Storage.Size = resource.MustParse("2Gi") }), "spec.redis.storage", msg)
	requireCause(t, update(func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Storage = nil }), "spec.redis.storage", msg)
	if err := update(func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.Shards = ptr.To[int32](4) }); err != nil {
		t.Fatalf("another change with storage unchanged: %v", err)
	}
}

// TestFleetTLSFixedInCluster: a Cluster fleet can't gain or lose
// spec.redis.tls, since nodes with and without TLS can't form one cluster;
// another CA Secret is a change it may make.
func TestFleetTLSFixedInCluster(t *testing.T) {
	ctx := t.Context()
	ns := createNamespace(t, "fleet-crd-tls")
	const msg = "spec.redis.tls cannot be added or removed while spec.redis.mode is Cluster"
	for _, tc := range []struct {
		name   string
		before *v1alpha1.RedisTLS
		change func(*v1alpha1.LimiterFleet)
	}{
		{"added", nil, func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.TLS = &v1alpha1.RedisTLS{} }},
		{"removed", &v1alpha1.RedisTLS{}, func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.TLS = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := baseFleet("tls-" + tc.name)
			f.Namespace = ns
			f.Spec.Redis = clusterMode()
			f.Spec.Redis.TLS = tc.before
			if err := k8sClient.Create(ctx, f); err != nil {
				t.Fatal(err)
			}
			deleteAtCleanup(t, f)
			got := &v1alpha1.LimiterFleet{}
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(f), got); err != nil {
				t.Fatal(err)
			}
			tc.change(got)
			requireCause(t, k8sClient.Update(ctx, got), "spec.redis.tls", msg)
		})
	}
	f := baseFleet("tls-ca")
	f.Namespace = ns
	f.Spec.Redis = clusterMode()
	f.Spec.Redis.TLS = &v1alpha1.RedisTLS{}
	if err := k8sClient.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	deleteAtCleanup(t, f)
	f.Spec.Redis.TLS.CASecretName = ptr.To("team-ca")
	if err := k8sClient.Update(ctx, f); err != nil {
		t.Errorf("another CA Secret: %v", err)
	}
	// Leaving mode Cluster drops TLS with it.
	f.Spec.Redis = v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisNone)}
	if err := k8sClient.Update(ctx, f); err != nil {
		t.Errorf("mode None without tls: %v", err)
	}
}
