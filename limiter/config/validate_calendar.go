package config

import (
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/limiter/algo"
)

// Messages of the CEL rules of calendar quotas, repeated word for word.
const (
	policyCalendarAlgorithmMsg = "spec.rate.calendar applies only to FixedWindow"
	policyCalendarPeriodMsg    = "spec.rate.calendar replaces spec.rate.period: set only one of them"
	policyTimeZoneCalendarMsg  = "spec.rate.timeZone applies only with spec.rate.calendar"
	policyTimeZoneNameMsg      = "timeZone must be an IANA time zone name such as Europe/Paris or UTC"
	policyTimeZoneUnknownMsg   = "timeZone must be a time zone of the IANA database, such as Europe/Paris or UTC"
	policyLocalTierCalendarMsg = "spec.localTier is not supported with spec.rate.calendar"
	policyPeriodMissingMsg     = "spec.rate.period is required, unless spec.rate.calendar is set"
)

// validatePolicyCalendar checks spec.rate.calendar and spec.rate.timeZone
// (fld is spec), as the CRD's rules do.
func validatePolicyCalendar(s *v1alpha1.RateLimitPolicySpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	r, rfld := &s.Rate, fld.Child("rate")
	if tz := r.TimeZone; tz != nil {
		errs = append(errs, validatePolicyString(*tz, false, v1alpha1.MaxTimeZoneLength, rfld.Child("timeZone"))...)
		switch {
		case *tz == "": // too short
		case !algo.IsTimeZoneName(*tz):
			errs = append(errs, field.Invalid(rfld.Child("timeZone"), *tz, policyTimeZoneNameMsg))
		default:
			if _, err := algo.LoadTimeZone(*tz); err != nil {
				errs = append(errs, field.Invalid(rfld.Child("timeZone"), *tz, policyTimeZoneUnknownMsg))
			}
		}
		if r.Calendar == nil {
			errs = append(errs, field.Forbidden(rfld.Child("timeZone"), policyTimeZoneCalendarMsg))
		}
	}
	if r.Calendar == nil {
		return errs
	}
	if !slices.Contains(v1alpha1.CalendarPeriods, *r.Calendar) {
		errs = append(errs, field.NotSupported(rfld.Child("calendar"), *r.Calendar, v1alpha1.CalendarPeriods))
	}
	if r.Period.Duration != 0 {
		errs = append(errs, field.Forbidden(rfld.Child("calendar"), policyCalendarPeriodMsg))
	}
	if s.EffectiveAlgorithm() != v1alpha1.FixedWindow {
		errs = append(errs, field.Forbidden(rfld.Child("calendar"), policyCalendarAlgorithmMsg))
	}
	if s.LocalTierEnabled() {
		errs = append(errs, field.Forbidden(fld.Child("localTier"), policyLocalTierCalendarMsg))
	}
	return errs
}
