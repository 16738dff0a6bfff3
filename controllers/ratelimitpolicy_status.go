package controllers

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/structured-merge-diff/v4/fieldpath"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// A RateLimitPolicy's status has two writers, each the only writer of its
// fields. Each server-side applies its fields alone to the status
// subresource under its own field manager, so neither can erase the other's:
// the API server removes a field only when the manager that owns it leaves it
// out of its next apply.
const (
	// PolicyStatusFieldOwner is the policy controller: it owns
	// status.observedGeneration, status.conditions and status.fleets.
	PolicyStatusFieldOwner = "sluice-operator-policy"
	// EnforcementFieldOwner is the enforcement stats collector: it owns
	// status.enforcement.
	EnforcementFieldOwner = "sluice-operator-collector"
)

// policyConditionTypes are the condition types the policy controller
// writes, and the only ones its apply carries: one it owns and no longer
// writes (an older release's, or one written under its name) is left
// out, and so removed.
var policyConditionTypes = []string{v1beta1.AcceptedCondition, v1beta1.EnforcedCondition, v1beta1.DegradedCondition}

// applyConditions writes the policy controller's part of st to pol's
// status: observedGeneration, the conditions of policyConditionTypes and
// fleets, by server-side apply under PolicyStatusFieldOwner. st.Enforcement
// is the collector's and is left out (see applyEnforcement), and so are
// conditions of other types.
func applyConditions(ctx context.Context, c client.Client, pol *v1beta1.RateLimitPolicy, st *v1beta1.RateLimitPolicyStatus) error {
	mine := st.DeepCopy()
	mine.Enforcement = nil
	mine.Conditions = slices.DeleteFunc(mine.Conditions, func(c metav1.Condition) bool {
		return !slices.Contains(policyConditionTypes, c.Type)
	})
	return applyPolicyStatus(ctx, c, pol, PolicyStatusFieldOwner, mine)
}

// ownsUnwrittenCondition reports whether, in an object's managedFields,
// manager's apply owns a status condition of a type it does not write
// (written): its next apply removes it. A condition another manager owns
// is not its to remove, and does not count. The policy controller asks it
// of policyConditionTypes, each fleet status writer of its
// fleetConditionOwners.
func ownsUnwrittenCondition(entries []metav1.ManagedFieldsEntry, manager string, written []string) bool {
	for _, e := range entries {
		if e.Manager != manager || e.Operation != metav1.ManagedFieldsOperationApply ||
			e.Subresource != "status" || e.FieldsV1 == nil {
			continue
		}
		set := &fieldpath.Set{}
		if err := set.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
			return true // unreadable: one more apply says what it owns
		}
		unwritten := false
		set.Iterate(func(p fieldpath.Path) {
			if t, ok := conditionTypeOf(p); ok && !slices.Contains(written, t) {
				unwritten = true
			}
		})
		if unwritten {
			return true
		}
	}
	return false
}

// applyEnforcement writes pol's status.enforcement as e, by server-side
// apply under EnforcementFieldOwner: the fields e leaves out are removed,
// and the policy controller's fields are left as they are.
func applyEnforcement(ctx context.Context, c client.Client, pol *v1beta1.RateLimitPolicy, e *v1beta1.EnforcementStatus) error {
	return applyPolicyStatus(ctx, c, pol, EnforcementFieldOwner, &v1beta1.RateLimitPolicyStatus{Enforcement: e})
}

// policyStatusApply is the body of a server-side apply to a policy's status:
// the object's identity and the status fields of one writer, nothing else.
type policyStatusApply struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        policyStatusApplyMeta          `json:"metadata"`
	Status          *v1beta1.RateLimitPolicyStatus `json:"status"`
}

type policyStatusApplyMeta struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// ResourceVersion, when set, is the apply's precondition: it fails
	// with a conflict once the object changed since.
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// applyPolicyStatus server-side applies st, as all the status owner writes,
// to pol's status subresource. Every field of RateLimitPolicyStatus is
// omitted when empty, so st carries exactly the fields the owner set. The
// owner forces ownership: it is its fields' only writer, and takes over
// those an earlier release wrote by update.
func applyPolicyStatus(ctx context.Context, c client.Client, pol *v1beta1.RateLimitPolicy, owner string, st *v1beta1.RateLimitPolicyStatus) error {
	body, err := json.Marshal(policyStatusApply{
		TypeMeta: metav1.TypeMeta{APIVersion: v1beta1.GroupVersion.String(), Kind: "RateLimitPolicy"},
		Metadata: policyStatusApplyMeta{Namespace: pol.Namespace, Name: pol.Name},
		Status:   st,
	})
	if err != nil {
		return err
	}
	// pol may be the cache's own object (read without a copy): patch a
	// stand-in that names it, which the answer may overwrite.
	obj := &v1beta1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: pol.Namespace, Name: pol.Name}}
	return client.IgnoreNotFound(c.Status().Patch(ctx, obj, client.RawPatch(types.ApplyPatchType, body),
		client.FieldOwner(owner), client.ForceOwnership))
}
