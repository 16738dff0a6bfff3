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

// FleetRegions places a fleet in one region of several that share the
// policies of scope Global (spec.limit.rate.scope). A Global key has a home
// region, chosen from the key and the sorted region names alone, whose store
// holds its counter; the other regions take grants of units from the home
// ahead of need and decide locally from them, so no decision waits on
// another region. Written by the platform team: a tenant's policy only says
// Global, and can name no peer, endpoint or credential.
// +kubebuilder:validation:XValidation:rule="!has(self.peers) || self.peers.all(p, p.name != self.name)",message="spec.regions.peers must not name this fleet's own region (spec.regions.name)",fieldPath=".peers"
// +kubebuilder:validation:XValidation:rule="!has(self.partitionSharePercent) || has(self.peers)",message="spec.regions.partitionSharePercent needs peers: a region without peers holds the whole limit",fieldPath=".partitionSharePercent"
// +kubebuilder:validation:XValidation:rule="!has(self.peers) || size(self.peers) == 0 || has(self.tls) || (has(self.insecureLab) && self.insecureLab)",message="spec.regions.tls is required with peers: regions know each other by their certificates (mutual TLS); spec.regions.insecureLab: true uses bearer tokens instead, in a lab only",fieldPath=".tls"
// +kubebuilder:validation:XValidation:rule="(has(self.insecureLab) && self.insecureLab) || !has(self.peers) || self.peers.all(p, p.endpoint.startsWith('https://'))",message="spec.regions.peers[].endpoint must be https://: over plain http anyone on the path can act as a region (spec.regions.insecureLab: true allows it in a lab)",fieldPath=".peers"
// +kubebuilder:validation:XValidation:rule="(has(self.insecureLab) && self.insecureLab) || (!has(self.auth) && (!has(self.peers) || self.peers.all(p, !has(p.credentials))))",message="spec.regions.auth and spec.regions.peers[].credentials are the bearer tokens of spec.regions.insecureLab: with mutual TLS (spec.regions.tls) leave them out",fieldPath=".auth"
// +kubebuilder:validation:XValidation:rule="!has(self.insecureLab) || !self.insecureLab || !has(self.peers) || size(self.peers) == 0 || (has(self.auth) && self.peers.all(p, has(p.credentials)))",message="spec.regions.insecureLab needs spec.regions.auth and every peer's credentials (its bearer tokens)",fieldPath=".auth"
type FleetRegions struct {
	// name is this fleet's region, such as "eu-west": a DNS label, 1 to 63
	// characters. Every region's fleet must use the same name for it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="spec.regions.name must be a DNS label: lower-case letters, digits and '-'"
	Name string `json:"name"`

	// tls names the Secret (kubernetes.io/tls, with ca.crt, as cert-manager
	// writes it) holding this region's certificate, whose Common Name must
	// be spec.regions.name, its key, and the CA every region's certificate
	// chains to. The peer endpoint serves it and the limiters present it on
	// their calls to the peers (mutual TLS): a region knows a caller's
	// region by its certificate's name, and a home by its own. Required
	// with peers unless insecureLab.
	// +optional
	TLS *RegionTLS `json:"tls,omitempty"`

	// insecureLab, a lab only, allows http:// endpoints and authenticates
	// peers with bearer tokens (auth and each peer's credentials) instead
	// of certificates: a caller's region is then what its call says, so
	// anyone holding this region's token can act as any region. Default
	// false.
	// +optional
	InsecureLab *bool `json:"insecureLab,omitempty"`

	// auth, with insecureLab only, is the Secret key holding the token
	// other regions' limiters must present (as a bearer token) on this
	// region's peer endpoint. At least 32 bytes; the limiters refuse to
	// start peering with a shorter one.
	// +optional
	Auth *SecretKeyRef `json:"auth,omitempty"`

	// peers are the other regions, at most 8, with unique names. Empty: this
	// region is alone, and Global limits count in its own store.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	Peers []RegionPeer `json:"peers,omitempty"`

	// partitionSharePercent is the share of a Global limit, in percent from
	// 1 to 100, this region may admit per period for a key whose home it
	// can't reach, beside the grant it already holds. Defaults to an even
	// share: 100 / (1 + the number of peers).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	PartitionSharePercent *int32 `json:"partitionSharePercent,omitempty"`
}

// RegionPeer is another region: where its limiters' peer endpoint answers
// and the token to present there.
type RegionPeer struct {
	// name is the peer's region name, as its own fleet's spec.regions.name
	// says it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="spec.regions.peers[].name must be a DNS label: lower-case letters, digits and '-'"
	Name string `json:"name"`

	// endpoint is the base URL of the peer region's limiter peer endpoint,
	// such as "https://sluice-peer.us-east.example.com:8083": https (http
	// only with insecureLab), a host and an optional port, with no user,
	// query or fragment. The peer's certificate must be valid for the host
	// and name the peer's region.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/?$')",message="spec.regions.peers[].endpoint must be an http or https URL of a host and an optional port, with no user, path, query or fragment"
	Endpoint string `json:"endpoint"`

	// credentials, with insecureLab only, is the Secret key holding the
	// token this region presents to the peer: the peer's own
	// spec.regions.auth token.
	// +optional
	Credentials *SecretKeyRef `json:"credentials,omitempty"`
}

// RegionTLS names a region's certificate Secret.
type RegionTLS struct {
	// secretName is the Secret, in the fleet's namespace, with tls.crt,
	// tls.key and ca.crt.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="spec.regions.tls.secretName must be a Secret name: lower-case letters, digits, '-' and '.'"
	SecretName string `json:"secretName"`
}

// RegionScope says where a rate limit's counter lives.
// +kubebuilder:validation:Enum=Region;Global
type RegionScope string

const (
	// ScopeRegion counts in the region's own store: each region enforces the
	// whole limit on its own traffic (per-IP limits, as anycast keeps a
	// client in one region). The default, and what a fleet without
	// spec.regions does.
	ScopeRegion RegionScope = "Region"
	// ScopeGlobal counts a key once across every region of the fleet's
	// spec.regions: its home region holds the counter, the others spend
	// grants taken from it. At most the bound the policy's status reports
	// above the limit per period.
	ScopeGlobal RegionScope = "Global"
)
