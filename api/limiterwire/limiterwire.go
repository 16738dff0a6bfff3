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

// Package limiterwire is the contract between a limiter pod and the operator,
// declared once for both sides: the admin endpoints the operator polls on each
// limiter pod, their query parameters and JSON bodies, and the environment
// variables the operator sets in limiter pods. limiter/server and limiter/app
// serve and read it; controllers/ calls and sets it. It imports the standard
// library only.
//
// Adding a field is compatible in both directions: JSON decoding ignores
// unknown fields and leaves missing ones zero. Renaming or removing one is not:
// an operator and limiters of different releases run side by side during an
// upgrade.
package limiterwire

import "time"

// The admin plane: the endpoints below and MetricsPath, served on the
// limiter's admin listener (--admin-addr, the container port AdminPortName)
// and never on its data plane, which answers 404 there. On Kubernetes
// (--admin-auth=kubernetes) every call needs a bearer token that the API
// server authenticates (TokenReview) and authorizes (SubjectAccessReview of
// verb "get" on the non-resource URL path): the operator's ServiceAccount
// token for AdminPathPrefix, a metrics reader's for MetricsPath.
const (
	// AdminPathPrefix starts the path of every admin endpoint.
	AdminPathPrefix = "/v1/admin/"
	// MetricsPath is where the admin plane serves Prometheus metrics.
	MetricsPath = "/metrics"
	// AdminPortName names the limiter container's admin port.
	AdminPortName = "admin"
	// AdminPort is the admin port of a limiter pod.
	AdminPort = 8082
	// AdminAuthFlag is the limiter flag that turns the checks on, with the
	// value AdminAuthKubernetes; its default, AdminAuthNone, leaves the
	// admin plane open, for a standalone limiter on loopback.
	AdminAuthFlag       = "--admin-auth"
	AdminAuthNone       = "none"
	AdminAuthKubernetes = "kubernetes"
	// AdminAudience is the audience a token must be issued for to call
	// AdminPathPrefix (the limiter's --admin-token-audience default), and
	// the prefix of each fleet's own (FleetAdminAudience), which the
	// operator renders: the API server itself does not accept such a
	// token, so that a limiter pod can't use what it receives as the
	// operator.
	AdminAudience = "sluice-limiter-admin"
	// AdminTLSCertFlag and AdminTLSKeyFlag name the limiter flags of the
	// admin plane's serving certificate and key (PEM files, read again
	// when they change); with both, the admin plane serves HTTPS only.
	AdminTLSCertFlag = "--admin-tls-cert"
	AdminTLSKeyFlag  = "--admin-tls-key"
)

// FleetAdminAudience is the audience of fleet namespace/name's admin
// plane, which its limiters require (--admin-token-audience): a token
// minted for one fleet is refused by every other's, so a limiter pod
// can't replay what it receives to another fleet's pods.
func FleetAdminAudience(namespace, name string) string {
	return AdminAudience + "." + namespace + "." + name
}

// SnapshotPath tells which snapshot a limiter has loaded: GET it for a
// Snapshot. With ?waitForVersion=V the answer waits (a long poll) until
// version V is loaded, or until ?timeout= (a Go duration, default and at most
// MaxSnapshotWait) has passed, and then gives whatever is loaded. The operator
// uses it to learn what each limiter pod enforces.
const SnapshotPath = "/v1/admin/snapshot"

// Query parameters of SnapshotPath.
const (
	// WaitForVersionParam names the snapshot version to wait for.
	WaitForVersionParam = "waitForVersion"
	// TimeoutParam bounds the wait, as a Go duration such as "5s".
	TimeoutParam = "timeout"
)

// MaxSnapshotWait caps the timeout of a long poll on SnapshotPath.
const MaxSnapshotWait = 10 * time.Second

