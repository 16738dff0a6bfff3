package storetest

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// allCases are Cases and the policy features' tables.
func allCases() []Case {
	return slices.Concat(Cases, CalendarCases, PriorityCases, PenaltyCases, CountDeniedCases)
}

// at is the step time of an instant: how long after Base it is.
func at(t time.Time) time.Duration { return t.Sub(Base) }

func utc(y int, m time.Month, d, h, min, sec int) time.Time {
	return time.Date(y, m, d, h, min, sec, 0, time.UTC)
}

func zone(name string) *time.Location {
	loc, err := algo.LoadTimeZone(name)
	if err != nil {
		panic(err)
	}
	return loc
}

func calendar(n int64, p algo.CalendarPeriod, tz string) algo.Limit {
	return algo.Limit{Algorithm: algo.FixedWindow, Limit: n, Burst: n, Calendar: algo.Calendar{Period: p, Location: zone(tz)}}
}

const (
	h = time.Hour
	d = 24 * time.Hour
)

// CalendarCases are calendar quotas (FixedWindow in calendar windows):
// months of 28, 30 and 31 days, and days and weeks that lose or gain an
// hour when daylight saving time starts or ends. Times are written in UTC
// beside their local time.
var CalendarCases = []Case{
	{
		Name:  "FixedWindow 3 per calendar month, UTC",
		Limit: calendar(3, algo.Month, "UTC"),
		Steps: []Step{
			{At: 0, Cost: 1, Allowed: true, Remaining: 2, Reset: 31 * d}, // January: 31 days
			{At: 31*d - s, Cost: 2, Allowed: true, Remaining: 0, Reset: s},
			{At: 31*d - time.Microsecond, Cost: 1, Allowed: false, Remaining: 0, Reset: time.Microsecond, Retry: time.Microsecond},
			{At: 31 * d, Cost: 3, Allowed: true, Remaining: 0, Reset: 28 * d}, // February 2026: 28 days
			{At: 45 * d, Cost: 1, Allowed: false, Remaining: 0, Reset: 14 * d, Retry: 14 * d},
			{At: 59 * d, Cost: 0, Allowed: true, Remaining: 3, Reset: 31 * d},                         // March 1st
			{At: at(utc(2026, 4, 30, 12, 0, 0)), Cost: 1, Allowed: true, Remaining: 2, Reset: 12 * h}, // April: 30 days
			{At: at(utc(2026, 5, 1, 0, 0, 0)), Cost: 1, Allowed: true, Remaining: 2, Reset: 31 * d},
			{At: at(utc(2028, 2, 10, 0, 0, 0)), Cost: 1, Allowed: true, Remaining: 2, Reset: 20 * d}, // February 2028: 29 days
		},
	},
	{
		// New York: EST (UTC-5) until 2026-03-08 02:00, then EDT (UTC-4)
		// until 2026-11-01 02:00. Midnight is 05:00 UTC in winter, 04:00
		// in summer.
		Name:  "FixedWindow 2 per calendar day, America/New_York",
		Limit: calendar(2, algo.Day, "America/New_York"),
		Steps: []Step{
			{At: 0, Cost: 1, Allowed: true, Remaining: 1, Reset: 5 * h},      // Dec 31 19:00 EST
			{At: 5 * h, Cost: 1, Allowed: true, Remaining: 1, Reset: 24 * h}, // Jan 1 00:00 EST
			// Mar 8 lasts 23 hours: 05:00 UTC to Mar 9 04:00 UTC.
			{At: at(utc(2026, 3, 8, 5, 0, 0)), Cost: 2, Allowed: true, Remaining: 0, Reset: 23 * h},
			{At: at(utc(2026, 3, 8, 12, 0, 0)), Cost: 1, Allowed: false, Remaining: 0, Reset: 16 * h, Retry: 16 * h}, // 08:00 EDT
			{At: at(utc(2026, 3, 9, 3, 59, 59)), Cost: 0, Allowed: true, Remaining: 0, Reset: s},                     // Mar 8 23:59:59 EDT
			{At: at(utc(2026, 3, 9, 4, 0, 0)), Cost: 1, Allowed: true, Remaining: 1, Reset: 24 * h},                  // Mar 9 00:00 EDT
			// Nov 1 lasts 25 hours: 04:00 UTC to Nov 2 05:00 UTC; 01:30
			// comes twice.
			{At: at(utc(2026, 11, 1, 4, 0, 0)), Cost: 1, Allowed: true, Remaining: 1, Reset: 25 * h},
			{At: at(utc(2026, 11, 1, 5, 30, 0)), Cost: 1, Allowed: true, Remaining: 0, Reset: 23*h + 30*time.Minute},                                // 01:30 EDT
			{At: at(utc(2026, 11, 1, 6, 30, 0)), Cost: 1, Allowed: false, Remaining: 0, Reset: 22*h + 30*time.Minute, Retry: 22*h + 30*time.Minute}, // 01:30 EST
			{At: at(utc(2026, 11, 2, 4, 59, 59)), Cost: 0, Allowed: true, Remaining: 0, Reset: s},                                                   // Nov 1 23:59:59 EST
			{At: at(utc(2026, 11, 2, 5, 0, 0)), Cost: 0, Allowed: true, Remaining: 2, Reset: 24 * h},
		},
	},
	{
		// Paris: CET (UTC+1) until 2026-03-29 02:00, then CEST (UTC+2)
		// until 2026-10-25 03:00. Weeks start on Monday at midnight.
		Name:  "FixedWindow 5 per calendar week, Europe/Paris",
		Limit: calendar(5, algo.Week, "Europe/Paris"),
		Steps: []Step{
			// Thu Jan 1 01:00 CET: the week of Mon Dec 29 ends Mon Jan 5
			// 00:00 CET, Jan 4 23:00 UTC.
			{At: 0, Cost: 1, Allowed: true, Remaining: 4, Reset: 3*d + 23*h},
			// The week of Mon Mar 23 00:00 CET (Mar 22 23:00 UTC) lasts 167
			// hours: it ends Mon Mar 30 00:00 CEST, Mar 29 22:00 UTC.
			{At: at(utc(2026, 3, 22, 23, 0, 0)), Cost: 1, Allowed: true, Remaining: 4, Reset: 167 * h},
			{At: at(utc(2026, 3, 25, 12, 0, 0)), Cost: 4, Allowed: true, Remaining: 0, Reset: 106 * h},
			{At: at(utc(2026, 3, 29, 21, 59, 59)), Cost: 1, Allowed: false, Remaining: 0, Reset: s, Retry: s}, // Sun 23:59:59 CEST
			{At: at(utc(2026, 3, 29, 22, 0, 0)), Cost: 1, Allowed: true, Remaining: 4, Reset: 168 * h},        // Mon 00:00 CEST
			// The week of Mon Oct 19 00:00 CEST (Oct 18 22:00 UTC) lasts
			// 169 hours: it ends Mon Oct 26 00:00 CET, Oct 25 23:00 UTC.
			{At: at(utc(2026, 10, 18, 22, 0, 0)), Cost: 5, Allowed: true, Remaining: 0, Reset: 169 * h},
			{At: at(utc(2026, 10, 25, 22, 30, 0)), Cost: 1, Allowed: false, Remaining: 0, Reset: 30 * time.Minute, Retry: 30 * time.Minute}, // Sun 23:30 CET
			{At: at(utc(2026, 10, 25, 23, 0, 0)), Cost: 0, Allowed: true, Remaining: 5, Reset: 168 * h},
		},
	},
}

