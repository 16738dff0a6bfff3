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

// ForwardAuthSource is where a forward-auth descriptor entry takes its value
// from.
// +kubebuilder:validation:Enum=Method;Path;Host;ClientIP;Header
type ForwardAuthSource string

const (
	// FromMethod is the original request's method: X-Forwarded-Method
	// (Traefik), X-Original-Method (nginx), else the method of the call.
	FromMethod ForwardAuthSource = "Method"
	// FromPath is the original request's path, without its query:
	// X-Forwarded-Uri (Traefik) or X-Original-URI (nginx), normalized:
	// percent-encoded unreserved characters decoded, repeated slashes and
	// dot segments removed, and no trailing slash but for "/".
	FromPath ForwardAuthSource = "Path"
	// FromHost is the original request's host: X-Forwarded-Host
	// (Traefik), X-Original-Host, else the Host of the call.
	FromHost ForwardAuthSource = "Host"
	// FromClientIP is the client's IP address: the peer of the call, or,
	// when the peer is a trusted proxy (the limiter's --trusted-proxies),
	// the last address of X-Forwarded-For (else X-Real-IP) that is not one.
	FromClientIP ForwardAuthSource = "ClientIP"
	// FromHeader is the value of the request header named by header.
	FromHeader ForwardAuthSource = "Header"
)

// ForwardAuthPathCase says whether a mapping's Path entries keep the case
// of the path or fold it.
// +kubebuilder:validation:Enum=Sensitive;Insensitive
type ForwardAuthPathCase string

const (
	// PathCaseSensitive keeps the path's case: /LOGIN is not /login.
	PathCaseSensitive ForwardAuthPathCase = "Sensitive"
	// PathCaseInsensitive lower-cases the path's letters (but for
	// percent-encodings), for backends that route /LOGIN as /login; a
	// policy's path value must then be in lower case.
	PathCaseInsensitive ForwardAuthPathCase = "Insensitive"
)

// ForwardAuthOnMissing is what forward-auth answers when a request lacks a
// value that a mapping needs.
// +kubebuilder:validation:Enum=Allow;Deny
type ForwardAuthOnMissing string

const (
	// OnMissingAllow lets the request through.
	OnMissingAllow ForwardAuthOnMissing = "Allow"
	// OnMissingDeny answers the deny status.
	OnMissingDeny ForwardAuthOnMissing = "Deny"
)

// ForwardAuth maps the requests that a gateway's forward-auth call
// (nginx auth_request, Traefik ForwardAuth) describes to the descriptor
// entries of one domain. The limiter serves it at
// /v1/forward-auth/{domain}.
type ForwardAuth struct {
	// domain is the rate-limit domain the mapped requests are checked in,
	// the domain of the RateLimitPolicies that limit them. 1 to 253
	// characters.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Domain string `json:"domain"`

	// descriptors are the entries built from each request, 1 to 8, with
	// unique keys.
	// +required
	// +listType=map
	// +listMapKey=key
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	Descriptors []ForwardAuthDescriptor `json:"descriptors"`

	// onMissing is what to do when a request lacks the value of an entry
	// (a missing or empty header): Allow leaves that entry out and checks
	// the others (and lets the request through when none is left), Deny
	// answers denyStatus. Either way it is counted in
	// sluice_forward_auth_missing_total. Defaults to Allow.
	// +optional
	// +kubebuilder:default=Allow
	OnMissing *ForwardAuthOnMissing `json:"onMissing,omitempty"`

	// denyStatus is the HTTP status of a denial, from 400 to 499. nginx's
	// auth_request passes only 401 and 403 on to the client, so use 403
	// there. Defaults to 429.
	// +optional
	// +kubebuilder:default=429
	// +kubebuilder:validation:XValidation:rule="self >= 400 && self <= 499",message="denyStatus must be a 4xx status, from 400 to 499"
	DenyStatus *int32 `json:"denyStatus,omitempty"`

	// pathCase is whether the values of Path entries keep the path's case
	// (Sensitive) or are lower-cased (Insensitive: /LOGIN counts as
	// /login, for backends that route paths regardless of case; policies'
	// path values must then be in lower case). Unset means Sensitive.
	// +optional
	PathCase *ForwardAuthPathCase `json:"pathCase,omitempty"`
}

// ForwardAuthDescriptor is one descriptor entry of a forward-auth mapping.
// +kubebuilder:validation:XValidation:rule="self.from != 'Header' || has(self.header)",message="header is required when from is Header",fieldPath=".header"
// +kubebuilder:validation:XValidation:rule="self.from == 'Header' || !has(self.header)",message="header applies only when from is Header",fieldPath=".header"
type ForwardAuthDescriptor struct {
	// key is the descriptor entry's key, which RateLimitPolicies of the
	// domain match on. 1 to 253 characters.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`

	// from is where the entry's value comes from: Method, Path, Host,
	// ClientIP, or Header (the header named by header).
	// +required
	From ForwardAuthSource `json:"from"`

	// header is the name of the request header whose value is the entry's,
	// such as X-Api-Key: 1 to 256 characters of an HTTP token (letters,
	// digits and !#$%&'*+.^_|~-). Required when from is Header, and only
	// allowed then.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!#$%&'*+.^_|~-]+$`
	Header *string `json:"header,omitempty"`
}
