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

package v1alpha1

import (
	"time"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// Defaults and bounds of a LimiterFleetSpec: v1beta1's (see
// v1beta1/limiterfleet_defaults.go). The CRD markers in limiterfleet_types.go
// repeat these values; the CRD tests keep the two in step.
const (
	DefaultFleetReplicas      = v1beta1.DefaultFleetReplicas
	MaxFleetReplicas          = v1beta1.MaxFleetReplicas
	DefaultEnforcement        = EnforcementEnabled
	DefaultRedisMode          = RedisNone
	DefaultShards             = v1beta1.DefaultShards
	MinShards                 = v1beta1.MinShards
	MaxShards                 = v1beta1.MaxShards
	DefaultReplicasPerShard   = v1beta1.DefaultReplicasPerShard
	MaxReplicasPerShard       = v1beta1.MaxReplicasPerShard
	MaxRedisAddresses         = v1beta1.MaxRedisAddresses
	DefaultRedisNodeTimeout   = v1beta1.DefaultRedisNodeTimeout
	DefaultRedisImage         = v1beta1.DefaultRedisImage
	DefaultRedisAuthKey       = v1beta1.DefaultRedisAuthKey
	MaxFleetNameLength        = v1beta1.MaxFleetNameLength
	MaxClusterFleetNameLength = v1beta1.MaxClusterFleetNameLength
)

// The helpers below apply the defaults to fields that are nil. The API server
// fills in replicas, enforcement and redis.mode, but not the Cluster-only
// fields, whose defaults apply only in Cluster mode.

// EffectiveReplicas returns replicas, or 2 when unset.
func (s *LimiterFleetSpec) EffectiveReplicas() int32 {
	if s.Replicas == nil {
		return DefaultFleetReplicas
	}
	return *s.Replicas
}

// EffectiveEnforcement returns enforcement, or Enabled when unset.
func (s *LimiterFleetSpec) EffectiveEnforcement() EnforcementMode {
	if s.Enforcement == nil || *s.Enforcement == "" {
		return DefaultEnforcement
	}
	return *s.Enforcement
}

// EffectiveRedisMode returns redis.mode, or None when unset.
func (s *LimiterFleetSpec) EffectiveRedisMode() RedisMode {
	if s.Redis.Mode == nil || *s.Redis.Mode == "" {
		return DefaultRedisMode
	}
	return *s.Redis.Mode
}

// EffectiveShards returns redis.shards, or 3 when unset. Only Cluster mode
// uses it.
func (s *LimiterFleetSpec) EffectiveShards() int32 {
	if s.Redis.Shards == nil {
		return DefaultShards
	}
	return *s.Redis.Shards
}

// EffectiveReplicasPerShard returns redis.replicasPerShard, or 1 when unset.
// Only Cluster mode uses it.
func (s *LimiterFleetSpec) EffectiveReplicasPerShard() int32 {
	if s.Redis.ReplicasPerShard == nil {
		return DefaultReplicasPerShard
	}
	return *s.Redis.ReplicasPerShard
}

// RedisIsCluster reports whether an External Redis is a Redis Cluster: when
// redis.cluster says so, or, when it is unset, when there are several
// addresses.
func (s *LimiterFleetSpec) RedisIsCluster() bool {
	if s.Redis.Cluster != nil {
		return *s.Redis.Cluster
	}
	return len(s.Redis.Addresses) > 1
}

// EffectiveNodeTimeout returns redis.nodeTimeout, or 2s when unset. Only
// Cluster mode uses it.
func (s *LimiterFleetSpec) EffectiveNodeTimeout() time.Duration {
	if s.Redis.NodeTimeout == nil || s.Redis.NodeTimeout.Duration <= 0 {
		return DefaultRedisNodeTimeout
	}
	return s.Redis.NodeTimeout.Duration
}

// EffectiveRedisImage returns redis.image, or redis:7.2 when unset (the
// operator's default when it has no --redis-image). Only Cluster mode uses
// it.
func (s *LimiterFleetSpec) EffectiveRedisImage() string {
	if s.Redis.Image == nil || *s.Redis.Image == "" {
		return DefaultRedisImage
	}
	return *s.Redis.Image
}

// EffectiveAuthKey returns redis.auth.key, or "password" when unset; "" when
// there is no auth.
func (s *LimiterFleetSpec) EffectiveAuthKey() string {
	switch {
	case s.Redis.Auth == nil:
		return ""
	case s.Redis.Auth.Key == "":
		return DefaultRedisAuthKey
	}
	return s.Redis.Auth.Key
}

// DefaultRedisCAKey is the key of redis.tls's CA certificates in their Secret.
const DefaultRedisCAKey = v1beta1.DefaultRedisCAKey

// EffectiveCAKey returns redis.tls.caKey, or "ca.crt" when unset; "" when
// there is no CA Secret. It is the key External fleets verify Redis with;
// a Cluster fleet's CA Secret holds tls.crt and tls.key instead.
func (s *LimiterFleetSpec) EffectiveCAKey() string {
	switch {
	case s.Redis.TLS == nil || s.Redis.TLS.CASecretName == nil:
		return ""
	case s.Redis.TLS.CAKey == nil:
		return DefaultRedisCAKey
	}
	return *s.Redis.TLS.CAKey
}
