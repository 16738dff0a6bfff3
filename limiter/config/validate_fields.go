package config

import (
	"fmt"
	"regexp"
	"slices"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/limiter/algo"
)

// Checks of one field each (validateFeatures checks them together), with
// the v1beta1 CRD's messages.
const (
	policyTimeZoneNameMsg    = "timeZone must be an IANA time zone name such as Europe/Paris or UTC"
	policyTimeZoneUnknownMsg = "timeZone must be a time zone of the IANA database, such as Europe/Paris or UTC"
	policyPriorityUniqueMsg  = "priority.levels' values must be unique"
	policyPrioritySharesMsg  = "priority.levels' shares must not increase from one level to the next: list the highest priority first"
	policyPriorityDefaultMsg = "priority.default must be the value of one of priority.levels"
	policyPriorityKeyMsg     = "the priority key (LimiterFleet spec.entries.priority, priority by default; spec.priority.key in v1alpha1) must not be one of spec.descriptors' keys: every priority shares the policy's counters"
	policyPriorityLeaseMsg   = "the priority key must not be the policy's lease entry (sluice_lease by default): a descriptor that carries it ends a request"
	policyPenaltyDurationMsg = "duration must be between 1s and 720h (30 days)"
	policyPenaltyWithinMsg   = "within must be between 1s and 720h"
	policyPenaltyReasonMsg   = "reason must be printable ASCII: it is sent as a header"
	policyProblemDetailMsg   = "detail must be one line of printable text: no control characters"
)

var (
	calendarPeriods = []v1beta1.CalendarPeriod{v1beta1.CalendarDay, v1beta1.CalendarWeek, v1beta1.CalendarMonth}
	visibilities    = []v1beta1.Visibility{v1beta1.Visible, v1beta1.Hidden}
	problemTypes    = []v1beta1.ProblemType{v1beta1.QuotaExceeded, v1beta1.TemporaryReducedCapacity, v1beta1.AbnormalUsageDetected}
	printableASCII  = regexp.MustCompile(`^[ -~]+$`)
	controlCharRE   = regexp.MustCompile(`[\x00-\x1f\x7f]`)
	policyPercentRE = regexp.MustCompile(`^(100|[1-9]?[0-9])%$`)
)

func validatePolicyCalendar(c *v1beta1.Calendar, fld *field.Path) field.ErrorList {
	if c == nil {
		return nil
	}
	var errs field.ErrorList
	if !slices.Contains(calendarPeriods, c.Period) {
		errs = append(errs, field.NotSupported(fld.Child("period"), c.Period, calendarPeriods))
	}
	if tz := c.TimeZone; tz != nil {
		errs = append(errs, validatePolicyString(*tz, false, maxTimeZoneLength, fld.Child("timeZone"))...)
		switch {
		case *tz == "": // too short
		case !algo.IsTimeZoneName(*tz):
			errs = append(errs, field.Invalid(fld.Child("timeZone"), *tz, policyTimeZoneNameMsg))
		default:
			if _, err := algo.LoadTimeZone(*tz); err != nil {
				errs = append(errs, field.Invalid(fld.Child("timeZone"), *tz, policyTimeZoneUnknownMsg))
			}
		}
	}
	return errs
}

func validatePolicyLocalTier(t *v1beta1.LocalTier, fld *field.Path) field.ErrorList {
	errs := validatePolicyDuration(t.TTL, minLocalTierTTL, maxLocalTierTTL, policyTTLRangeMsg, fld.Child("ttl"))
	if o := t.MaxOvershoot; o != nil {
		ok := false
		if o.Type == intstr.Int {
			ok = o.IntVal >= 0 && o.IntVal <= maxOvershootCount
		} else {
			ok = policyPercentRE.MatchString(o.StrVal)
		}
		if !ok {
			errs = append(errs, field.Invalid(fld.Child("maxOvershoot"), o.String(), policyMaxOvershootMsg))
		}
	}
	return errs
}

