package service

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/store"
)

// TopValues says how the hottest-descriptors sketch shows a value. Values
// may be personal data (user IDs, API keys, client IPs), so they are never
// shown as they are.
type TopValues string

const (
	// TopHash shows the first TopHashBytes of each value's HMAC-SHA-256
	// under TopOptions.Key, in hex. Pods that share the key (a fleet's,
	// from the Secret the operator keeps) show one value alike, so that
	// their reports add up; without the key, the digits can't be turned
	// back into values, not even those of a small space such as IPv4
	// addresses, by trying them all.
	TopHash TopValues = "hash"
	// TopTruncate shows the first TruncateTo bytes of each value.
	TopTruncate TopValues = "truncate"
)

// Limits of TopOptions.
const (
	MaxTopK              = 20
	DefaultTopTruncateTo = 8
	// MaxTopTruncateTo caps truncation, so that whole API keys and tokens
	// are never shown.
	MaxTopTruncateTo   = 16
	DefaultTopInterval = time.Minute
	// TopHashBytes is how much of each HMAC TopHash shows: 64 bits, 16 hex
	// digits, so that values don't collide in a report.
	TopHashBytes = 8
	// MinTopKeyBytes is the shortest TopOptions.Key.
	MinTopKeyBytes = 16
)

// TopOptions turns on a bounded sketch of each policy's hottest descriptor
// values: the counters that take the most requests, per interval. It is off
// (K 0) by default.
type TopOptions struct {
	// K is how many values each policy reports, 0 to MaxTopK; 0 is off.
	K int
	// Values is TopHash (the default) or TopTruncate.
	Values TopValues
	// Key is TopHash's HMAC-SHA-256 key, at least MinTopKeyBytes long
	// (Validate requires it when K > 0 and Values is TopHash). A Service
	// given none hashes with a random key of its own: never without one.
	Key []byte
	// TruncateTo is the bytes of each value TopTruncate keeps, 1 to
	// MaxTopTruncateTo; 0 means DefaultTopTruncateTo.
	TruncateTo int
	// Interval is what one report covers, aligned to the wall clock so that
	// every pod reports the same intervals; 0 means DefaultTopInterval.
	Interval time.Duration
}

// Validate names the first bad option.
func (o TopOptions) Validate() error {
	switch {
	case o.K < 0 || o.K > MaxTopK:
		return fmt.Errorf("top descriptors %d: want 0 (off) to %d", o.K, MaxTopK)
	case o.Values != "" && o.Values != TopHash && o.Values != TopTruncate:
		return fmt.Errorf("top descriptor values %q: want %q or %q", o.Values, TopHash, TopTruncate)
	case o.TruncateTo < 0 || o.TruncateTo > MaxTopTruncateTo:
		return fmt.Errorf("top descriptor truncation %d: want 1 to %d bytes", o.TruncateTo, MaxTopTruncateTo)
	case o.K > 0 && o.Values != TopTruncate && len(o.Key) < MinTopKeyBytes:
		return fmt.Errorf("top descriptor hash key of %d bytes: want at least %d", len(o.Key), MinTopKeyBytes)
	case o.Interval < 0 || (o.Interval > 0 && o.Interval < time.Second):
		return fmt.Errorf("top descriptor interval %v: want at least 1s", o.Interval)
	}
	return nil
}

func (o TopOptions) withDefaults() TopOptions {
	if o.Values == "" {
		o.Values = TopHash
	}
	if o.TruncateTo == 0 {
		o.TruncateTo = DefaultTopTruncateTo
	}
	if o.Interval == 0 {
		o.Interval = DefaultTopInterval
	}
	if len(o.Key) == 0 {
		o.Key = make([]byte, 32)
		_, _ = rand.Read(o.Key) // never fails
	}
	return o
}

// HotValue is one of a policy's hottest descriptor values in an interval.
type HotValue struct {
	// Value is "key=value" for each of the policy's descriptors without a
	// value, comma-separated, each value hashed or truncated.
	Value string
	// Requests and Limited (denied, or would be for shadow policies and
	// under the kill switch) are upper bounds: a value that entered the
	// sketch late may carry up to Error requests of the one it replaced.
	Requests, Limited, Error int64
}