// PriorityCases are priority shedding: requests of different priorities
// spend one counter, each leaving its Headroom of the capacity for higher
// priorities (shares of 100%, 80% and 50% of 10 are reserves of 0, 2 and
// 5). A reserve of the whole capacity (a share of 0%) admits nothing.
var PriorityCases = []Case{
	{
		Name:  "TokenBucket 10/s burst 10, priorities",
		Limit: limit(algo.TokenBucket, 10, s, 10), // one token per 100ms
		Steps: []Step{
			{At: 0, Cost: 4, Headroom: 5, Allowed: true, Remaining: 1, Reset: 400 * ms},                   // 10 tokens: 4+5 fit, 6 left
			{At: 0, Cost: 2, Headroom: 5, Allowed: false, Remaining: 1, Reset: 400 * ms, Retry: 100 * ms}, // 7 needed, 6 there
			{At: 0, Cost: 2, Headroom: 2, Allowed: true, Remaining: 2, Reset: 600 * ms},                   // 4 left
			{At: 0, Cost: 4, Headroom: 0, Allowed: true, Remaining: 0, Reset: s},                          // critical takes the rest
			{At: 0, Cost: 1, Headroom: 0, Allowed: false, Remaining: 0, Reset: s, Retry: 100 * ms},
			{At: 300 * ms, Cost: 1, Headroom: 2, Allowed: true, Remaining: 0, Reset: 800 * ms},                   // 3 refilled: 1+2 fit
			{At: 300 * ms, Cost: 1, Headroom: 5, Allowed: false, Remaining: 0, Reset: 800 * ms, Retry: 400 * ms}, // 6 needed, 2 there
			{At: 300 * ms, Cost: 6, Headroom: 5, Allowed: false, Remaining: 0, Reset: 800 * ms, Retry: algo.Never},
			{At: 300 * ms, Cost: 0, Headroom: 10, Allowed: false, Remaining: 0, Reset: 800 * ms, Retry: 800 * ms}, // 0%: only a full bucket
		},
	},
	{
		Name:  "GCRA 10/s burst 10, priorities",
		Limit: limit(algo.GCRA, 10, s, 10), // the same admissions as the bucket above
		Steps: []Step{
			{At: 0, Cost: 4, Headroom: 5, Allowed: true, Remaining: 1, Reset: 400 * ms},
			{At: 0, Cost: 2, Headroom: 5, Allowed: false, Remaining: 1, Reset: 400 * ms, Retry: 100 * ms},
			{At: 0, Cost: 2, Headroom: 2, Allowed: true, Remaining: 2, Reset: 600 * ms},
			{At: 0, Cost: 4, Headroom: 0, Allowed: true, Remaining: 0, Reset: s},
			{At: 0, Cost: 1, Headroom: 0, Allowed: false, Remaining: 0, Reset: s, Retry: 100 * ms},
			{At: 300 * ms, Cost: 1, Headroom: 2, Allowed: true, Remaining: 0, Reset: 800 * ms},
			{At: 300 * ms, Cost: 1, Headroom: 5, Allowed: false, Remaining: 0, Reset: 800 * ms, Retry: 400 * ms},
			{At: 300 * ms, Cost: 6, Headroom: 5, Allowed: false, Remaining: 0, Reset: 800 * ms, Retry: algo.Never},
			{At: 300 * ms, Cost: 0, Headroom: 10, Allowed: false, Remaining: 0, Reset: 800 * ms, Retry: 800 * ms},
		},
	},
	{
		Name:  "FixedWindow 10/min, priorities",
		Limit: limit(algo.FixedWindow, 10, time.Minute, 0),
		Steps: []Step{
			{At: 0, Cost: 5, Headroom: 5, Allowed: true, Remaining: 0, Reset: 60 * s}, // batch fills its 50%
			{At: 10 * s, Cost: 1, Headroom: 5, Allowed: false, Remaining: 0, Reset: 50 * s, Retry: 50 * s},
			{At: 10 * s, Cost: 3, Headroom: 2, Allowed: true, Remaining: 0, Reset: 50 * s}, // default fills its 80%
			{At: 10 * s, Cost: 1, Headroom: 2, Allowed: false, Remaining: 0, Reset: 50 * s, Retry: 50 * s},
			{At: 10 * s, Cost: 2, Headroom: 0, Allowed: true, Remaining: 0, Reset: 50 * s}, // critical the rest
			{At: 10 * s, Cost: 9, Headroom: 2, Allowed: false, Remaining: 0, Reset: 50 * s, Retry: algo.Never},
			{At: 60 * s, Cost: 1, Headroom: 10, Allowed: false, Remaining: 0, Reset: 60 * s, Retry: algo.Never}, // 0%
			{At: 60 * s, Cost: 0, Headroom: 10, Allowed: true, Remaining: 0, Reset: 60 * s},
			{At: 60 * s, Cost: 0, Headroom: 0, Allowed: true, Remaining: 10, Reset: 60 * s},
		},
	},
	{
		Name:  "SlidingWindow 10/s, priorities",
		Limit: limit(algo.SlidingWindow, 10, s, 0),
		Steps: []Step{
			{At: 0, Cost: 4, Headroom: 5, Allowed: true, Remaining: 1, Reset: 2 * s},
			// 4+2 > 5; at 1.25s the first window weighs 4×0.75 = 3, and 3+2 fits.
			{At: 500 * ms, Cost: 2, Headroom: 5, Allowed: false, Remaining: 1, Reset: 1500 * ms, Retry: 750 * ms},
			{At: 500 * ms, Cost: 6, Headroom: 0, Allowed: true, Remaining: 0, Reset: 1500 * ms},
			{At: 1500 * ms, Cost: 1, Headroom: 2, Allowed: true, Remaining: 2, Reset: 1500 * ms}, // 10×0.5 + 1 = 6 of 8
			// 6+3 > 8; at 1.6s 10×0.4 + 1 + 3 = 8 fits.
			{At: 1500 * ms, Cost: 3, Headroom: 2, Allowed: false, Remaining: 2, Reset: 1500 * ms, Retry: 100 * ms},
			{At: 1500 * ms, Cost: 9, Headroom: 2, Allowed: false, Remaining: 2, Reset: 1500 * ms, Retry: algo.Never},
		},
	},
	{
		Name:  "SlidingLog 5/s, priorities",
		Limit: limit(algo.SlidingLog, 5, s, 0),
		Steps: []Step{
			{At: 0, Cost: 2, Headroom: 2, Allowed: true, Remaining: 1, Reset: s},
			{At: 200 * ms, Cost: 2, Headroom: 2, Allowed: false, Remaining: 1, Reset: 800 * ms, Retry: 800 * ms}, // an entry of 0 must leave
			{At: 200 * ms, Cost: 3, Headroom: 0, Allowed: true, Remaining: 0, Reset: s},
			// The entries of 0 left; 3 of 3 used: the oldest of 200ms must leave.
			{At: s, Cost: 1, Headroom: 2, Allowed: false, Remaining: 0, Reset: 200 * ms, Retry: 200 * ms},
			{At: s, Cost: 6, Headroom: 0, Allowed: false, Remaining: 2, Reset: 200 * ms, Retry: algo.Never},
		},
	},
}

