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

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EnforcementMode is a fleet's kill switch.
// +kubebuilder:validation:Enum=Enabled;Disabled
type EnforcementMode string

const (
	// EnforcementEnabled enforces the fleet's policies.
	EnforcementEnabled EnforcementMode = "Enabled"
	// EnforcementDisabled allows every request. Limiters still evaluate the
	// policies and count would-be denials, so turning enforcement back on
	// holds no surprises.
	EnforcementDisabled EnforcementMode = "Disabled"
)

// StoreType says where a fleet keeps its counters.
// +kubebuilder:validation:Enum=Memory;Cluster;External
type StoreType string

const (
	// StoreMemory keeps counters in each limiter pod's memory: every pod
	// enforces the full limit on the requests it sees (v1alpha1's redis
	// mode None).
	StoreMemory StoreType = "Memory"
	// StoreCluster is a Redis Cluster that the operator provisions and
	// heals (store.cluster).
	StoreCluster StoreType = "Cluster"
	// StoreExternal is a Redis server or Redis Cluster run by someone else
	// (store.external).
	StoreExternal StoreType = "External"
)

// LimiterFleetSpec is a fleet of limiter pods, the policies they enforce,
// who may call them, and the store they count in. Related fields are
// grouped: the pods (limiters), the policies they serve (policies, domains,
// entries, tenantBudget), their callers (dataPlane) and their counters
// (store, a union on store.type).
type LimiterFleetSpec struct {
	// limiters are the limiter pods: how many, their image and resources.
	// Every field has a default.
	// +optional
	// +kubebuilder:default={}
	Limiters FleetLimiters `json:"limiters,omitempty"`

	// enforcement is the kill switch: Enabled enforces the policies, Disabled
	// allows every request while limiters still count would-be denials.
	// Limiters pick a change up without a restart. Defaults to Enabled.
	// +optional
	// +kubebuilder:default=Enabled
	Enforcement *EnforcementMode `json:"enforcement,omitempty"`

	// policies selects the RateLimitPolicies the fleet enforces, by their
	// labels and their namespaces' labels. When omitted, the fleet selects
	// every policy of every namespace (that domains admits).
	// +optional
	Policies *PolicySelection `json:"policies,omitempty"`

	// domains are the rate limit domains the fleet serves, each with the
	// namespaces whose RateLimitPolicies may use it: a policy is served only
	// when its domain is listed here and its namespace is allowed for it.
	// When empty, the fleet serves the policies of its own namespace only,
	// in any domain. Tenants who may write policies can't write fleets, so
	// this is where a platform team says which team owns which domain. At
	// most 64, with unique names.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Domains []FleetDomain `json:"domains,omitempty"`

	// entries names the descriptor entries that steer the limiters (lease,
	// idempotency, priority, accept) once for every domain the fleet
	// serves; v1beta1 policies name none of them. See FleetEntries.
	// +optional
	Entries *FleetEntries `json:"entries,omitempty"`

	// tenantBudget is what each namespace's policies may cost the fleet:
	// how many policies and bytes of the snapshot, how many policies one
	// request may match, and how many store calls per second each limiter
	// pod makes for it; with overrides for some namespaces. Unset fields
	// take safe defaults, so every namespace has a budget even when this is
	// omitted.
	// +optional
	TenantBudget *TenantBudgets `json:"tenantBudget,omitempty"`

	// dataPlane is who may call the limiters on their data ports and what
	// forward-auth believes of them: the clients the NetworkPolicy admits,
	// the proxies whose forwarding headers count, and the forward-auth
	// mappings.
	// +optional
	DataPlane *DataPlane `json:"dataPlane,omitempty"`

	// store is where the limiters keep their counters: type Memory (the
	// default, each pod in its own memory), Cluster (a Redis Cluster the
	// operator runs, configured by cluster) or External (your Redis, at
	// external).
	// +optional
	// +kubebuilder:default={type: Memory}
	Store Store `json:"store,omitempty"`

	// stats configures what the limiters report beyond decision counts.
	// +optional
	Stats *FleetStats `json:"stats,omitempty"`
	// tracing makes the limiters export OpenTelemetry traces of their
	// decisions over OTLP/gRPC: a share of decisions (samplesPerMillion), one
	// span each with a child per store call, to a collector at endpoint. The
	// operator renders it into the limiter pods' --tracing and
	// --trace-sample-ratio flags and their OTEL_* environment, and lets the
	// pods reach the endpoint's port through their NetworkPolicy. When
	// omitted, tracing is off and costs nothing.
	// +optional
	Tracing *FleetTracing `json:"tracing,omitempty"`

	// regions places the fleet in one of several regions that share the
	// policies of scope Global: this region's name, the token peers present
	// here, and the other regions' endpoints and credentials. Omitted: the
	// fleet is its own only region and counts every limit in its store.
	// +optional
	Regions *FleetRegions `json:"regions,omitempty"`
}

