/*
Copyright 2026 The Sluice Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

// CalendarPeriod is a calendar window of a FixedWindow (spec.rate.calendar).
// +kubebuilder:validation:Enum=Day;Week;Month
type CalendarPeriod string

const (
	// CalendarDay runs from midnight to midnight.
	CalendarDay CalendarPeriod = "Day"
	// CalendarWeek runs from Monday midnight to Monday midnight (ISO 8601).
	CalendarWeek CalendarPeriod = "Week"
	// CalendarMonth runs from the first of the month at midnight to the
	// first of the next.
	CalendarMonth CalendarPeriod = "Month"
)

// CalendarPeriods lists every CalendarPeriod, in the order of the CRD enum.
var CalendarPeriods = []CalendarPeriod{CalendarDay, CalendarWeek, CalendarMonth}

// DefaultTimeZone is the time zone of a calendar rate without timeZone.
const DefaultTimeZone = "UTC"

// MaxTimeZoneLength bounds rate.timeZone.
const MaxTimeZoneLength = 64

// EffectiveTimeZone returns timeZone, or UTC when unset.
func (r *Rate) EffectiveTimeZone() string {
	if r.TimeZone == nil || *r.TimeZone == "" {
		return DefaultTimeZone
	}
	return *r.TimeZone
}