func withPenalty(l algo.Limit, d time.Duration, after int64, within time.Duration) algo.Limit {
	l.Penalty = algo.Penalty{Duration: d, After: after, Within: within}
	return l
}

// PenaltyCases are penalties: denials count as strikes
// (algo.Limit.Strikes: of a cost above 0, with no unit left, at the full
// capacity) within a window from the first; the After-th penalizes the key
// for Duration, during which everything it sends is denied and its
// counter is left alone; the next count starts when the penalty ends.
var PenaltyCases = []Case{
	{
		Name:  "FixedWindow 2/min, 5m penalty after 3 denials within 1m",
		Limit: withPenalty(limit(algo.FixedWindow, 2, time.Minute, 0), 5*time.Minute, 3, time.Minute),
		Steps: []Step{
			{At: 0, Cost: 1, Allowed: true, Remaining: 1, Reset: 60 * s},
			{At: 0, Cost: 1, Allowed: true, Remaining: 0, Reset: 60 * s},
			{At: 10 * s, Cost: 1, Allowed: false, Remaining: 0, Reset: 50 * s, Retry: 50 * s}, // strike 1, the count from 10s
			{At: 20 * s, Cost: 0, Allowed: true, Remaining: 0, Reset: 40 * s},                 // a peek is no strike
			{At: 30 * s, Cost: 1, Allowed: false, Remaining: 0, Reset: 30 * s, Retry: 30 * s}, // strike 2
			{At: 65 * s, Cost: 2, Allowed: true, Remaining: 0, Reset: 55 * s},                 // a new window
			// Strike 3 within a minute of the first: penalized until 369s.
			{At: 69 * s, Cost: 2, Allowed: false, Remaining: 0, Reset: 5 * time.Minute, Retry: 5 * time.Minute, Penalized: true},
			{At: 70 * s, Cost: 1, Allowed: false, Remaining: 0, Reset: 299 * s, Retry: 299 * s, Penalized: true},
			{At: 70 * s, Cost: 0, Allowed: false, Remaining: 0, Reset: 299 * s, Retry: 299 * s, Penalized: true}, // whatever it sends
			{At: 368 * s, Cost: 1, Allowed: false, Remaining: 0, Reset: s, Retry: s, Penalized: true},
			// The penalty ended, the counter was left alone: the window of
			// 360s holds nothing.
			{At: 369 * s, Cost: 1, Allowed: true, Remaining: 1, Reset: 51 * s},
			{At: 370 * s, Cost: 2, Allowed: false, Remaining: 1, Reset: 50 * s, Retry: 50 * s}, // a cost above what remains: no strike
			{At: 371 * s, Cost: 1, Allowed: true, Remaining: 0, Reset: 49 * s},
			{At: 372 * s, Cost: 1, Allowed: false, Remaining: 0, Reset: 48 * s, Retry: 48 * s},     // strike 1 of the count from 369s, the penalty's end
			{At: 430 * s, Cost: 5, Allowed: false, Remaining: 2, Reset: 50 * s, Retry: algo.Never}, // a cost above the capacity: no strike
			{At: 430 * s, Cost: 2, Allowed: true, Remaining: 0, Reset: 50 * s},
			{At: 431 * s, Cost: 1, Allowed: false, Remaining: 0, Reset: 49 * s, Retry: 49 * s},                    // that count ended at 429s: strike 1 again
			{At: 432 * s, Cost: 1, Allowed: false, Remaining: 0, Reset: 48 * s, Retry: 48 * s},                    // strike 2
			{At: 433 * s, Cost: 1, Allowed: false, Remaining: 0, Reset: 300 * s, Retry: 300 * s, Penalized: true}, // strike 3
		},
	},
	{
		Name:  "FixedWindow 2/min, 10s penalty on the first denial, priorities",
		Limit: withPenalty(limit(algo.FixedWindow, 2, time.Minute, 0), 10*s, 1, time.Minute),
		Steps: []Step{
			{At: 0, Cost: 1, Allowed: true, Remaining: 1, Reset: 60 * s},
			{At: s, Cost: 1, Headroom: 1, Allowed: false, Remaining: 0, Reset: 59 * s, Retry: 59 * s}, // a priority share's denial: no strike
			{At: 2 * s, Cost: 1, Allowed: true, Remaining: 0, Reset: 58 * s},
			{At: 3 * s, Cost: 1, Headroom: 1, Allowed: false, Remaining: 0, Reset: 57 * s, Retry: 57 * s}, // nor with nothing left
			{At: 4 * s, Cost: 1, Allowed: false, Remaining: 0, Reset: 10 * s, Retry: 10 * s, Penalized: true},
		},
	},
	{
		Name:  "TokenBucket 1/s burst 1, 10s penalty on the first denial",
		Limit: withPenalty(limit(algo.TokenBucket, 1, s, 1), 10*s, 1, time.Minute),
		Steps: []Step{
			{At: 0, Cost: 1, Allowed: true, Remaining: 0, Reset: s},
			{At: 500 * ms, Cost: 1, Allowed: false, Remaining: 0, Reset: 10 * s, Retry: 10 * s, Penalized: true},
			{At: 5 * s, Cost: 1, Allowed: false, Remaining: 0, Reset: 5500 * ms, Retry: 5500 * ms, Penalized: true},
			{At: 10500 * ms, Cost: 1, Allowed: true, Remaining: 0, Reset: s}, // served again, from a full bucket
			{At: 10600 * ms, Cost: 1, Allowed: false, Remaining: 0, Reset: 10 * s, Retry: 10 * s, Penalized: true},
		},
	},
}