// FleetLimiters are a fleet's limiter pods.
type FleetLimiters struct {
	// replicas is the number of limiter pods, from 0 to 100. Defaults to 2.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Replicas *int32 `json:"replicas,omitempty"`

	// image is the limiter container image, such as
	// "ghcr.io/sluice-dev/sluice-limiter:v0.1.0". Defaults to the image the
	// operator was started with (its --limiter-image flag). At most 512
	// characters.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image *string `json:"image,omitempty"`

	// resources are the compute resources of each limiter container. Defaults
	// to requests of 100m CPU and 64Mi memory and a 256Mi memory limit.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// PolicySelection selects the RateLimitPolicies a fleet enforces.
type PolicySelection struct {
	// selector selects policies by their labels. When omitted or empty,
	// every policy of the selected namespaces.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// namespaceSelector selects, by their labels, the namespaces whose
	// policies the fleet enforces. When omitted or empty, every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}

// DataPlane is who may call a fleet's limiters on their data ports (Envoy
// RLS gRPC, the HTTP check, forward-auth and the status peek).
type DataPlane struct {
	// clients are the pods that may call the limiters on their data ports:
	// the operator renders a NetworkPolicy that admits them alone. Unset or
	// empty: the pods of the fleet's namespace. At most 16.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Clients []FleetClient `json:"clients,omitempty"`

	// trustedProxies are the CIDRs or addresses of the gateways whose
	// X-Forwarded-For and X-Real-IP forward-auth believes when it reads a
	// client IP, such as "10.0.0.0/8". Without them, the client IP of a
	// forward-auth call is the caller's own address. At most 32.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.all(p, isCIDR(p) || isIP(p))",message="each trusted proxy must be a CIDR such as 10.0.0.0/8 or an IP address"
	TrustedProxies []string `json:"trustedProxies,omitempty"`

	// forwardAuth maps the forward-auth calls of gateways (nginx
	// auth_request, Traefik ForwardAuth) to descriptors, one entry per
	// domain. The limiters serve each at /v1/forward-auth/{domain}. At most
	// 64 domains.
	// +optional
	// +listType=map
	// +listMapKey=domain
	// +kubebuilder:validation:MaxItems=64
	ForwardAuth []ForwardAuth `json:"forwardAuth,omitempty"`
}

// DescriptorValues says how reported descriptor values are shown.
// +kubebuilder:validation:Enum=Hash;Truncate
type DescriptorValues string

const (
	// DescriptorValuesHash shows 12 hex digits of each value's SHA-256.
	DescriptorValuesHash DescriptorValues = "Hash"
	// DescriptorValuesTruncate shows the first truncateTo bytes of each value.
	DescriptorValuesTruncate DescriptorValues = "Truncate"
)

// FleetStats configures the limiters' reports.
// +kubebuilder:validation:XValidation:rule="!has(self.truncateTo) || (has(self.descriptorValues) && self.descriptorValues == 'Truncate')",message="spec.stats.truncateTo applies only when spec.stats.descriptorValues is Truncate",fieldPath=".truncateTo"
type FleetStats struct {
	// topDescriptors is how many of each policy's most requested descriptor
	// values (per minute) the limiters report, into the policy's
	// status.enforcement.hottest, from 0 to 20. 0, the default, reports none:
	// values such as user IDs, API keys or client IPs may be personal data.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=20
	TopDescriptors *int32 `json:"topDescriptors,omitempty"`

	// descriptorValues is how reported values are shown: Hash (the default),
	// 16 hex digits of each value's HMAC-SHA-256 under a key the operator
	// keeps in a Secret of the fleet, which nobody can reverse without the
	// key; or Truncate, the value's first truncateTo bytes.
	// +optional
	DescriptorValues *DescriptorValues `json:"descriptorValues,omitempty"`

	// truncateTo is the bytes of each value that Truncate keeps, from 1 to 16,
	// so that whole API keys are never shown. Defaults to 8.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	TruncateTo *int32 `json:"truncateTo,omitempty"`
}

// FleetTracing is where and how much a fleet's limiters trace.
type FleetTracing struct {
	// endpoint is the OTLP/gRPC endpoint of the collector that receives the
	// spans, a URL with a scheme, a host and a port and nothing else, such
	// as "http://otel-collector.observability:4317". http sends them in
	// plain text, https over TLS verified against the image's CAs. It
	// carries no user or password. At most 256 characters.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://([a-zA-Z0-9]([-a-zA-Z0-9.]*[a-zA-Z0-9])?|[[][0-9a-fA-F:.]+[]]):(6553[0-5]|655[0-2][0-9]|65[0-4][0-9][0-9]|6[0-4][0-9][0-9][0-9]|[1-5][0-9][0-9][0-9][0-9]|[1-9][0-9]{0,3})$')",message="spec.tracing.endpoint must be http:// or https:// then host:port with a port from 1 to 65535 and nothing else, such as http://otel-collector.observability:4317"
	Endpoint string `json:"endpoint"`

	// samplesPerMillion is how many decisions in a million are traced, from
	// 0 to 1000000 (all), drawn by each limiter whatever the caller's
	// traceparent says. Defaults to 10000 (1%).
	// +optional
	// +kubebuilder:default=10000
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	SamplesPerMillion *int32 `json:"samplesPerMillion,omitempty"`
}

// Store is where a fleet keeps its counters, a union on type: Memory has
// no member, Cluster may set cluster (every field has a default), External
// must set external.
// +kubebuilder:validation:XValidation:rule="self.type == 'External' ? has(self.external) : !has(self.external)",message="spec.store.external is required when spec.store.type is External, and only allowed then",fieldPath=".external"
// +kubebuilder:validation:XValidation:rule="self.type == 'Cluster' || !has(self.cluster)",message="spec.store.cluster applies only when spec.store.type is Cluster",fieldPath=".cluster"
// +kubebuilder:validation:XValidation:rule="oldSelf.type != 'Cluster' || self.type != 'Cluster' || (has(self.cluster) && has(self.cluster.shards) ? self.cluster.shards : 3) >= (has(oldSelf.cluster) && has(oldSelf.cluster.shards) ? oldSelf.cluster.shards : 3)",message="spec.store.cluster.shards cannot be lowered: removing shards (scale-in) is not supported, since it would drop the slots they serve; set it back to its previous value",fieldPath=".cluster.shards",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="oldSelf.type != 'Cluster' || self.type != 'Cluster' || ((has(self.cluster) && has(self.cluster.storage)) == (has(oldSelf.cluster) && has(oldSelf.cluster.storage)) && (!has(self.cluster) || !has(self.cluster.storage) || self.cluster.storage == oldSelf.cluster.storage))",message="spec.store.cluster.storage cannot change while spec.store.type is Cluster: the StatefulSets' volume claims are immutable",fieldPath=".cluster.storage",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="oldSelf.type != 'Cluster' || self.type != 'Cluster' || (has(self.cluster) && has(self.cluster.tls)) == (has(oldSelf.cluster) && has(oldSelf.cluster.tls))",message="spec.store.cluster.tls cannot be added or removed while spec.store.type is Cluster: nodes with and without TLS can't form one cluster; create another fleet",fieldPath=".cluster.tls",reason=FieldValueForbidden
type Store struct {
	// type is where counters live: Memory keeps them in each pod's memory,
	// so every pod enforces the full limit on what it sees; Cluster is a
	// Redis Cluster that the operator provisions and heals; External is a
	// Redis server or cluster run by someone else. Defaults to Memory.
	// +optional
	// +kubebuilder:default=Memory
	Type StoreType `json:"type,omitempty"`

	// cluster configures the operator's Redis Cluster. Only for type
	// Cluster, where every field has a default.
	// +optional
	Cluster *ClusterStore `json:"cluster,omitempty"`

	// external is your Redis. Required for type External, and only allowed
	// then.
	// +optional
	External *ExternalStore `json:"external,omitempty"`
}

// ClusterStore is the Redis Cluster the operator provisions and heals.
type ClusterStore struct {
	// shards is the number of primaries, from 3 to 100. Defaults to 3.
	// +optional
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:validation:XValidation:rule="self >= 3",message="spec.store.cluster.shards must be at least 3: a Redis Cluster needs 3 primaries"
	Shards *int32 `json:"shards,omitempty"`

	// replicasPerShard is the number of replicas of each primary, from 0 to
	// 5. Defaults to 1.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=5
	ReplicasPerShard *int32 `json:"replicasPerShard,omitempty"`

	// storage makes each Redis node keep its data on a PersistentVolumeClaim.
	// When omitted, nodes use an emptyDir and a restarted node resyncs from
	// its shard. It can't change while the type stays Cluster.
	// +optional
	Storage *RedisStorage `json:"storage,omitempty"`

	// nodeTimeout is the cluster-node-timeout, from 1s to 60s: how long a
	// primary may not answer before its replica takes over. Defaults to 2s,
	// which fails over within about 5s of a node's loss; longer is more
	// patient with a slow network or a stalled node, at the cost of as
	// many more seconds of failed decisions when one is lost.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('60s')",message="spec.store.cluster.nodeTimeout must be between 1s and 60s"
	NodeTimeout *Duration `json:"nodeTimeout,omitempty"`

	// auth is the password of the limiters' ACL user, sluice-limiter, from a
	// Secret in the fleet's namespace: the operator reads it to render the
	// nodes' users, and the limiters get it as an environment variable,
	// never in their arguments. Without it, the operator generates the
	// password into the Secret <fleet>-redis-auth that it owns and that
	// also holds the passwords of its own user and the replicas'.
	// +optional
	Auth *SecretKeyRef `json:"auth,omitempty"`

	// tls makes the cluster serve clients, replication and the cluster bus
	// over TLS only, with a certificate the operator issues from a CA it
	// creates (the Secret <fleet>-redis-ca) or from yours (caSecretName),
	// keeps in the Secret <fleet>-redis-tls and renews 30 days before it
	// expires; the limiters and the operator verify it. It can't be added
	// or removed while the type stays Cluster.
	// +optional
	TLS *ClusterTLS `json:"tls,omitempty"`

	// resources are the compute resources of each Redis container. Defaults
	// to requests of 100m CPU and 128Mi memory and a 512Mi memory limit.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// maxMemory is the maxmemory of each Redis node, such as "400Mi": the
	// data it may hold before it evicts the counters least recently used
	// (maxmemory-policy allkeys-lru). Defaults to 75% of the Redis
	// container's memory limit, which leaves room for what maxmemory does
	// not count (replication and client buffers, the copy-on-write pages of
	// an append-only file rewrite); with no memory limit and no maxMemory, a
	// node is unbounded. Keep it well below the memory limit, or the kernel
	// kills Redis before it evicts.
	// +optional
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self))",message="spec.store.cluster.maxMemory must be a quantity such as 400Mi"
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || quantity(string(self)).compareTo(quantity('1Mi')) >= 0",message="spec.store.cluster.maxMemory must be at least 1Mi"
	MaxMemory *resource.Quantity `json:"maxMemory,omitempty"`

	// image is the Redis container image, version 7.0 or later, such as
	// "redis:7.2". Defaults to the operator's Redis image (its
	// --redis-image, the chart's redis.image; redis:7.2 unless set). At most
	// 512 characters.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image *string `json:"image,omitempty"`
}

