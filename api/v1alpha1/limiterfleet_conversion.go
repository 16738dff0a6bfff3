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
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/conversion"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// This file converts LimiterFleet between v1alpha1 (this package, a spoke)
// and v1beta1 (the hub, the storage version), both ways without loss, as
// ratelimitpolicy_conversion.go does for policies and with the same
// annotations (see conversion_annotation.go for when one is believed).
// v1beta1 groups v1alpha1's flat fields: limiters (replicas, image,
// resources), policies (policySelector, namespaceSelector), dataPlane
// (clients, trustedProxies, forwardAuth), and store, a union on type that
// replaces redis.mode and the fields each mode allowed. The blocks whose
// shape did not change (domains, entries, tenantBudget, stats, tracing, the
// forward-auth mappings) are copied through JSON. The status is one type.

var _ conversion.Convertible = &LimiterFleet{}

// ConvertTo converts this LimiterFleet to the hub version, v1beta1.
func (src *LimiterFleet) ConvertTo(dstRaw conversion.Hub) error {
	dst, ok := dstRaw.(*v1beta1.LimiterFleet)
	if !ok {
		return fmt.Errorf("converting a v1alpha1 LimiterFleet to %T: only v1beta1 is the hub", dstRaw)
	}
	dst.ObjectMeta = *src.ObjectMeta.DeepCopy()
	spec, err := specToHub(&dst.ObjectMeta, &src.Spec, FleetSpecToV1beta1, FleetSpecFromV1beta1, fleetHubOnly)
	if err != nil {
		return err
	}
	dst.Spec = spec
	dst.Status = *src.Status.DeepCopy()
	return nil
}

// ConvertFrom converts the hub version, v1beta1, to this LimiterFleet.
func (dst *LimiterFleet) ConvertFrom(srcRaw conversion.Hub) error {
	src, ok := srcRaw.(*v1beta1.LimiterFleet)
	if !ok {
		return fmt.Errorf("converting %T to a v1alpha1 LimiterFleet: only v1beta1 is the hub", srcRaw)
	}
	dst.ObjectMeta = *src.ObjectMeta.DeepCopy()
	spec, err := specFromHub(&dst.ObjectMeta, &src.Spec, FleetSpecFromV1beta1, FleetSpecToV1beta1, fleetLeftToDefaults)
	if err != nil {
		return err
	}
	dst.Spec = spec
	dst.Status = *src.Status.DeepCopy()
	return nil
}

// fleetHubOnly copies what only a v1beta1 fleet says: its regions.
func fleetHubOnly(plain, stored *v1beta1.LimiterFleetSpec) {
	plain.Regions = stored.Regions.DeepCopy()
}

// FleetSpecToV1beta1 maps a v1alpha1 fleet spec to v1beta1 field for
// field. What a mode did not allow (an address on a Cluster fleet, which
// the v1alpha1 schema refuses) is dropped; ConvertTo keeps it in an
// annotation.
func FleetSpecToV1beta1(a *LimiterFleetSpec) (v1beta1.LimiterFleetSpec, error) {
	b := v1beta1.LimiterFleetSpec{
		Limiters:    v1beta1.FleetLimiters{Replicas: ptrCopy(a.Replicas), Image: ptrCopy(a.Image), Resources: a.Resources.DeepCopy()},
		Enforcement: (*v1beta1.EnforcementMode)(ptrCopy(a.Enforcement)),
	}
	if a.PolicySelector != nil || a.NamespaceSelector != nil {
		b.Policies = &v1beta1.PolicySelection{Selector: a.PolicySelector.DeepCopy(), NamespaceSelector: a.NamespaceSelector.DeepCopy()}
	}
	if len(a.Clients) > 0 || len(a.TrustedProxies) > 0 || len(a.ForwardAuth) > 0 {
		b.DataPlane = &v1beta1.DataPlane{TrustedProxies: append([]string(nil), a.TrustedProxies...)}
		if err := jsonCopy(a.Clients, &b.DataPlane.Clients); err != nil {
			return b, err
		}
		if err := jsonCopy(a.ForwardAuth, &b.DataPlane.ForwardAuth); err != nil {
			return b, err
		}
	}
	for _, c := range []struct{ from, to any }{
		{a.Domains, &b.Domains}, {a.Entries, &b.Entries}, {a.TenantBudget, &b.TenantBudget}, {a.Stats, &b.Stats}, {a.Tracing, &b.Tracing},
	} {
		if err := jsonCopy(c.from, c.to); err != nil {
			return b, err
		}
	}
	r := &a.Redis
	switch {
	case r.Mode != nil && *r.Mode == RedisCluster:
		b.Store.Type = v1beta1.StoreCluster
		c := v1beta1.ClusterStore{
			Shards: ptrCopy(r.Shards), ReplicasPerShard: ptrCopy(r.ReplicasPerShard), Resources: r.Resources.DeepCopy(),
			MaxMemory: quantityCopy(r.MaxMemory), Image: ptrCopy(r.Image), NodeTimeout: durationPtrToV1beta1(r.NodeTimeout),
		}
		if r.Storage != nil {
			c.Storage = &v1beta1.RedisStorage{Size: r.Storage.Size.DeepCopy(), StorageClassName: ptrCopy(r.Storage.StorageClassName)}
		}
		if r.Auth != nil {
			c.Auth = &v1beta1.SecretKeyRef{SecretName: r.Auth.SecretName, Key: r.Auth.Key}
		}
		if r.TLS != nil {
			c.TLS = &v1beta1.ClusterTLS{CASecretName: ptrCopy(r.TLS.CASecretName)}
		}
		if !equality.Semantic.DeepEqual(c, v1beta1.ClusterStore{}) {
			b.Store.Cluster = &c
		}
	case r.Mode != nil && *r.Mode == RedisExternal:
		b.Store.Type = v1beta1.StoreExternal
		e := &v1beta1.ExternalStore{Addresses: append([]string(nil), r.Addresses...), Cluster: ptrCopy(r.Cluster)}
		if r.Auth != nil {
			e.Auth = &v1beta1.ExternalAuth{SecretKeyRef: v1beta1.SecretKeyRef{SecretName: r.Auth.SecretName, Key: r.Auth.Key}, UsernameKey: ptrCopy(r.Auth.UsernameKey)}
		}
		if r.TLS != nil {
			e.TLS = &v1beta1.ExternalTLS{CASecretName: ptrCopy(r.TLS.CASecretName), CAKey: ptrCopy(r.TLS.CAKey), ServerName: ptrCopy(r.TLS.ServerName)}
		}
		b.Store.External = e
	default:
		b.Store.Type = v1beta1.StoreMemory
	}
	return b, nil
}

