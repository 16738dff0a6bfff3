package config

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// validateFeatures checks what a spec's fields say together: which
// features the limit's type and algorithm take, and which features go
// together, with the v1beta1 CRD's paths and messages. It is api/v1beta1's
// feature table (v1beta1.ValidateFeatures), which a parity test holds to
// the API server's CEL rules; fld is spec. validatePolicySpec calls it once
// each field is valid on its own.
func validateFeatures(s *v1beta1.RateLimitPolicySpec, fld *field.Path) field.ErrorList {
	return v1beta1.ValidateFeatures(s, fld)
}