// ExternalStore is a Redis server or Redis Cluster run by someone else.
// +kubebuilder:validation:XValidation:rule="!has(self.cluster) || self.cluster || size(self.addresses) <= 1",message="spec.store.external.addresses must hold one address when spec.store.external.cluster is false",fieldPath=".addresses"
type ExternalStore struct {
	// addresses are the host:port addresses of your Redis, such as
	// "redis.cache.svc:6379" or "[fd00::1]:6379": one server, or seed nodes
	// of a Redis Cluster. 1 to 16 unique addresses of at most 261
	// characters. More than one address means a Redis Cluster.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=3
	// +kubebuilder:validation:items:MaxLength=261
	// +kubebuilder:validation:XValidation:rule="self.all(a, a.matches('^([a-zA-Z0-9]([-a-zA-Z0-9.]*[a-zA-Z0-9])?|[[][0-9a-fA-F:.]+[]]):(6553[0-5]|655[0-2][0-9]|65[0-4][0-9][0-9]|6[0-4][0-9][0-9][0-9]|[1-5][0-9][0-9][0-9][0-9]|[1-9][0-9]{0,3})$'))",message="each address must be host:port with a port from 1 to 65535, such as redis.cache.svc:6379 or [fd00::1]:6379"
	Addresses []string `json:"addresses"`

	// cluster, when true, says that addresses are seed nodes of a Redis
	// Cluster rather than one server. Defaults to true when there are
	// several addresses and to false for one.
	// +optional
	Cluster *bool `json:"cluster,omitempty"`

	// auth is the password of your Redis, from a Secret in the fleet's
	// namespace, with an optional ACL user (usernameKey). The limiters get
	// it as an environment variable; the operator does not read it.
	// +optional
	Auth *ExternalAuth `json:"auth,omitempty"`

	// tls connects the limiters over TLS (rediss://), verifying your
	// Redis's certificates.
	// +optional
	TLS *ExternalTLS `json:"tls,omitempty"`
}