// Snapshot is the JSON body of SnapshotPath. Before a snapshot is loaded,
// Version and Enforcement are empty, Policies is [] and LoadedAt is absent.
type Snapshot struct {
	// Version is the loaded snapshot's version, its content hash.
	Version string `json:"version"`
	// Enforcement is the loaded snapshot's kill switch: Enabled or Disabled.
	Enforcement string `json:"enforcement"`
	// LoadedAt is when this limiter installed the snapshot (RFC 3339 with
	// nanoseconds).
	LoadedAt time.Time `json:"loadedAt,omitzero"`
	// Policies are the snapshot's policies, sorted by namespace and name.
	Policies []Policy `json:"policies"`
	// Source is where snapshots come from: "configmap NAMESPACE/NAME" or
	// "file PATH".
	Source string `json:"source"`
	// LastError is why the source gives no new snapshot (invalid, missing
	// or unreachable), or empty. The loaded snapshot stays in force.
	LastError string `json:"lastError"`
	// Degraded lists the policies this limiter answered by their failure
	// mode recently, because the store could not answer.
	Degraded []Degraded `json:"degraded,omitempty"`
	// ReadyPods is the divisor of failureMode Local in force.
	ReadyPods int `json:"readyPods,omitempty"`
	// Store is whether the counter store answers now; absent for the
	// in-process memory store.
	Store *Store `json:"store,omitempty"`
}

// Policy identifies one policy of a loaded snapshot: the object and, when
// the snapshot came from the API server, its UID and generation.
type Policy struct {
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	UID        string `json:"uid,omitempty"`
	Generation int64  `json:"generation,omitempty"`
}

// Degraded is one policy running degraded on a limiter.
type Degraded struct {
	// Policy is "namespace/name".
	Policy string `json:"policy"`
	// FailureMode is the policy's spec.failureMode: Open, Closed or Local.
	FailureMode string `json:"failureMode"`
	// Since is the first fallback decision of this episode.
	Since time.Time `json:"since"`
	// Fallbacks counts the decisions made by FailureMode in this episode.
	Fallbacks int64 `json:"fallbacks"`
	// BudgetExceeded is true when the last fallback decision was made
	// because the policy's namespace was over its store budget
	// (spec.tenantBudget of the fleet), not because the store failed.
	BudgetExceeded bool `json:"budgetExceeded,omitempty"`
}

// Store is the counter store's health, as the limiter sees it.
type Store struct {
	// OK is true when the store answered a ping and no breaker is open.
	OK bool `json:"ok"`
	// Detail says what was checked, and the error when not OK, such as
	// "ping failed: WRONGPASS ...".
	Detail string `json:"detail"`
}

// StatsPath gives each policy's decision counts since the limiter process
// started: GET it for a Stats. The counts only grow while the process runs;
// BootID changes when it restarts, so that a reader (the operator's
// collector) can turn them into deltas without counting a restart as a reset
// or twice.
const StatsPath = "/v1/admin/stats"

// Stats is the JSON body of StatsPath.
type Stats struct {
	// BootID is random, chosen when the process started.
	BootID string `json:"bootID"`
	// StartedAt is when the process started counting (RFC 3339).
	StartedAt time.Time `json:"startedAt"`
	// Policies are the loaded snapshot's policies, sorted by namespace and
	// name. A policy's counts carry over new snapshots while its UID stays.
	Policies []PolicyStats `json:"policies"`
}

// PolicyStats are one policy's decision counts since Stats.StartedAt.
type PolicyStats struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
	// Generation is the generation of the policy loaded now.
	Generation    int64 `json:"generation,omitempty"`
	Allowed       int64 `json:"allowed"`
	Limited       int64 `json:"limited"`
	ShadowLimited int64 `json:"shadowLimited"`
	FailedOpen    int64 `json:"failedOpen"`
	FailedClosed  int64 `json:"failedClosed"`
	LocalFallback int64 `json:"localFallback"`
	// NearLimit counts allowed decisions that left under 20% of the limit.
	NearLimit int64 `json:"nearLimit"`
	// SoftLimited counts the decisions of a soft policy over its
	// threshold: allowed, and marked.
	SoftLimited int64 `json:"softLimited"`
	// Released counts, for a policy that holds (Concurrency, reserve), the
	// holdings ended (slots released, reservations settled, holdings of
	// denied requests given back); NotHeld the ends that found nothing.
	Released int64 `json:"released,omitempty"`
	NotHeld  int64 `json:"notHeld,omitempty"`
	// Penalized counts the denials of penalized keys (spec.penalty); they
	// are not in Limited.
	Penalized int64 `json:"penalized,omitempty"`
	// Refused counts the requests that matched the policy and were not
	// counted because of what the client sent (a cost above a cap, an
	// over-long value, a malformed lease...): denied with a reason when an
	// enforcing policy matched, and in no other count.
	Refused int64 `json:"refused,omitempty"`
	// Hottest are the policy's hottest descriptor values in the complete
	// interval that started at HottestSince, values hashed or truncated;
	// only when the limiter runs with --top-descriptors.
	Hottest      []HotValue `json:"hottest,omitempty"`
	HottestSince *time.Time `json:"hottestSince,omitempty"`
	// LocalTier is set for a policy in two-tier mode (spec.localTier).
	LocalTier *LocalTier `json:"localTier,omitempty"`
	// Regions is set for a policy of scope Global on a limiter in a
	// region (--region).
	Regions *RegionsBound `json:"regions,omitempty"`
}