// topSketch is one policy's Space-Saving sketch (Metwally et al.): at most
// slots counters; a new value takes the place of the least requested one
// and inherits its count as an error bound, so the heavy hitters stay.
type topSketch struct {
	opts  TopOptions
	slots int

	mu        sync.Mutex
	start     time.Time // of the current interval
	cur       map[store.Key]*topEntry
	last      []HotValue // the previous interval's top K
	lastStart time.Time
}

type topEntry struct {
	value                    string
	requests, limited, error int64
}

func newTopSketch(o TopOptions) *topSketch {
	o = o.withDefaults()
	slots := max(16, 3*o.K)
	return &topSketch{opts: o, slots: slots, cur: make(map[store.Key]*topEntry, slots)}
}

// add counts one request of the counter key, whose varying values are in
// entries.
func (t *topSketch) add(now time.Time, key store.Key, p *compiled.Policy, entries []compiled.Entry, limited bool) {
	var lim int64
	if limited {
		lim = 1
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rotate(now)
	if e := t.cur[key]; e != nil {
		e.requests++
		e.limited += lim
		return
	}
	e := &topEntry{value: t.format(p, entries), requests: 1, limited: lim}
	if len(t.cur) >= t.slots {
		var minKey store.Key
		var minE *topEntry
		for k, c := range t.cur {
			if minE == nil || c.requests < minE.requests {
				minKey, minE = k, c
			}
		}
		delete(t.cur, minKey)
		e.requests += minE.requests
		e.error = minE.requests
	}
	t.cur[key] = e
}

// report returns the top K of the last complete interval and its start.
func (t *topSketch) report(now time.Time) ([]HotValue, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rotate(now)
	return slices.Clone(t.last), t.lastStart
}

// rotate starts a new interval when now has left the current one.
func (t *topSketch) rotate(now time.Time) {
	start := now.Truncate(t.opts.Interval)
	if start.Equal(t.start) {
		return
	}
	prev := start.Add(-t.opts.Interval)
	t.last = t.last[:0]
	if t.start.Equal(prev) { // else nothing was counted in the previous interval
		for _, e := range t.cur {
			t.last = append(t.last, HotValue{Value: e.value, Requests: e.requests, Limited: e.limited, Error: e.error})
		}
		SortHotValues(t.last)
		t.last = t.last[:min(len(t.last), t.opts.K)]
	}
	t.lastStart = prev
	t.start = start
	clear(t.cur)
}

// SortHotValues sorts by requests, most first, then by value.
func SortHotValues(vs []HotValue) {
	slices.SortFunc(vs, func(a, b HotValue) int {
		if c := cmp.Compare(b.Requests, a.Requests); c != 0 {
			return c
		}
		return strings.Compare(a.Value, b.Value)
	})
}

// format shows the policy's varying values as the options say.
func (t *topSketch) format(p *compiled.Policy, entries []compiled.Entry) string {
	var b strings.Builder
	for k, v := range p.VaryingEntries(entries) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		switch t.opts.Values {
		case TopTruncate:
			if len(v) > t.opts.TruncateTo {
				v = strings.ToValidUTF8(v[:t.opts.TruncateTo], "") + "…"
			}
			b.WriteString(v)
		default:
			mac := hmac.New(sha256.New, t.opts.Key)
			_, _ = mac.Write([]byte(v))
			b.WriteString(hex.EncodeToString(mac.Sum(nil)[:TopHashBytes]))
		}
	}
	if b.Len() == 0 {
		return "(every descriptor has a value: one counter)"
	}
	return b.String()
}

// coarseClockTick is how often a CoarseClock advances: reading the system
// clock on every decision costs as much as the rest of the sketch.
const coarseClockTick = 20 * time.Millisecond

// CoarseClock is a clock read with one atomic load, for Options.TopClock:
// while Run runs, it is a tick (20ms) behind the system clock at most.
type CoarseClock struct {
	now atomic.Int64 // Unix ns
}

// NewCoarseClock returns a clock set to now; Run keeps it going.
func NewCoarseClock() *CoarseClock {
	c := &CoarseClock{}
	c.now.Store(time.Now().UnixNano())
	return c
}

// Run advances the clock every tick until ctx ends.
func (c *CoarseClock) Run(ctx context.Context) {
	t := time.NewTicker(coarseClockTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.now.Store(now.UnixNano())
		}
	}
}

// Now is the time of the last tick.
func (c *CoarseClock) Now() time.Time { return time.Unix(0, c.now.Load()) }