// RunFeaturesTogether drives two stores with the same random decisions on
// limits that use every policy feature at once, each request with a
// random reserve and, often, an idempotency key: a calendar FixedWindow
// with a penalty, and a TokenBucket with a penalty. Every decision must
// agree. It holds the argument layout of all features together (the
// conformance tables exercise them one at a time).
func RunFeaturesTogether(t *testing.T, a, b NewStore, steps int) {
	limits := []algo.Limit{
		withPenalty(calendar(6, algo.Day, "Australia/Lord_Howe"), 2*time.Hour, 2, 3*time.Hour),
		withPenalty(limit(algo.TokenBucket, 5, 10*s, 5), 1500*ms, 2, 5*s),
	}
	for i, lim := range limits {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			clock := NewClock()
			sa, sb := a(t, clock.Now), b(t, clock.Now)
			rng := rand.New(rand.NewPCG(uint64(i), 23))
			keys := []store.Key{KeyFor(t, "k1"), KeyFor(t, "k2")}
			idem := []store.Key{{}, {}, IdemKey(t, "i1"), IdemKey(t, "i2")}
			// Days of half an hour of DST change in Lord Howe (April 5
			// 2026), steps of minutes for the calendar, milliseconds for
			// the bucket.
			now, unit := time.Date(2026, 4, 4, 12, 0, 0, 0, time.UTC), 20*time.Minute
			if lim.Calendar.IsZero() {
				now, unit = Base, 100*ms
			}
			var penalized, replayed, denied int
			for j := range steps {
				now = now.Add(time.Duration(rng.IntN(10)) * unit / 4)
				clock.Set(now)
				req := store.Request{Key: keys[rng.IntN(len(keys))], Limit: lim, Cost: int64(rng.IntN(4)),
					Idempotency: idem[rng.IntN(len(idem))]}
				if rng.IntN(2) == 0 {
					// Half at the full capacity, which alone strikes.
					req.Limit.Headroom = int64(rng.IntN(3))
				}
				ra, errA := sa.Take(context.Background(), req)
				rb, errB := sb.Take(context.Background(), req)
				if errA != nil || errB != nil {
					t.Fatalf("step %d: errors %v / %v", j, errA, errB)
				}
				if ra != rb {
					t.Fatalf("step %d (at %v, cost %d, reserve %d, idempotent %v): stores disagree\n a %+v\n b %+v",
						j, now, req.Cost, req.Limit.Headroom, req.HasIdempotency(), ra, rb)
				}
				switch {
				case ra.Penalized:
					penalized++
				case ra.Replayed:
					replayed++
				case !ra.Allowed:
					denied++
				}
			}
			// The sequence must reach every feature, or it proves little.
			if penalized == 0 || replayed == 0 || denied == 0 {
				t.Errorf("%d steps: %d penalized, %d replayed, %d other denials; want some of each", steps, penalized, replayed, denied)
			}
		})
	}
}

