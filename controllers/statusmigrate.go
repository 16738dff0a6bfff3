package controllers

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/structured-merge-diff/v4/fieldpath"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// The release before wrote a fleet's whole status with a merge patch (an
// earlier one a policy's by update), so
// on an upgraded cluster each fleet's managedFields hold an Update entry
// of the status subresource under that operator's manager name (the
// binary's user agent). Server-side apply removes a field an applier stops
// sending only when no other manager owns it, and ForceOwnership takes
// over only the fields the applier sends: a field the old manager set that
// is now zero, and so omitted (status.snapshot.refused 3 → 0,
// RedisDataLoss once the fleet left mode Cluster), would stay forever.
// migrateStatusOwners hands each part of such an entry to the writer that
// owns that part now, once, as csaupgrade (k8s.io/client-go/util/csaupgrade)
// hands a whole entry to one manager.

// statusOwners says who writes each part of a status: a top-level field by
// its JSON name, a condition by its type. What neither names (a field this
// release no longer has) is fallback's, whose next apply removes it.
type statusOwners struct {
	fields, conditions map[string]string
	fallback           string
}

// fleetStatusOwners is fleetStatusFields and fleetConditionOwners, by
// field and by condition; the fleet controller removes the rest.
var fleetStatusOwners = func() statusOwners {
	o := statusOwners{fields: map[string]string{}, conditions: map[string]string{}, fallback: FleetStatusFieldOwner}
	for _, f := range fleetStatusFields {
		o.fields[f.name] = f.owner
	}
	for owner, types := range fleetConditionOwners {
		for _, t := range types {
			o.conditions[t] = owner
		}
	}
	return o
}()

// managers are the field managers of the status writers.
func (o statusOwners) managers() []string {
	var out []string
	for _, m := range o.fields {
		out = append(out, m)
	}
	for _, m := range o.conditions {
		out = append(out, m)
	}
	out = append(out, o.fallback)
	slices.Sort(out)
	return slices.Compact(out)
}

// ownerOf is the writer of the status path p (p[0] is "status"), or ""
// for a path outside the status.
func (o statusOwners) ownerOf(p fieldpath.Path) string {
	if len(p) == 0 || p[0].FieldName == nil || *p[0].FieldName != "status" {
		return ""
	}
	if len(p) < 2 || p[1].FieldName == nil {
		return o.fallback
	}
	name := *p[1].FieldName
	if name != "conditions" {
		return cmp.Or(o.fields[name], o.fallback)
	}
	if t, ok := conditionTypeOf(p); ok {
		return cmp.Or(o.conditions[t], o.fallback)
	}
	return o.fallback
}

// conditionTypeOf is the type of the status condition the path p is in
// (status.conditions[type=T]...), and false for any other path.
func conditionTypeOf(p fieldpath.Path) (string, bool) {
	if len(p) < 3 || p[0].FieldName == nil || *p[0].FieldName != "status" ||
		p[1].FieldName == nil || *p[1].FieldName != "conditions" || p[2].Key == nil {
		return "", false
	}
	for _, f := range *p[2].Key {
		if f.Name == "type" && f.Value.IsString() {
			return f.Value.AsString(), true
		}
	}
	return "", false
}

// splitStatusFields splits a managedFields entry's fieldsV1 by writer:
// each status path goes to ownerOf's writer; rest is what lies outside
// the status, nil when nothing does.
func splitStatusFields(fieldsV1 []byte, o statusOwners) (parts map[string]*fieldpath.Set, rest *fieldpath.Set, err error) {
	set := &fieldpath.Set{}
	if err := set.FromJSON(bytes.NewReader(fieldsV1)); err != nil {
		return nil, nil, err
	}
	parts = map[string]*fieldpath.Set{}
	set.Iterate(func(p fieldpath.Path) {
		owner := o.ownerOf(p)
		if owner == "" {
			if rest == nil {
				rest = &fieldpath.Set{}
			}
			rest.Insert(p)
			return
		}
		if parts[owner] == nil {
			parts[owner] = &fieldpath.Set{}
		}
		parts[owner].Insert(p)
	})
	return parts, rest, nil
}

// isOldStatusEntry is a status entry a writer of this release did not
// make: an Update of the status subresource by another manager.
func isOldStatusEntry(e metav1.ManagedFieldsEntry, ours []string) bool {
	return e.Operation == metav1.ManagedFieldsOperationUpdate && e.Subresource == "status" && !slices.Contains(ours, e.Manager)
}