// SecretKeyRef names a key of a Secret in the fleet's namespace.
type SecretKeyRef struct {
	// secretName is the name of a Secret in the fleet's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="secretName must be a Secret name: lower-case letters, digits, '-' and '.'"
	SecretName string `json:"secretName"`

	// key is the key of the password in the Secret. Defaults to "password".
	// +optional
	// +kubebuilder:default=password
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[-._a-zA-Z0-9]+$')",message="key must be a Secret key: letters, digits, '-', '_' and '.'"
	Key string `json:"key,omitempty"`
}

// ExternalAuth is the password, and optionally the ACL user, of an
// external Redis.
type ExternalAuth struct {
	SecretKeyRef `json:",inline"`

	// usernameKey is the key of a Redis ACL user name in the same Secret,
	// for a Redis that authenticates users (AUTH user password). Unset: the
	// default user.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[-._a-zA-Z0-9]+$')",message="usernameKey must be a Secret key: letters, digits, '-', '_' and '.'"
	UsernameKey *string `json:"usernameKey,omitempty"`
}

// ClusterTLS is TLS in the operator's Redis Cluster.
type ClusterTLS struct {
	// caSecretName names a Secret in the fleet's namespace that holds the
	// CA the operator signs the nodes' certificates with, as tls.crt and
	// tls.key (a kubernetes.io/tls Secret, such as a cert-manager CA's).
	// Unset: the operator creates one, <fleet>-redis-ca.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="caSecretName must be a Secret name: lower-case letters, digits, '-' and '.'"
	CASecretName *string `json:"caSecretName,omitempty"`
}