func countDenied(l algo.Limit) algo.Limit {
	l.CountDenied = true
	return l
}

// CountDeniedCases are a FixedWindow that counts denied costs too
// (algo.Limit.CountDenied), as envoyproxy/ratelimit counts: a denial
// spends what it asked, so the count passes the limit and a later, smaller
// cost is denied as well until the window ends.
var CountDeniedCases = []Case{
	{
		Name:  "FixedWindow 3/min, denied costs count",
		Limit: countDenied(limit(algo.FixedWindow, 3, time.Minute, 0)),
		Steps: []Step{
			{At: 0, Cost: 2, Allowed: true, Remaining: 1, Reset: 60 * s},
			{At: 0, Cost: 2, Allowed: false, Remaining: 0, Reset: 60 * s, Retry: 60 * s},      // 4 counted
			{At: 10 * s, Cost: 1, Allowed: false, Remaining: 0, Reset: 50 * s, Retry: 50 * s}, // 5: a plain FixedWindow would allow it
			{At: 10 * s, Cost: 0, Allowed: false, Remaining: 0, Reset: 50 * s, Retry: 50 * s},
			{At: 60 * s, Cost: 1, Allowed: true, Remaining: 2, Reset: 60 * s},
			{At: 60 * s, Cost: 5, Allowed: false, Remaining: 0, Reset: 60 * s, Retry: algo.Never},
		},
	},
}