// migrateStatusOwners moves each old status entry's fields (isOldStatusEntry)
// into the Apply entries of the status subresource of the writers that own
// them now (a missing one is made, with the old entry's apiVersion; both
// API versions share one status type, so a path means the same in each),
// and drops the old entry, keeping only what it held outside the status.
// It reports false, and entries unchanged, when there is no old entry.
func migrateStatusOwners(entries []metav1.ManagedFieldsEntry, o statusOwners) ([]metav1.ManagedFieldsEntry, bool, error) {
	ours := o.managers()
	if !slices.ContainsFunc(entries, func(e metav1.ManagedFieldsEntry) bool { return isOldStatusEntry(e, ours) }) {
		return entries, false, nil
	}
	var out []metav1.ManagedFieldsEntry
	moved := map[string]*fieldpath.Set{}
	movedFrom := map[string]metav1.ManagedFieldsEntry{}
	for _, e := range entries {
		if !isOldStatusEntry(e, ours) {
			out = append(out, *e.DeepCopy())
			continue
		}
		var raw []byte
		if e.FieldsV1 != nil {
			raw = e.FieldsV1.Raw
		}
		parts, rest, err := splitStatusFields(raw, o)
		if err != nil {
			return nil, false, fmt.Errorf("managedFields entry of %s: %w", e.Manager, err)
		}
		for owner, part := range parts {
			moved[owner] = part.Union(orEmpty(moved[owner]))
			movedFrom[owner] = e
		}
		if rest != nil && !rest.Empty() {
			keep := *e.DeepCopy()
			if keep.FieldsV1, err = fieldsV1Of(rest); err != nil {
				return nil, false, err
			}
			out = append(out, keep)
		}
	}
	for _, owner := range slices.Sorted(maps.Keys(moved)) {
		var err error
		if out, err = mergeIntoApplyEntry(out, owner, moved[owner], movedFrom[owner]); err != nil {
			return nil, false, err
		}
	}
	return out, true, nil
}

// mergeIntoApplyEntry adds set to owner's Apply entry of the status
// subresource in entries, made after from when there is none.
func mergeIntoApplyEntry(entries []metav1.ManagedFieldsEntry, owner string, set *fieldpath.Set, from metav1.ManagedFieldsEntry) ([]metav1.ManagedFieldsEntry, error) {
	i := slices.IndexFunc(entries, func(e metav1.ManagedFieldsEntry) bool {
		return e.Manager == owner && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == "status"
	})
	if i < 0 {
		entries = append(entries, metav1.ManagedFieldsEntry{Manager: owner, Operation: metav1.ManagedFieldsOperationApply,
			APIVersion: from.APIVersion, Time: from.Time, FieldsType: "FieldsV1", Subresource: "status"})
		i = len(entries) - 1
	} else if entries[i].FieldsV1 != nil {
		have := &fieldpath.Set{}
		if err := have.FromJSON(bytes.NewReader(entries[i].FieldsV1.Raw)); err != nil {
			return nil, fmt.Errorf("managedFields entry of %s: %w", owner, err)
		}
		set = set.Union(have)
	}
	var err error
	entries[i].FieldsV1, err = fieldsV1Of(set)
	return entries, err
}

func fieldsV1Of(s *fieldpath.Set) (*metav1.FieldsV1, error) {
	raw, err := s.ToJSON()
	if err != nil {
		return nil, err
	}
	return &metav1.FieldsV1{Raw: raw}, nil
}

func orEmpty(s *fieldpath.Set) *fieldpath.Set {
	if s == nil {
		return &fieldpath.Set{}
	}
	return s
}

// writeManagedFields replaces obj's managedFields with entries, in one
// JSON patch through the main resource guarded by obj's resourceVersion:
// after a write meanwhile (or from a cache behind) its test fails, the
// pass returns the error, and the retry works on what it reads then.
func writeManagedFields(ctx context.Context, c client.Client, obj client.Object, entries []metav1.ManagedFieldsEntry) error {
	body, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/resourceVersion", "value": obj.GetResourceVersion()},
		{"op": "replace", "path": "/metadata/managedFields", "value": entries},
	})
	if err != nil {
		return err
	}
	return client.IgnoreNotFound(c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, body), client.FieldOwner(FieldOwner)))
}

// The handover patches a fleet's or policy's managedFields through the
// main resource.
// +kubebuilder:rbac:groups=ratelimit.sluice.dev,resources=limiterfleets;ratelimitpolicies,verbs=patch

// handOverStatus splits the status entry an older release left in obj's
// managedFields among this release's writers (migrateStatusOwners with o),
// once: without such an entry it makes no call. It reports whether it
// wrote; obj is left as it was. obj is read from the cache, which must
// keep managedFields (no TransformStripManagedFields), or this never
// sees the old entry.
func handOverStatus(ctx context.Context, c client.Client, obj client.Object, o statusOwners) (bool, error) {
	entries, changed, err := migrateStatusOwners(obj.GetManagedFields(), o)
	if err != nil || !changed {
		return false, err
	}
	logf.FromContext(ctx).Info("Handing the status fields an older release wrote to their writers",
		"object", client.ObjectKeyFromObject(obj), "kind", fmt.Sprintf("%T", obj))
	if err := writeManagedFields(ctx, c, obj.DeepCopyObject().(client.Object), entries); err != nil {
		return false, fmt.Errorf("handing over the status fields of an older release: %w", err)
	}
	return true, nil
}

// migrateFleetStatusOwners is handOverStatus of a fleet.
func migrateFleetStatusOwners(ctx context.Context, c client.Client, fleet *v1beta1.LimiterFleet) (bool, error) {
	return handOverStatus(ctx, c, fleet, fleetStatusOwners)
}

// policyStatusOwners: the policy controller writes observedGeneration,
// conditions and fleets, and removes what is left; the collector
// enforcement (ratelimitpolicy_status.go).
var policyStatusOwners = statusOwners{
	fields: map[string]string{"observedGeneration": PolicyStatusFieldOwner, "conditions": PolicyStatusFieldOwner,
		"fleets": PolicyStatusFieldOwner, "enforcement": EnforcementFieldOwner},
	conditions: map[string]string{}, fallback: PolicyStatusFieldOwner,
}