func validatePolicyPriority(ps *v1beta1.PriorityShedding, fld *field.Path) field.ErrorList {
	if ps == nil {
		return nil
	}
	errs := validatePolicyString(ps.Default, true, maxPriorityValueLength, fld.Child("default"))
	lfld := fld.Child("levels")
	switch n := len(ps.Levels); {
	case n == 0:
		errs = append(errs, field.Required(lfld, fmt.Sprintf("must have 1 to %d levels", maxPriorityLevels)))
	case n > maxPriorityLevels:
		errs = append(errs, field.TooMany(lfld, n, maxPriorityLevels))
	}
	seen := make(map[string]bool, len(ps.Levels))
	unique, decreasing, hasDefault := true, true, false
	for i, l := range ps.Levels {
		idx := lfld.Index(i)
		errs = append(errs, validatePolicyString(l.Value, true, maxPriorityValueLength, idx.Child("value"))...)
		errs = append(errs, validatePolicyRange(int64(l.Share), 0, maxPriorityShare, idx.Child("share"))...)
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
		errs = append(errs, field.Invalid(fld.Child("default"), ps.Default, policyPriorityDefaultMsg))
	}
	return errs
}

// validatePriorityKey checks the priority key of a policy with priority
// levels (at fld) against its descriptors and lease entry.
func validatePriorityKey(s *v1beta1.RateLimitPolicySpec, key, lease string, holds bool, fld *field.Path) field.ErrorList {
	kfld := field.NewPath("entries", "priority")
	errs := validatePolicyString(key, true, maxDescriptorKeyLength, kfld)
	for _, d := range s.Descriptors {
		if d.Key == key {
			errs = append(errs, field.Invalid(fld, key, policyPriorityKeyMsg))
			break
		}
	}
	if holds && lease == key {
		errs = append(errs, field.Invalid(fld, key, policyPriorityLeaseMsg))
	}
	return errs
}

// levelValues shows levels as "value=share%, ...".
func levelValues(levels []v1beta1.PriorityLevel) string {
	out := ""
	for i, l := range levels {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s=%d%%", l.Value, l.Share)
	}
	return out
}

func validatePolicyPenalty(p *v1beta1.Penalty, fld *field.Path) field.ErrorList {
	if p == nil {
		return nil
	}
	var errs field.ErrorList
	if p.Duration == "" {
		errs = append(errs, field.Required(fld.Child("duration"), policyPenaltyDurationMsg))
	} else {
		errs = append(errs, validatePolicyDuration(&p.Duration, minPenalty, maxPenalty, policyPenaltyDurationMsg, fld.Child("duration"))...)
	}
	if p.After != nil {
		errs = append(errs, validatePolicyRange(int64(*p.After), 1, maxPenaltyAfter, fld.Child("after"))...)
	}
	errs = append(errs, validatePolicyDuration(p.Within, minPenalty, maxPenalty, policyPenaltyWithinMsg, fld.Child("within"))...)
	if p.Status != nil {
		errs = append(errs, validatePolicyRange(int64(*p.Status), minPenaltyStatus, maxPenaltyStatus, fld.Child("status"))...)
	}
	if p.Reason != nil {
		rerrs := validatePolicyString(*p.Reason, false, maxPenaltyReasonLength, fld.Child("reason"))
		if len(rerrs) == 0 && !printableASCII.MatchString(*p.Reason) {
			rerrs = append(rerrs, field.Invalid(fld.Child("reason"), *p.Reason, policyPenaltyReasonMsg))
		}
		errs = append(errs, rerrs...)
	}
	return errs
}

// validatePolicyResponse checks spec.response: what clients are told.
func validatePolicyResponse(r *v1beta1.Response, fld *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	if v := r.Visibility; v != nil && !slices.Contains(visibilities, *v) {
		errs = append(errs, field.NotSupported(fld.Child("visibility"), *v, visibilities))
	}
	if pr := r.Problem; pr != nil {
		pfld := fld.Child("problem")
		if pr.Type != nil && !slices.Contains(problemTypes, *pr.Type) {
			errs = append(errs, field.NotSupported(pfld.Child("type"), *pr.Type, problemTypes))
		}
		if d := pr.Detail; d != nil {
			errs = append(errs, validatePolicyString(*d, false, maxProblemDetailLength, pfld.Child("detail"))...)
			if controlCharRE.MatchString(*d) {
				errs = append(errs, field.Invalid(pfld.Child("detail"), *d, policyProblemDetailMsg))
			}
		}
	}
	return errs
}