// RegionsBound is a Global policy's bound across regions.
type RegionsBound struct {
	// Bound is the most units the regions may admit above the limit per
	// period, partitions included: ReachBound plus every region's
	// partition share (a peer's as it last said it, 100% until it has).
	Bound int64 `json:"bound"`
	// ReachBound is the most above the limit per period while every
	// region reaches every home: 2·regions·grant.
	ReachBound int64 `json:"reachBound"`
	// Regions is how many regions share the limit, this one included.
	Regions int64 `json:"regions"`
}

// LocalTier are a two-tier policy's figures on one limiter.
type LocalTier struct {
	// OvershootBound is the most units the fleet may admit above the
	// exact algorithm over any interval: 0 for window algorithms, else
	// maxOvershoot, or pods × the per-pod cap without it.
	OvershootBound int64 `json:"overshootBound"`
	// Pods is the most pods seen holding grants on one of the policy's keys lately.
	Pods int64 `json:"pods"`
	// Decisions by path: spent from a grant, one store call, the
	// over-limit cache, passed through exactly.
	Local         int64 `json:"local"`
	Grants        int64 `json:"grants"`
	CachedDenials int64 `json:"cachedDenials"`
	Exact         int64 `json:"exact"`
}

// HotValue is one of a policy's hottest descriptor values. Requests and
// Limited are upper bounds, at most Error over the true counts.
type HotValue struct {
	Value    string `json:"value"`
	Requests int64  `json:"requests"`
	Limited  int64  `json:"limited"`
	Error    int64  `json:"error,omitempty"`
}

// Environment variables the operator sets in limiter pods. On Kubernetes
// they come from a Secret, so the Redis password is in neither the pod spec
// nor the process's arguments, and needs no URL escaping.
const (
	// RedisUsernameEnv holds the Redis ACL user a Redis store logs in as
	// when its address carries no credentials.
	RedisUsernameEnv = "SLUICE_REDIS_USERNAME"
	// RedisPasswordEnv holds the Redis password a Redis store uses when its
	// address carries no credentials. The operator's own Redis nodes read
	// it too (requirepass).
	RedisPasswordEnv = "SLUICE_REDIS_PASSWORD"
	// TopKeyFileEnv names the file of the key with which a limiter hashes
	// the hottest descriptor values it reports (HotValue.Value): an
	// HMAC-SHA-256 key of at least 16 bytes, the same for every pod of a
	// fleet, so that the operator can add their reports up. The operator
	// mounts it from a Secret it generates per fleet. Without it a limiter
	// uses a random key of its own.
	TopKeyFileEnv = "SLUICE_TOPK_KEY_FILE"
)

// Stop timings of a limiter pod, which the operator sizes the pods'
// terminationGracePeriodSeconds by. limiter/server takes them as its
// defaults.
const (
	// DefaultDrainDelay is the drain delay of a limiter on Kubernetes
	// (--drain-delay): longer than the time endpoints take to drop a pod
	// that fails readiness (the probe period, then the endpoint controller,
	// then kube-proxy or the gateway's own discovery).
	DefaultDrainDelay = 5 * time.Second
	// DefaultShutdownTimeout bounds how long a stopping limiter waits for
	// the calls in flight after its listeners close.
	DefaultShutdownTimeout = 10 * time.Second
)

// ExplainPath explains a request without spending anything: GET it with
// domain=D and one key=value query parameter per descriptor entry (the
// status peek's query), as kubectl sluice explain does. Besides the
// admin plane's own check (get on this non-resource URL), each matched
// policy is shown in full only to a caller that may get
// ratelimitpolicies in the policy's namespace; of any other, only whether
// it would deny and for how long (see ExplainedPolicy.Redacted).
const ExplainPath = "/v1/admin/explain"

