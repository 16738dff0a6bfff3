package config

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// Messages of the CEL rules of priority shedding, repeated word for word.
const (
	policyPriorityUniqueMsg    = "spec.priority.levels' values must be unique"
	policyPrioritySharesMsg    = "spec.priority.levels' shares must not increase from one level to the next: list the highest priority first"
	policyPriorityDefaultMsg   = "spec.priority.default must be the value of one of spec.priority.levels"
	policyPriorityKeyMsg       = "spec.priority.key must not be one of spec.descriptors' keys: every priority shares the policy's counters"
	policyLocalTierPriorityMsg = "spec.localTier is not supported with spec.priority"
	policyPriorityLeaseMsg     = "spec.priority.key must not be the policy's lease entry (spec.concurrency.leaseEntry or spec.reserve.leaseEntry, sluice_lease by default): a descriptor that carries it ends a request"
)

// validatePolicyPriority checks spec.priority (fld is spec), as the CRD's
// schema and rules do.
func validatePolicyPriority(s *v1alpha1.RateLimitPolicySpec, fld *field.Path) field.ErrorList {
	ps := s.Priority
	if ps == nil {
		return nil
	}
	var errs field.ErrorList
	pfld := fld.Child("priority")
	errs = append(errs, validatePolicyString(ps.Key, true, v1alpha1.MaxDescriptorKeyLength, pfld.Child("key"))...)
	errs = append(errs, validatePolicyString(ps.Default, true, v1alpha1.MaxPriorityValueLength, pfld.Child("default"))...)
	lfld := pfld.Child("levels")
	switch n := len(ps.Levels); {
	case n == 0:
		errs = append(errs, field.Required(lfld, fmt.Sprintf("must have 1 to %d levels", v1alpha1.MaxPriorityLevels)))
	case n > v1alpha1.MaxPriorityLevels:
		errs = append(errs, field.TooMany(lfld, n, v1alpha1.MaxPriorityLevels))
	}
	seen := make(map[string]bool, len(ps.Levels))
	unique, decreasing, hasDefault := true, true, false
	for i, l := range ps.Levels {
		idx := lfld.Index(i)
		errs = append(errs, validatePolicyString(l.Value, true, v1alpha1.MaxPriorityValueLength, idx.Child("value"))...)
		errs = append(errs, validatePolicyRange(int64(l.Share), 0, int64(v1alpha1.MaxPriorityShare), idx.Child("share"))...)
		unique = unique && !seen[l.Value]
		seen[l.Value] = true
		decreasing = decreasing && (i == 0 || l.Share <= ps.Levels[i-1].Share)
		hasDefault = hasDefault || l.Value == ps.Default
	}
	if !unique {
		errs = append(errs, field.Invalid(lfld, levelValues(ps.Levels), policyPriorityUniqueMsg))
	}
	if !decreasing {
		errs = append(errs, field.Invalid(lfld, levelValues(ps.Levels), policyPrioritySharesMsg))
	}
	if len(ps.Levels) > 0 && !hasDefault {
		errs = append(errs, field.Invalid(pfld.Child("default"), ps.Default, policyPriorityDefaultMsg))
	}
	for _, d := range s.Descriptors {
		if d.Key == ps.Key {
			errs = append(errs, field.Invalid(pfld.Child("key"), ps.Key, policyPriorityKeyMsg))
			break
		}
	}
	if le, holds := s.LeaseEntry(); holds && le == ps.Key {
		errs = append(errs, field.Invalid(pfld.Child("key"), ps.Key, policyPriorityLeaseMsg))
	}
	if s.LocalTierEnabled() {
		errs = append(errs, field.Forbidden(fld.Child("localTier"), policyLocalTierPriorityMsg))
	}
	return errs
}

// levelValues shows levels as "value=share%, ...".
func levelValues(levels []v1alpha1.PriorityLevel) string {
	out := ""
	for i, l := range levels {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s=%d%%", l.Value, l.Share)
	}
	return out
}
