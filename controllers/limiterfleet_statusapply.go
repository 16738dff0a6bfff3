package controllers

import (
	"context"
	"encoding/json"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// A LimiterFleet's status has four writers, each the only writer of its
// fields, as a policy's has two (ratelimitpolicy_status.go). Each
// server-side applies its fields alone to the status subresource under its
// own field manager, so none can erase another's: conditions are a list
// keyed by type, and the API server removes an entry only when the manager
// that owns it leaves it out of its next apply.
const (
	// FleetStatusFieldOwner is LimiterFleetReconciler: it owns
	// status.observedGeneration, status.snapshot, status.limiters and the
	// Ready and SnapshotSynced conditions.
	FleetStatusFieldOwner = "sluice-operator-fleet"
	// RedisStatusFieldOwner is RedisFleetReconciler: it owns status.redis
	// and the RedisReady and RedisDataLoss conditions.
	RedisStatusFieldOwner = "sluice-operator-redis"
)

// fleetConditionOwners names the condition types each writer owns. The
// collector (EnforcementFieldOwner) owns status.regions too.
var fleetConditionOwners = map[string][]string{
	FleetStatusFieldOwner:    {v1beta1.ReadyCondition, v1beta1.SnapshotSyncedCondition},
	RedisStatusFieldOwner:    {v1beta1.RedisReadyCondition, v1beta1.RedisDataLossCondition},
	EnforcementFieldOwner:    {v1beta1.RegionsReachableCondition},
	AdminTLSStatusFieldOwner: {v1beta1.AdminTLSReadyCondition},
}

// fleetStatusFields are the status fields other than conditions: each
// one's JSON name, writer, and copy. With fleetConditionOwners it is the
// one table of who writes what (ownedFleetStatus, fleetStatusOwners).
var fleetStatusFields = []struct {
	name, owner string
	copy        func(dst, src *v1beta1.LimiterFleetStatus)
}{
	{"observedGeneration", FleetStatusFieldOwner, func(d, s *v1beta1.LimiterFleetStatus) { d.ObservedGeneration = s.ObservedGeneration }},
	{"snapshot", FleetStatusFieldOwner, func(d, s *v1beta1.LimiterFleetStatus) { d.Snapshot = s.Snapshot }},
	{"limiters", FleetStatusFieldOwner, func(d, s *v1beta1.LimiterFleetStatus) { d.Limiters = s.Limiters }},
	{"redis", RedisStatusFieldOwner, func(d, s *v1beta1.LimiterFleetStatus) { d.Redis = s.Redis }},
	{"regions", EnforcementFieldOwner, func(d, s *v1beta1.LimiterFleetStatus) { d.Regions = s.Regions }},
}

// ownedFleetStatus is the part of st that owner writes, and nothing else.
func ownedFleetStatus(st *v1beta1.LimiterFleetStatus, owner string) *v1beta1.LimiterFleetStatus {
	out := &v1beta1.LimiterFleetStatus{}
	for _, f := range fleetStatusFields {
		if f.owner == owner {
			f.copy(out, st)
		}
	}
	for _, c := range st.Conditions {
		if slices.Contains(fleetConditionOwners[owner], c.Type) {
			out.Conditions = append(out.Conditions, c)
		}
	}
	return out
}

// writeFleetStatus applies owner's part of next's status, computed from
// latest (the fleet as just read), only when that part changed, or owner
// owns, in latest's managedFields, a condition type it does not write
// (ownsUnwrittenCondition: one an older release wrote, which the fleet
// controller took over), which the apply removes. A condition another
// manager owns is not owner's to remove, and makes no write.
// An older release's status entry in latest's managedFields is first
// split among the writers (migrateFleetStatusOwners), and then owner
// applies whether its part changed or not, so that what it took over and
// no longer writes goes.
func writeFleetStatus(ctx context.Context, c client.Client, latest, next *v1beta1.LimiterFleet, owner string) error {
	migrated, err := migrateFleetStatusOwners(ctx, c, latest)
	if err != nil {
		return err
	}
	mine := ownedFleetStatus(&next.Status, owner)
	stale := ownsUnwrittenCondition(latest.ManagedFields, owner, fleetConditionOwners[owner])
	if !migrated && !stale && equality.Semantic.DeepEqual(ownedFleetStatus(&latest.Status, owner), mine) {
		return nil
	}
	return applyFleetStatus(ctx, c, next, owner, mine)
}

// fleetStatusApply is the body of a server-side apply to a fleet's status.
type fleetStatusApply struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        policyStatusApplyMeta       `json:"metadata"`
	Status          *v1beta1.LimiterFleetStatus `json:"status"`
}

// applyFleetStatus server-side applies st, all that owner writes, to the
// fleet's status subresource. Every field of LimiterFleetStatus is omitted
// when empty, so st carries exactly the owner's fields. The owner forces
// ownership: it is its fields' only writer. Force takes over only the
// fields st sends; the rest of what an earlier release wrote by patch
// writeFleetStatus hands over first (migrateFleetStatusOwners).
func applyFleetStatus(ctx context.Context, c client.Client, fleet *v1beta1.LimiterFleet, owner string, st *v1beta1.LimiterFleetStatus) error {
	return applyFleetStatusAt(ctx, c, fleet, owner, st, "")
}

// applyFleetStatusAt is applyFleetStatus with resourceVersion, when set,
// as its precondition: a status written since fails it with a conflict.
func applyFleetStatusAt(ctx context.Context, c client.Client, fleet *v1beta1.LimiterFleet, owner string, st *v1beta1.LimiterFleetStatus, resourceVersion string) error {
	body, err := json.Marshal(fleetStatusApply{
		TypeMeta: metav1.TypeMeta{APIVersion: v1beta1.GroupVersion.String(), Kind: "LimiterFleet"},
		Metadata: policyStatusApplyMeta{Namespace: fleet.Namespace, Name: fleet.Name, ResourceVersion: resourceVersion},
		Status:   st,
	})
	if err != nil {
		return err
	}
	obj := &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: fleet.Namespace, Name: fleet.Name}}
	return client.IgnoreNotFound(c.Status().Patch(ctx, obj, client.RawPatch(types.ApplyPatchType, body),
		client.FieldOwner(owner), client.ForceOwnership))
}

// applyFleetRegions server-side applies a fleet's status.regions and its
// RegionsReachable condition under EnforcementFieldOwner, the collector's
// alone: the controllers' fields and conditions are left as they are. nil
// regions and cond remove what the collector wrote before.
func applyFleetRegions(ctx context.Context, c client.Client, fleet *v1beta1.LimiterFleet, regions []v1beta1.RegionStatus, cond *metav1.Condition) error {
	st := &v1beta1.LimiterFleetStatus{Regions: regions}
	if cond != nil {
		st.Conditions = []metav1.Condition{*cond}
	}
	return applyFleetStatus(ctx, c, fleet, EnforcementFieldOwner, st)
}
