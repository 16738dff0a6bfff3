package config

import (
	"regexp"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// Messages of the CEL rules of penalties, repeated word for word.
const (
	policyPenaltyDurationMsg  = "duration must be between 1s and 720h (30 days)"
	policyPenaltyWithinMsg    = "within must be between 1s and 720h"
	policyPenaltyReasonMsg    = "reason must be printable ASCII: it is sent as a header"
	policyLocalTierPenaltyMsg = "spec.localTier is not supported with spec.penalty"
	policyPenaltyHoldMsg      = "spec.penalty is not supported with Concurrency or spec.reserve: their checks hold what they take apart from the exact decision that counts a penalty's denials"
	policyPenaltySoftMsg      = "spec.penalty does not apply to a soft policy, which never denies: use it on the hard limit"
)

var printableASCII = regexp.MustCompile(`^[ -~]+$`)

// validatePolicyPenalty checks spec.penalty (fld is spec), as the CRD's
// schema and rules do.
func validatePolicyPenalty(s *v1alpha1.RateLimitPolicySpec, fld *field.Path) field.ErrorList {
	p := s.Penalty
	if p == nil {
		return nil
	}
	var errs field.ErrorList
	pfld := fld.Child("penalty")
	if p.Duration.Duration == 0 {
		errs = append(errs, field.Required(pfld.Child("duration"), policyPenaltyDurationMsg))
	} else {
		errs = append(errs, validatePolicyDuration(p.Duration.Duration, v1alpha1.MinPenaltyDuration, v1alpha1.MaxPenaltyDuration,
			policyPenaltyDurationMsg, pfld.Child("duration"))...)
	}
	if p.After != nil {
		errs = append(errs, validatePolicyRange(int64(*p.After), 1, int64(v1alpha1.MaxPenaltyAfter), pfld.Child("after"))...)
	}
	if p.Within != nil {
		errs = append(errs, validatePolicyDuration(p.Within.Duration, v1alpha1.MinPenaltyDuration, v1alpha1.MaxPenaltyDuration,
			policyPenaltyWithinMsg, pfld.Child("within"))...)
	}
	if p.Status != nil {
		errs = append(errs, validatePolicyRange(int64(*p.Status), int64(v1alpha1.MinPenaltyStatus), int64(v1alpha1.MaxPenaltyStatus), pfld.Child("status"))...)
	}
	if p.Reason != nil {
		rerrs := validatePolicyString(*p.Reason, false, v1alpha1.MaxPenaltyReasonLength, pfld.Child("reason"))
		if len(rerrs) == 0 && !printableASCII.MatchString(*p.Reason) {
			rerrs = append(rerrs, field.Invalid(pfld.Child("reason"), *p.Reason, policyPenaltyReasonMsg))
		}
		errs = append(errs, rerrs...)
	}
	if s.LocalTierEnabled() {
		errs = append(errs, field.Forbidden(fld.Child("localTier"), policyLocalTierPenaltyMsg))
	}
	if _, holds := s.LeaseEntry(); holds {
		errs = append(errs, field.Forbidden(pfld, policyPenaltyHoldMsg))
	}
	if s.IsSoft() {
		errs = append(errs, field.Forbidden(pfld, policyPenaltySoftMsg))
	}
	return errs
}
