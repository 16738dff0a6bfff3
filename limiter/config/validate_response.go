package config

import (
	"regexp"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// Messages of the CEL rules on what clients are told of a policy
// (ratelimitpolicy_response_types.go), repeated word for word.
const (
	policyProblemDetailMsg = "detail must be one line of printable text: no control characters"
	policySoftShadowMsg    = "spec.soft and spec.shadow are exclusive: a soft policy marks the requests over it, a shadow one tells no client anything"
	policySoftHiddenMsg    = "spec.soft is not supported with spec.visibility Hidden: the mark on the requests over a soft limit would show its threshold; use spec.shadow for a limit that only operators see"
)

var controlCharRE = regexp.MustCompile(`[\x00-\x1f\x7f]`)

// validatePolicyResponse checks the fields that shape what clients are
// told: spec.visibility, spec.soft and spec.problem.
func validatePolicyResponse(s *v1alpha1.RateLimitPolicySpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if v := s.Visibility; v != nil && !slices.Contains(v1alpha1.Visibilities, *v) {
		errs = append(errs, field.NotSupported(fld.Child("visibility"), *v, v1alpha1.Visibilities))
	}
	if s.IsSoft() && s.IsShadow() {
		errs = append(errs, field.Forbidden(fld.Child("soft"), policySoftShadowMsg))
	}
	if s.IsSoft() && s.IsHidden() {
		errs = append(errs, field.Forbidden(fld.Child("soft"), policySoftHiddenMsg))
	}
	if pr := s.Problem; pr != nil {
		pfld := fld.Child("problem")
		if pr.Type != nil && !slices.Contains(v1alpha1.ProblemTypes, *pr.Type) {
			errs = append(errs, field.NotSupported(pfld.Child("type"), *pr.Type, v1alpha1.ProblemTypes))
		}
		if d := pr.Detail; d != nil {
			errs = append(errs, validatePolicyString(*d, false, v1alpha1.MaxProblemDetailLength, pfld.Child("detail"))...)
			if controlCharRE.MatchString(*d) {
				errs = append(errs, field.Invalid(pfld.Child("detail"), *d, policyProblemDetailMsg))
			}
		}
	}
	return errs
}