// ExternalTLS is TLS to an external Redis, verifying its certificates.
type ExternalTLS struct {
	// caSecretName names a Secret in the fleet's namespace whose caKey holds
	// the PEM CA certificates that sign the Redis servers' certificates.
	// Unset: the CA certificates of the limiter image.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="caSecretName must be a Secret name: lower-case letters, digits, '-' and '.'"
	CASecretName *string `json:"caSecretName,omitempty"`

	// caKey is the key of the CA certificates in that Secret. Defaults to
	// "ca.crt", as cert-manager writes it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[-._a-zA-Z0-9]+$')",message="caKey must be a Secret key: letters, digits, '-', '_' and '.'"
	CAKey *string `json:"caKey,omitempty"`

	// serverName is the name the servers' certificates must carry, when it
	// is not the host of each address (a Redis Cluster redirects to node
	// IPs, which certificates seldom name).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-zA-Z0-9]([-a-zA-Z0-9.]*[a-zA-Z0-9])?$')",message="serverName must be a DNS name such as redis.example.com"
	ServerName *string `json:"serverName,omitempty"`
}

// RedisStorage is the PersistentVolumeClaim template of each Redis node.
type RedisStorage struct {
	// size is the requested capacity of each claim, such as "1Gi". It must be
	// greater than zero.
	// +required
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self))",message="spec.store.cluster.storage.size must be a quantity such as 1Gi or 500Mi"
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || quantity(string(self)).isGreaterThan(quantity('0'))",message="spec.store.cluster.storage.size must be greater than zero"
	Size resource.Quantity `json:"size"`

	// storageClassName is the StorageClass of each claim. Defaults to the
	// cluster's default StorageClass.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=limiterfleets,scope=Namespaced,shortName=lf,categories=sluice
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && self.metadata.name.size() <= 46",message="metadata.name must be a DNS label of at most 46 characters that starts with a letter: it prefixes the names of the fleet's Service, Deployment and StatefulSet"
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.store) || self.spec.store.type != 'Cluster' || self.metadata.name.size() <= 43",message="metadata.name must be at most 43 characters when spec.store.type is Cluster: it prefixes the StatefulSet of each Redis shard, <name>-redis-<shard>"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Ready Pods",type=integer,JSONPath=`.status.limiters.ready`
// +kubebuilder:printcolumn:name="Synced",type=integer,JSONPath=`.status.limiters.synced`
// +kubebuilder:printcolumn:name="Policies",type=integer,JSONPath=`.status.snapshot.policies`
// +kubebuilder:printcolumn:name="Snapshot",type=string,JSONPath=`.status.snapshot.version`
// +kubebuilder:printcolumn:name="Store",type=string,JSONPath=`.spec.store.type`
// +kubebuilder:printcolumn:name="Redis Ready",type=string,JSONPath=`.status.conditions[?(@.type=="RedisReady")].status`,priority=1
// +kubebuilder:printcolumn:name="Cluster State",type=string,JSONPath=`.status.redis.clusterState`,priority=1
// +kubebuilder:printcolumn:name="Data Loss",type=string,JSONPath=`.status.conditions[?(@.type=="RedisDataLoss")].status`,priority=1
// +kubebuilder:printcolumn:name="Enforcement",type=string,JSONPath=`.spec.enforcement`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// LimiterFleet is a fleet of limiter pods that enforce the RateLimitPolicies
// it selects, and the store they share counters in.
type LimiterFleet struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the fleet. Every field has a default, so an empty spec is a
	// fleet of 2 pods that enforce every policy with counters in memory.
	// +optional
	// +kubebuilder:default={}
	Spec LimiterFleetSpec `json:"spec,omitempty"`

	// status is what the operator observed, written by it alone.
	// +optional
	Status LimiterFleetStatus `json:"status,omitempty"`
}

// Hub marks v1beta1 as the version every other one converts through.
func (*LimiterFleet) Hub() {}

// +kubebuilder:object:root=true

// LimiterFleetList contains a list of LimiterFleet.
type LimiterFleetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LimiterFleet `json:"items"`
}

func init() {
	SchemeBuilder.Register(&LimiterFleet{}, &LimiterFleetList{})
}
