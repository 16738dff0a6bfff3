package algo_test

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := algo.LoadTimeZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// Windows named by hand, in local time, with their length.
func TestCalendarWindow(t *testing.T) {
	tests := []struct {
		period     algo.CalendarPeriod
		zone       string
		at         string // RFC 3339
		start, end string // RFC 3339, in the zone's offset
		length     time.Duration
	}{
		{algo.Day, "UTC", "2026-03-08T12:00:00Z", "2026-03-08T00:00:00Z", "2026-03-09T00:00:00Z", 24 * time.Hour},
		{algo.Day, "America/New_York", "2026-03-08T12:00:00Z", "2026-03-08T00:00:00-05:00", "2026-03-09T00:00:00-04:00", 23 * time.Hour},
		{algo.Day, "America/New_York", "2026-11-01T12:00:00Z", "2026-11-01T00:00:00-04:00", "2026-11-02T00:00:00-05:00", 25 * time.Hour},
		// 03:30 UTC is still Mar 7 in New York.
		{algo.Day, "America/New_York", "2026-03-08T03:30:00Z", "2026-03-07T00:00:00-05:00", "2026-03-08T00:00:00-05:00", 24 * time.Hour},
		// Lord Howe Island moves its clocks by half an hour.
		{algo.Day, "Australia/Lord_Howe", "2026-04-05T06:00:00Z", "2026-04-05T00:00:00+11:00", "2026-04-06T00:00:00+10:30", 24*time.Hour + 30*time.Minute},
		// Santiago skips midnight when daylight saving time starts: the day
		// starts at 01:00, when the clocks jump.
		{algo.Day, "America/Santiago", "2010-10-10T12:00:00Z", "2010-10-10T01:00:00-03:00", "2010-10-11T00:00:00-03:00", 23 * time.Hour},
		{algo.Day, "America/Santiago", "2010-10-10T03:30:00Z", "2010-10-09T00:00:00-04:00", "2010-10-10T01:00:00-03:00", 24 * time.Hour},
		// Samoa skipped December 30, 2011: December 29 ends when the 31st
		// starts.
		{algo.Day, "Pacific/Apia", "2011-12-30T09:00:00Z", "2011-12-29T00:00:00-10:00", "2011-12-31T00:00:00+14:00", 24 * time.Hour},
		{algo.Day, "Pacific/Apia", "2011-12-30T11:00:00Z", "2011-12-31T00:00:00+14:00", "2012-01-01T00:00:00+14:00", 24 * time.Hour},
		// Weeks start on Monday; 2026-01-01 is a Thursday.
		{algo.Week, "UTC", "2026-01-01T00:00:00Z", "2025-12-29T00:00:00Z", "2026-01-05T00:00:00Z", 7 * 24 * time.Hour},
		{algo.Week, "UTC", "2026-01-04T23:59:59Z", "2025-12-29T00:00:00Z", "2026-01-05T00:00:00Z", 7 * 24 * time.Hour},
		{algo.Week, "UTC", "2026-01-05T00:00:00Z", "2026-01-05T00:00:00Z", "2026-01-12T00:00:00Z", 7 * 24 * time.Hour},
		{algo.Week, "Europe/Paris", "2026-03-29T12:00:00Z", "2026-03-23T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 167 * time.Hour},
		{algo.Week, "Europe/Paris", "2026-10-20T12:00:00Z", "2026-10-19T00:00:00+02:00", "2026-10-26T00:00:00+01:00", 169 * time.Hour},
		{algo.Month, "UTC", "2026-02-14T00:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", 28 * 24 * time.Hour},
		{algo.Month, "UTC", "2028-02-14T00:00:00Z", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z", 29 * 24 * time.Hour},
		{algo.Month, "UTC", "2026-04-30T23:59:59Z", "2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z", 30 * 24 * time.Hour},
		{algo.Month, "UTC", "2026-12-31T23:59:59Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z", 31 * 24 * time.Hour},
		// March in Paris loses an hour; October gains one.
		{algo.Month, "Europe/Paris", "2026-03-31T21:30:00Z", "2026-03-01T00:00:00+01:00", "2026-04-01T00:00:00+02:00", 31*24*time.Hour - time.Hour},
		{algo.Month, "Europe/Paris", "2026-10-01T00:00:00Z", "2026-10-01T00:00:00+02:00", "2026-11-01T00:00:00+01:00", 31*24*time.Hour + time.Hour},
		// 2026-03-31T22:00Z is already April 1 in Paris.
		{algo.Month, "Europe/Paris", "2026-03-31T22:00:00Z", "2026-04-01T00:00:00+02:00", "2026-05-01T00:00:00+02:00", 30 * 24 * time.Hour},
	}
	parse := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range tests {
		c := algo.Calendar{Period: tc.period, Location: mustZone(t, tc.zone)}
		at := parse(tc.at)
		start, end := c.Window(at)
		if !start.Equal(parse(tc.start)) || !end.Equal(parse(tc.end)) {
			t.Errorf("%v at %s: window [%s, %s), want [%s, %s)", c, tc.at,
				start.Format(time.RFC3339), end.Format(time.RFC3339), tc.start, tc.end)
		}
		if got := end.Sub(start); got != tc.length {
			t.Errorf("%v at %s: window of %v, want %v", c, tc.at, got, tc.length)
		}
		lim := algo.Limit{Algorithm: algo.FixedWindow, Limit: 1, Calendar: c}
		if got := lim.Span(at); got != tc.length {
			t.Errorf("%v at %s: Span %v, want %v", c, tc.at, got, tc.length)
		}
	}
}

// Every instant lies in its window, and windows meet end to start, in
// zones whose clocks jump at or around midnight, by half hours, or by a
// whole day, hour by hour over years of transitions.
func TestCalendarWindowsTile(t *testing.T) {
	zones := []string{"UTC", "America/New_York", "Europe/Paris", "Australia/Lord_Howe", "America/Santiago",
		"America/Havana", "Asia/Beirut", "Pacific/Apia", "Africa/Casablanca", "Asia/Kathmandu", "Pacific/Chatham",
		"America/Sao_Paulo", "Etc/GMT+5"}
	from, to := time.Date(2008, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2013, 1, 1, 0, 0, 0, 0, time.UTC)
	if testing.Short() {
		to = time.Date(2009, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	for _, name := range zones {
		loc := mustZone(t, name)
		for _, p := range []algo.CalendarPeriod{algo.Day, algo.Week, algo.Month} {
			c := algo.Calendar{Period: p, Location: loc}
			for at := from; at.Before(to); at = at.Add(2*time.Hour + 17*time.Minute) {
				start, end := c.Window(at)
				if at.Before(start) || !at.Before(end) {
					t.Fatalf("%v: %s outside its window [%s, %s)", c, at, start, end)
				}
				if next, _ := c.Window(end); !next.Equal(end) {
					t.Fatalf("%v: window [%s, %s) is followed by one that starts at %s", c, start, end, next)
				}
				if prevStart, prevEnd := c.Window(start.Add(-time.Nanosecond)); !prevEnd.Equal(start) || !prevStart.Before(start) {
					t.Fatalf("%v: window [%s, %s) follows [%s, %s)", c, start, end, prevStart, prevEnd)
				}
			}
		}
	}
}

func TestLoadTimeZone(t *testing.T) {
	for _, name := range []string{"UTC", "Europe/Paris", "America/Argentina/Buenos_Aires", "Etc/GMT+5", "Etc/GMT-14"} {
		if _, err := algo.LoadTimeZone(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, name := range []string{"", "Local", "+02:00", "Europe/Atlantis", "../etc/passwd", "/usr/share/zoneinfo/UTC", "Europe//Paris", "Europe/Paris "} {
		if _, err := algo.LoadTimeZone(name); err == nil {
			t.Errorf("%q: loaded", name)
		}
	}
}