// RegionsPath, on the admin plane of a limiter in a region (--region),
// answers the region's view of its peers as JSON: for each, whether its
// last grant call was answered, the reason (Reachable, Unreachable,
// Unauthorized, UnknownRegion, Refused, NoExchangeYet), since when, and
// the last exchange; and the Global keys and units it holds
// (limiter/regions Status).
const RegionsPath = "/v1/admin/regions"

// Regions is the JSON body of RegionsPath (limiter/regions Status).
type Regions struct {
	// Region is the limiter's region name.
	Region string `json:"region"`
	// Peers are the other regions, sorted by name.
	Peers []RegionPeer `json:"peers"`
	// Keys is how many Global keys homed elsewhere the limiter tracks,
	// HeldUnits what their grants hold now.
	Keys      int   `json:"keys"`
	HeldUnits int64 `json:"heldUnits"`
}

// RegionPeer is what a limiter knows of one peer region.
type RegionPeer struct {
	Name      string `json:"name"`
	Reachable bool   `json:"reachable"`
	// Reason is Reachable, Unreachable, Unauthorized, UnknownRegion,
	// Refused or NoExchangeYet.
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
	// Since is when Reachable last changed; LastExchange the last call
	// the peer answered.
	Since        time.Time `json:"since,omitzero"`
	LastExchange time.Time `json:"lastExchange,omitzero"`
	// Keys is how many Global keys homed at the peer the limiter tracks,
	// HeldUnits what their grants from the peer hold now.
	Keys      int   `json:"keys"`
	HeldUnits int64 `json:"heldUnits"`
}

// Explanation is the JSON body of ExplainPath.
type Explanation struct {
	Domain string `json:"domain"`
	// Policies are the policies of the domain that the entries match,
	// shadow and hidden ones among them, in the snapshot's order (sorted
	// by namespace and name).
	Policies []ExplainedPolicy `json:"policies"`
	// SnapshotVersion is the snapshot the limiter answered from.
	SnapshotVersion string `json:"snapshotVersion,omitempty"`
}

// ExplainedPolicy is one matched policy, as a cost-0 peek of its counter
// sees it.
type ExplainedPolicy struct {
	// Redacted is true when the caller may not get ratelimitpolicies in
	// the policy's namespace: only WouldDeny and RetryAfterSeconds are set
	// (what a client of the request is told). Such a shadow or soft
	// policy is left out, as clients are never told of them.
	Redacted  bool   `json:"redacted,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	// Algorithm, Limit, PeriodSeconds and Burst are the policy's threshold.
	Algorithm     string `json:"algorithm,omitempty"`
	Limit         int64  `json:"limit,omitempty"`
	PeriodSeconds int64  `json:"periodSeconds,omitempty"`
	Burst         int64  `json:"burst,omitempty"`
	// Remaining is what the request's counter has left now.
	Remaining int64 `json:"remaining"`
	// ResetSeconds is how long until the counter is back to its full
	// quota (a penalty's time left while penalized).
	ResetSeconds int64 `json:"resetSeconds"`
	// WouldDeny is true when a request of cost 1 would be denied by this
	// policy now (a shadow or soft policy only reports it).
	WouldDeny bool `json:"wouldDeny"`
	// RetryAfterSeconds is, when WouldDeny, at most how long until it
	// would pass.
	RetryAfterSeconds int64 `json:"retryAfterSeconds,omitempty"`
	// Penalized is true while the request's key is penalized.
	Penalized bool `json:"penalized,omitempty"`
	// Shadow, Soft and Hidden are the policy's spec.shadow, spec.soft and
	// spec.visibility Hidden.
	Shadow bool `json:"shadow,omitempty"`
	Soft   bool `json:"soft,omitempty"`
	Hidden bool `json:"hidden,omitempty"`
	// FailureMode is spec.failureMode; Reason is set when the store could
	// not answer and the failure mode made up the figures.
	FailureMode string `json:"failureMode,omitempty"`
	Reason      string `json:"reason,omitempty"`
	// Holds is true for a policy that holds (Concurrency, reservations).
	Holds bool `json:"holds,omitempty"`
}