// FleetSpecFromV1beta1 maps a v1beta1 fleet spec to v1alpha1 field for
// field. It fails only on a nodeTimeout that does not parse, which the
// v1beta1 schema refuses.
func FleetSpecFromV1beta1(b *v1beta1.LimiterFleetSpec) (LimiterFleetSpec, error) {
	a := LimiterFleetSpec{
		Replicas:    ptrCopy(b.Limiters.Replicas),
		Image:       ptrCopy(b.Limiters.Image),
		Resources:   b.Limiters.Resources.DeepCopy(),
		Enforcement: (*EnforcementMode)(ptrCopy(b.Enforcement)),
	}
	if p := b.Policies; p != nil {
		a.PolicySelector, a.NamespaceSelector = p.Selector.DeepCopy(), p.NamespaceSelector.DeepCopy()
	}
	if d := b.DataPlane; d != nil {
		a.TrustedProxies = append([]string(nil), d.TrustedProxies...)
		if err := jsonCopy(d.Clients, &a.Clients); err != nil {
			return a, err
		}
		if err := jsonCopy(d.ForwardAuth, &a.ForwardAuth); err != nil {
			return a, err
		}
	}
	for _, c := range []struct{ from, to any }{
		{b.Domains, &a.Domains}, {b.Entries, &a.Entries}, {b.TenantBudget, &a.TenantBudget}, {b.Stats, &a.Stats}, {b.Tracing, &a.Tracing},
	} {
		if err := jsonCopy(c.from, c.to); err != nil {
			return a, err
		}
	}
	r := &a.Redis
	switch b.Store.Type {
	case v1beta1.StoreCluster:
		r.Mode = ptrTo(RedisCluster)
		if c := b.Store.Cluster; c != nil {
			r.Shards, r.ReplicasPerShard, r.Resources = ptrCopy(c.Shards), ptrCopy(c.ReplicasPerShard), c.Resources.DeepCopy()
			r.MaxMemory, r.Image = quantityCopy(c.MaxMemory), ptrCopy(c.Image)
			if c.NodeTimeout != nil {
				d, err := time.ParseDuration(string(*c.NodeTimeout))
				if err != nil {
					return a, fmt.Errorf("converting a v1beta1 LimiterFleet spec: spec.store.cluster.nodeTimeout: %w", err)
				}
				r.NodeTimeout = &metav1.Duration{Duration: d}
			}
			if c.Storage != nil {
				r.Storage = &RedisStorage{Size: c.Storage.Size.DeepCopy(), StorageClassName: ptrCopy(c.Storage.StorageClassName)}
			}
			if c.Auth != nil {
				r.Auth = &RedisAuth{SecretName: c.Auth.SecretName, Key: c.Auth.Key}
			}
			if c.TLS != nil {
				r.TLS = &RedisTLS{CASecretName: ptrCopy(c.TLS.CASecretName)}
			}
		}
	case v1beta1.StoreExternal:
		r.Mode = ptrTo(RedisExternal)
		if e := b.Store.External; e != nil {
			r.Addresses, r.Cluster = append([]string(nil), e.Addresses...), ptrCopy(e.Cluster)
			if e.Auth != nil {
				r.Auth = &RedisAuth{SecretName: e.Auth.SecretName, Key: e.Auth.Key, UsernameKey: ptrCopy(e.Auth.UsernameKey)}
			}
			if e.TLS != nil {
				r.TLS = &RedisTLS{CASecretName: ptrCopy(e.TLS.CASecretName), CAKey: ptrCopy(e.TLS.CAKey), ServerName: ptrCopy(e.TLS.ServerName)}
			}
		}
	default:
		r.Mode = ptrTo(RedisNone)
	}
	return a, nil
}

func quantityCopy(q *resource.Quantity) *resource.Quantity {
	if q == nil {
		return nil
	}
	c := q.DeepCopy()
	return &c
}

// jsonCopy copies between the versions' blocks of the same shape.
func jsonCopy(from, to any) error {
	data, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, to)
}
