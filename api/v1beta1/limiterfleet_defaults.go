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

package v1beta1

import "time"

// Defaults and bounds of a LimiterFleetSpec. The CRD markers in
// limiterfleet_types.go repeat these values; the CRD tests keep the two in
// step. v1alpha1 names the same values.
const (
	DefaultFleetReplicas    int32 = 2
	MaxFleetReplicas        int32 = 100
	DefaultEnforcement            = EnforcementEnabled
	DefaultStoreType              = StoreMemory
	DefaultShards           int32 = 3
	MinShards               int32 = 3
	MaxShards               int32 = 100
	DefaultReplicasPerShard int32 = 1
	MaxReplicasPerShard     int32 = 5
	MaxRedisAddresses             = 16
	DefaultRedisNodeTimeout       = 2 * time.Second
	DefaultRedisImage             = "redis:7.2"
	DefaultRedisAuthKey           = "password"
	// DefaultRedisCAKey is the key of the CA certificates in an External
	// store's tls.caSecretName.
	DefaultRedisCAKey = "ca.crt"
	// MaxFleetNameLength keeps "<name>-redis" a valid StatefulSet name
	// (52 characters, so that its pods' controller-revision-hash label fits
	// in 63) and "<name>-limiter" a valid Service name.
	MaxFleetNameLength = 46
	// MaxClusterFleetNameLength does the same for "<name>-redis-<shard>",
	// the StatefulSet of each Redis shard, up to shard 99.
	MaxClusterFleetNameLength = 43
)

// The helpers below apply the defaults to fields that are nil. The API server
// fills in limiters.replicas, enforcement and store.type, but not the
// Cluster-only fields, whose defaults apply only to a Cluster store.

// EffectiveReplicas returns limiters.replicas, or 2 when unset.
func (s *LimiterFleetSpec) EffectiveReplicas() int32 {
	if s.Limiters.Replicas == nil {
		return DefaultFleetReplicas
	}
	return *s.Limiters.Replicas
}

// EffectiveEnforcement returns enforcement, or Enabled when unset.
func (s *LimiterFleetSpec) EffectiveEnforcement() EnforcementMode {
	if s.Enforcement == nil || *s.Enforcement == "" {
		return DefaultEnforcement
	}
	return *s.Enforcement
}

// EffectiveStoreType returns store.type, or Memory when unset.
func (s *LimiterFleetSpec) EffectiveStoreType() StoreType {
	if s.Store.Type == "" {
		return DefaultStoreType
	}
	return s.Store.Type
}

// cluster returns store.cluster, or an empty one when unset.
func (s *LimiterFleetSpec) cluster() *ClusterStore {
	if s.Store.Cluster == nil {
		return &ClusterStore{}
	}
	return s.Store.Cluster
}

// EffectiveShards returns store.cluster.shards, or 3 when unset. Only a
// Cluster store uses it.
func (s *LimiterFleetSpec) EffectiveShards() int32 {
	if c := s.cluster(); c.Shards != nil {
		return *c.Shards
	}
	return DefaultShards
}

// EffectiveReplicasPerShard returns store.cluster.replicasPerShard, or 1
// when unset. Only a Cluster store uses it.
func (s *LimiterFleetSpec) EffectiveReplicasPerShard() int32 {
	if c := s.cluster(); c.ReplicasPerShard != nil {
		return *c.ReplicasPerShard
	}
	return DefaultReplicasPerShard
}

// RedisIsCluster reports whether an External store is a Redis Cluster: when
// store.external.cluster says so, or, when it is unset, when there are
// several addresses.
func (s *LimiterFleetSpec) RedisIsCluster() bool {
	e := s.Store.External
	switch {
	case e == nil:
		return false
	case e.Cluster != nil:
		return *e.Cluster
	}
	return len(e.Addresses) > 1
}

// EffectiveNodeTimeout returns store.cluster.nodeTimeout, or 2s when unset
// (or when it does not parse, which the schema refuses). Only a Cluster
// store uses it.
func (s *LimiterFleetSpec) EffectiveNodeTimeout() time.Duration {
	c := s.cluster()
	if c.NodeTimeout == nil {
		return DefaultRedisNodeTimeout
	}
	d, err := time.ParseDuration(string(*c.NodeTimeout))
	if err != nil || d <= 0 {
		return DefaultRedisNodeTimeout
	}
	return d
}

// EffectiveRedisImage returns store.cluster.image, or redis:7.2 when unset
// (the operator's default when it has no --redis-image). Only a Cluster
// store uses it.
func (s *LimiterFleetSpec) EffectiveRedisImage() string {
	if c := s.cluster(); c.Image != nil && *c.Image != "" {
		return *c.Image
	}
	return DefaultRedisImage
}

// RedisAuth returns the Secret key reference of the store's password:
// store.cluster.auth or store.external.auth, nil when there is none.
func (s *LimiterFleetSpec) RedisAuth() *SecretKeyRef {
	switch s.EffectiveStoreType() {
	case StoreCluster:
		return s.cluster().Auth
	case StoreExternal:
		if e := s.Store.External; e != nil && e.Auth != nil {
			return &e.Auth.SecretKeyRef
		}
	}
	return nil
}

// EffectiveAuthKey returns the store's auth key, or "password" when unset;
// "" when there is no auth.
func (s *LimiterFleetSpec) EffectiveAuthKey() string {
	a := s.RedisAuth()
	switch {
	case a == nil:
		return ""
	case a.Key == "":
		return DefaultRedisAuthKey
	}
	return a.Key
}

// EffectiveCAKey returns store.external.tls.caKey, or "ca.crt" when unset;
// "" when there is no CA Secret. It is the key External fleets verify Redis
// with; a Cluster fleet's CA Secret holds tls.crt and tls.key instead.
func (s *LimiterFleetSpec) EffectiveCAKey() string {
	e := s.Store.External
	switch {
	case s.EffectiveStoreType() != StoreExternal || e == nil || e.TLS == nil || e.TLS.CASecretName == nil:
		return ""
	case e.TLS.CAKey == nil:
		return DefaultRedisCAKey
	}
	return *e.TLS.CAKey
}
