package algo

import (
	"slices"
	"sort"
	"time"
)

// window returns the index of the fixed window holding n, and how far into
// it n is (µs). Windows are aligned to the Unix epoch.
func window(n, period int64) (idx, into int64) {
	idx = n / period
	if n%period < 0 {
		idx--
	}
	return idx, n - idx*period
}

// fixedWindowAt returns the index of the fixed window holding n, how far
// into it n is, and its length (µs). A calendar window's index is its
// start.
func (l Limit) fixedWindowAt(n int64) (idx, into, period int64) {
	if l.Calendar.IsZero() {
		period = l.PeriodMicros()
		idx, into = window(n, period)
		return idx, into, period
	}
	start, end := l.Calendar.Window(time.UnixMicro(n))
	idx = start.UnixMicro()
	return idx, n - idx, end.UnixMicro() - idx
}

// fixedWindow is mirrored by fixed_window_core.lua.
func (l Limit) fixedWindow(s *State, present bool, n, cost int64, adj adjust) (Result, bool, time.Duration) {
	w, into, period := l.fixedWindowAt(n)
	count := int64(0)
	if present && s.T == w {
		count = s.N
	}
	changed := false
	if adj.credit > 0 && adj.creditWindow == w {
		count = max(0, count-adj.credit)
		changed = true
	}
	lim := l.Limit - l.Headroom // what this request may fill
	r := Result{Allowed: adj.force || count+cost <= lim}
	if r.Allowed || l.CountDenied {
		count += cost
		changed = changed || cost > 0
	}
	if changed {
		s.T, s.N = w, count
	}
	r.Remaining = max(0, lim-count)
	r.ResetAfter = time.Duration(period-into) * time.Microsecond
	if !r.Allowed {
		if cost > lim {
			r.RetryAfter = Never
		} else {
			r.RetryAfter = r.ResetAfter
		}
	}
	return r, changed, r.ResetAfter
}

// slidingWindow is mirrored by sliding_window_core.lua.
func (l Limit) slidingWindow(s *State, present bool, n, cost int64, adj adjust) (Result, bool, time.Duration) {
	period := l.PeriodMicros()
	w, into := window(n, period)
	var curr, prev int64
	if present {
		switch s.T {
		case w:
			curr, prev = s.N, s.Prev
		case w - 1:
			prev = s.N
		}
	}
	changed := false
	if adj.credit > 0 {
		switch adj.creditWindow {
		case w:
			curr, changed = max(0, curr-adj.credit), true
		case w - 1:
			prev, changed = max(0, prev-adj.credit), true
		}
	}
	p := float64(period)
	weight := float64(period-into) / p
	est := float64(prev)*weight + float64(curr)
	lim := l.Limit - l.Headroom // what this request may fill
	r := Result{Allowed: adj.force || est+float64(cost) <= float64(lim)+eps}
	if r.Allowed {
		curr += cost
		est += float64(cost)
		changed = changed || cost > 0
	}
	if changed {
		s.T, s.N, s.Prev = w, curr, prev
	}
	r.Remaining = floorTokens(float64(lim) - est)
	switch {
	case curr > 0:
		r.ResetAfter = time.Duration(2*period-into) * time.Microsecond
	case prev > 0:
		r.ResetAfter = time.Duration(period-into) * time.Microsecond
	}
	if !r.Allowed {
		need := float64(lim - cost) // usage that may remain for cost to fit
		switch {
		case cost > lim:
			r.RetryAfter = Never
		case float64(curr) <= need && prev > 0:
			// The previous window decays enough before this one ends.
			r.RetryAfter = ceilMicros(float64(period-into) - (need-float64(curr))*p/float64(prev))
		default:
			// Wait into the next window, where this window's count decays.
			r.RetryAfter = time.Duration(period-into)*time.Microsecond + ceilMicros(p-need*p/float64(curr))
		}
	}
	return r, changed, time.Duration(2*period-into) * time.Microsecond
}

// slidingLog is mirrored by sliding_log_core.lua. It is a weighted log:
// one entry per admitted request carrying its cost (as a running total),
// which decides exactly as a log of one entry per unit would: cost is
// admitted iff the units logged in the window plus cost fit, and each
// request's units leave the window at its own time. Every step is a binary
// search but pruning, which drops each entry once, and an insertion behind
// newer entries (the clock went back), which moves the totals of those
// newer entries: neither grows with cost.
func (l Limit) slidingLog(s *State, present bool, n, cost int64) (Result, bool, time.Duration) {
	period := l.PeriodMicros()
	var all []LogEntry // the array, dropped entries first
	var head int
	var base int64
	if present {
		all, head, base = s.Log, s.LogHead, s.LogBase
	}
	log := all[head:]
	// Drop entries at or before n-period: they left the window.
	drop := sort.Search(len(log), func(i int) bool { return log[i].At > n-period })
	if drop > 0 {
		base = log[drop-1].Total
		log = log[drop:]
		head += drop
		if cap(all) > 4*len(log)+16 {
			// Mostly dead: a smaller array.
			all, head = slices.Clone(log), 0
			log = all
		}
	}
	var count int64
	if len(log) > 0 {
		count = log[len(log)-1].Total - base
	}
	lim := l.Limit - l.Headroom // what this request may fill
	r := Result{Allowed: count+cost <= lim}
	write := r.Allowed && cost > 0
	if write {
		// After every entry of time n or earlier; a clock that went back
		// inserts before newer entries, whose totals move up by cost.
		i := sort.Search(len(log), func(i int) bool { return log[i].At > n })
		prev := base
		if i > 0 {
			prev = log[i-1].Total
		}
		for j := i; j < len(log); j++ {
			log[j].Total += cost
		}
		if len(all) == cap(all) && head > 0 {
			// Full: reuse the dropped entries' room before growing.
			all, head = all[:copy(all, log)], 0
		}
		all = slices.Insert(all, head+i, LogEntry{At: n, Total: prev + cost})
		log = all[head:]
		count += cost
	}
	changed := write || drop > 0
	if changed {
		s.Log, s.LogHead, s.LogBase = all, head, base
	}
	r.Remaining = max(0, lim-count)
	if count > 0 {
		r.ResetAfter = time.Duration(log[len(log)-1].At+period-n) * time.Microsecond
	}
	if !r.Allowed {
		if cost > lim {
			r.RetryAfter = Never
		} else {
			// The oldest count+cost-lim units must leave the window: they
			// have left once the entry whose total reaches them has.
			k := base + count + cost - lim
			i := sort.Search(len(log), func(i int) bool { return log[i].Total >= k })
			r.RetryAfter = time.Duration(log[i].At+period-n) * time.Microsecond
		}
	}
	// A pruned-to-empty log is a fresh key: ttl 0 deletes it.
	return r, changed, r.ResetAfter
}
