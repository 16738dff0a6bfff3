package limiterwire

import "time"

// TopPath lists a limiter's hottest policies: those with the most
// decisions (or denials) since the process started, each with its hottest
// descriptor values as the policy's status shows them (hashed or truncated,
// with --top-descriptors), as kubectl sluice top does. GET it with these
// optional query parameters:
//
//   - n: how many policies, 1 to TopMaxPolicies (default TopDefaultPolicies);
//   - sort: TopSortDecisions (the default) or TopSortLimited;
//   - namespace: only that namespace's policies.
//
// Besides the admin plane's own check (get on this non-resource URL), a
// policy is listed only to a caller that may get ratelimitpolicies in its
// namespace: a tenant sees its own namespaces and learns nothing of the
// others, not even that they have policies. The limiter reviews at most
// TopMaxNamespaceReviews namespaces per call (most decisions first) and
// says so in Top.Incomplete when it stopped there.
const TopPath = "/v1/admin/top"

// Bounds of TopPath's query.
const (
	TopDefaultPolicies = 10
	TopMaxPolicies     = 50
	// TopMaxNamespaceReviews bounds the access reviews one call makes.
	TopMaxNamespaceReviews = 32
)

// Orders of TopPath's sort parameter.
const (
	// TopSortDecisions ranks policies by all their decisions.
	TopSortDecisions = "decisions"
	// TopSortLimited ranks them by their denials (limited and penalized).
	TopSortLimited = "limited"
)

// Top is the JSON body of TopPath.
type Top struct {
	// StartedAt is when the limiter started counting (RFC 3339): the counts
	// cover the time since, on this limiter alone.
	StartedAt time.Time `json:"startedAt"`
	// SnapshotVersion is the snapshot the limiter enforces.
	SnapshotVersion string `json:"snapshotVersion,omitempty"`
	// Sort is the order the policies are in.
	Sort string `json:"sort"`
	// Policies are the hottest policies the caller may see, hottest first
	// (ties by namespace and name).
	Policies []TopPolicy `json:"policies"`
	// Incomplete is true when the limiter stopped after
	// TopMaxNamespaceReviews namespaces before it had n policies: ask for
	// one namespace (namespace=) to see further.
	Incomplete bool `json:"incomplete,omitempty"`
}

// TopPolicy is one policy's decisions on this limiter since Top.StartedAt.
type TopPolicy struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Decisions is every decision the policy took part in: Allowed,
	// Limited, ShadowLimited, SoftLimited, FailedOpen, FailedClosed,
	// Penalized and Refused.
	Decisions     int64 `json:"decisions"`
	Allowed       int64 `json:"allowed"`
	Limited       int64 `json:"limited"`
	ShadowLimited int64 `json:"shadowLimited,omitempty"`
	SoftLimited   int64 `json:"softLimited,omitempty"`
	FailedOpen    int64 `json:"failedOpen,omitempty"`
	FailedClosed  int64 `json:"failedClosed,omitempty"`
	Penalized     int64 `json:"penalized,omitempty"`
	Refused       int64 `json:"refused,omitempty"`
	// Hottest are the policy's hottest descriptor values in the complete
	// interval that started at HottestSince (PolicyStats.Hottest).
	Hottest      []HotValue `json:"hottest,omitempty"`
	HottestSince *time.Time `json:"hottestSince,omitempty"`
}
