package algo

import (
	"fmt"
	"regexp"
	"time"
	// The zone database is embedded, so that a limiter (or an operator
	// validating policies) on a host or image without /usr/share/zoneinfo
	// knows every zone; Go reads the system's database first when it has
	// one.
	_ "time/tzdata"
)

// CalendarPeriod is the length of a calendar window.
type CalendarPeriod uint8

const (
	// Day runs from midnight to midnight.
	Day CalendarPeriod = iota + 1
	// Week runs from Monday midnight to Monday midnight (ISO 8601).
	Week
	// Month runs from the first of the month at midnight to the first of
	// the next.
	Month
)

var calendarNames = [...]string{Day: "Day", Week: "Week", Month: "Month"}

func (p CalendarPeriod) String() string {
	if p >= Day && p <= Month {
		return calendarNames[p]
	}
	return fmt.Sprintf("CalendarPeriod(%d)", uint8(p))
}

// ParseCalendarPeriod returns the calendar period with the given API name.
func ParseCalendarPeriod(name string) (CalendarPeriod, error) {
	for p := Day; p <= Month; p++ {
		if calendarNames[p] == name {
			return p, nil
		}
	}
	return 0, fmt.Errorf("unknown calendar period %q", name)
}

// Calendar makes a FixedWindow's windows calendar periods in a time zone:
// days, weeks or months as a clock on the wall there counts them. A day
// lasts 23 or 25 hours when daylight saving time starts or ends, and a
// month 28 to 31 days. The zero Calendar is none: windows of Limit.Period
// aligned to the Unix epoch.
//
// Window is the one place where a calendar window's bounds are computed:
// the memory store decides with it, and the Redis store sends its bounds
// to the script (see limiter/store/redis/scripts/fixed_window_core.lua),
// so every store agrees on when a window starts and ends.
type Calendar struct {
	Period   CalendarPeriod
	Location *time.Location
}

// IsZero reports whether c is no calendar.
func (c Calendar) IsZero() bool { return c.Period == 0 }

// String is "Day in Europe/Paris".
func (c Calendar) String() string {
	if c.IsZero() {
		return "none"
	}
	return c.Period.String() + " in " + c.Location.String()
}

// Window returns the calendar window that holds t: start <= t < end.
// Consecutive windows meet: the end of one is the start of the next.
func (c Calendar) Window(t time.Time) (start, end time.Time) {
	loc := c.Location
	if loc == nil {
		loc = time.UTC
	}
	y, m, d := t.In(loc).Date()
	switch c.Period {
	case Week:
		back := (int(t.In(loc).Weekday()) + 6) % 7 // days since Monday
		start, end = startOfDay(y, m, d-back, loc), startOfDay(y, m, d-back+7, loc)
	case Month:
		start, end = startOfDay(y, m, 1, loc), startOfDay(y, m+1, 1, loc)
	default:
		start, end = startOfDay(y, m, d, loc), startOfDay(y, m, d+1, loc)
	}
	return start, end
}

// startOfDay is the first instant whose date in loc is y-m-d or later
// (d and m may overflow, as for time.Date). It is midnight, unless the
// clocks skip midnight that day: then it is the instant they jump, such as
// 01:00 in Santiago on the day daylight saving time starts.
func startOfDay(y int, m time.Month, d int, loc *time.Location) time.Time {
	y, m, d = time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Date() // normalised
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	// In a gap time.Date may answer with the offset in force after it, an
	// instant of the day before: the day starts where that offset ends.
	if ty, tm, td := t.Date(); ty < y || (ty == y && (tm < m || (tm == m && td < d))) {
		_, t = t.ZoneBounds()
	}
	return t
}

// timeZoneName is what a time zone name may look like: an IANA name such
// as "America/Argentina/Buenos_Aires", "Etc/GMT+5" or "UTC". The CRD holds
// rate.timeZone to the same pattern.
var timeZoneName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$`)

// IsTimeZoneName reports whether name looks like an IANA time zone name,
// whether or not the database holds it. "Local" (the host's zone, which
// differs between hosts), offsets and paths do not.
func IsTimeZoneName(name string) bool {
	return timeZoneName.MatchString(name) && name != "Local"
}

// LoadTimeZone returns the IANA time zone of the given name (see
// IsTimeZoneName).
func LoadTimeZone(name string) (*time.Location, error) {
	if !IsTimeZoneName(name) {
		return nil, fmt.Errorf("%q is not an IANA time zone name such as Europe/Paris or UTC", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not a time zone of the IANA database", name)
	}
	return loc, nil
}
