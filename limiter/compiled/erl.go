package compiled

import (
	"bytes"
	"fmt"
	"math"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-dev/sluice/limiter/store"
)

// ERL is what the RLS edge (limiter/server) tells of a policy compiled
// from envoyproxy/ratelimit (ERL) configuration (limiter/config/erl.go
// compiles it), beside what the request path decides by: its Limit (a
// FixedWindow aligned to the epoch that counts denied hits,
// algo.Limit.CountDenied, as ERL counts) and its Behaviours (Unlimited,
// Replacement for name and replaces, Quota for quota_mode, DryRun for shadow_mode,
// ReportShadow, Untenanted, HitStats). limiter/service never reads it:
// CounterKey and HitStatsKey do, here.
type ERL struct {
	// Name is rate_limit.name, told as current_limit.name ("" when unset).
	Name string
	// Unit is the RLS unit (envoy.service.ratelimit.v3
	// RateLimitResponse.RateLimit.Unit: 1 SECOND to 7 YEAR), and
	// RequestsPerUnit the limit as written.
	Unit            int32
	RequestsPerUnit uint32
	// Override: the policy of a request's own limit
	// (Domain.OwnLimitPolicy): its current_limit is the request's.
	Override bool
	// Levels are the configuration's levels the policy is matched at, one
	// per entry of a matching descriptor (ERL finds a limit only at a
	// descriptor's last entry).
	Levels []ERLLevel
	// DetailedMetric (detailed_metric) keys the limit's statistics by the
	// request's values; ValueToMetric says a level of Levels has
	// value_to_metric (HitStatsKey).
	DetailedMetric, ValueToMetric bool
	// Metadata is the descriptor's metadata (ERL after #1112), returned to
	// Envoy in the RLS response's dynamic metadata when the descriptor is
	// answered OK; nil when it has none. It is the configuration's, shared
	// by every request: never modify it.
	Metadata *structpb.Struct
}

// ERLLevel is one level of an ERL policy's path.
type ERLLevel struct {
	// Name is ERL's name of the level: "key", "key_value", or either
	// holding a '*' for a wildcard (ERL after #1085: each '*' matches any
	// run of bytes of the request's "key_value", in order).
	Name string
	Key  string
	// Value is the value the level names as written ("" for a key alone),
	// wildcards included.
	Value    string
	Wildcard bool
	// Share is share_threshold: every value the wildcard matches shares
	// one counter, keyed by the pattern.
	Share bool
	// ValueToMetric is value_to_metric: the request's value names the
	// level in the limit's statistics.
	ValueToMetric bool
}

// ERLTree is one ERL domain's descriptors, matched as ERL matches them
// (see Domain.AppendMatches).
type ERLTree struct {
	root erlNode
	// Overrides are the domain's policies of a request's own limit (an
	// RLS descriptor's limit field), by RLS unit: their Limit.Limit is a
	// placeholder, each request's limit takes its place (limiter/service).
	Overrides [8]*Policy
}

type erlNode struct {
	// children by "key", "key_value", or a wildcard name ("key_pre*fix*").
	children map[string]*erlNode
	// wildcards are the children whose name holds a '*', in file order.
	wildcards []erlWildcard
	policy    *Policy
}

// erlWildcard is a wildcard name split on its '*'s once, when the
// configuration is loaded, so that matching allocates nothing.
type erlWildcard struct {
	name  string
	parts [][]byte
	// fixed is the parts' length: the shortest "key_value" that matches.
	fixed int
}

// matches is ERL's wildcardMatch (after #1085): b starts with the first
// part and ends with the last, and holds the parts between in order, in
// what is left between those two; each '*' matches any run of bytes,
// none too. A name ending in '*' is a prefix. The work is bounded by
// len(b) times the parts, which the configuration and MaxEntryLength
// bound.
func (w *erlWildcard) matches(b []byte) bool {
	ps := w.parts
	first, last := ps[0], ps[len(ps)-1]
	if len(b) < w.fixed || !bytes.HasPrefix(b, first) || !bytes.HasSuffix(b, last) {
		return false
	}
	rest := b[len(first) : len(b)-len(last)]
	for _, p := range ps[1 : len(ps)-1] {
		i := bytes.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// NewERLTree returns an empty tree.
func NewERLTree() *ERLTree { return &ERLTree{root: erlNode{children: map[string]*erlNode{}}} }

// Add puts p, an ERL policy (or an ERL level without a limit when p is nil
// and path is its levels), at its path of levels, in the configuration's
// order. The caller (limiter/config) refuses duplicate paths first.
func (t *ERLTree) Add(path []ERLLevel, p *Policy) {
	n := &t.root
	for _, l := range path {
		name := l.Name
		next := n.children[name]
		if next == nil {
			next = &erlNode{children: map[string]*erlNode{}}
			n.children[name] = next
			if l.Wildcard {
				n.wildcards = append(n.wildcards, erlWildcard{name: name, parts: bytes.Split([]byte(name), []byte("*")),
					fixed: len(name) - strings.Count(name, "*")})
			}
		}
		n = next
	}
	if p != nil {
		n.policy = p
	}
}

// erlNameMax is the longest "key_value" matched without an allocation.
const erlNameMax = 256

// match is ERL's GetLimit over entries: at each level, the child named
// key_value, else the first wildcard child that matches key_value (in
// file order), else the child named key; the limit found at the last entry
// is the descriptor's; the walk stops at a level with no children. The
// work is bounded by the entries (at most service.MaxEntries) and the
// configuration, never by what a client chooses beyond them.
func (t *ERLTree) match(entries []Entry) *Policy {
	n := &t.root
	var found *Policy
	var buf [erlNameMax]byte
	for i := range entries {
		e := &entries[i]
		b := append(append(append(buf[:0], e.Key...), '_'), e.Value...)
		next := n.children[string(b)]
		if next == nil {
			for j := range n.wildcards {
				if w := &n.wildcards[j]; w.matches(b) {
					next = n.children[w.name]
					break
				}
			}
		}
		if next == nil {
			next = n.children[e.Key]
		}
		if next != nil && next.policy != nil && i == len(entries)-1 {
			found = next.policy
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		n = next
	}
	return found
}

// SetERL makes name an ERL domain answered by t: its policies (already in
// the snapshot given to New) are matched by t alone, and a request's own
// limit is decided by t.Overrides (Domain.OwnLimitPolicy). Call it while
// the snapshot is built, before it is used.
func (s *Snapshot) SetERL(name string, t *ERLTree) {
	d := s.domains[name]
	if d == nil {
		d = &Domain{Name: name, byKey: map[string][]*Policy{}, minMaxCost: math.MaxInt64}
		s.domains[name] = d
	}
	d.erl, d.ownLimits = t, &t.Overrides
}

// erlCounterKey adds an ERL policy's counter identity for entries to kb:
// every entry's key and value in order, as ERL keys its counters, with a
// share_threshold level's pattern in place of the value.
func (p *Policy) erlCounterKey(kb *store.KeyBuilder, entries []Entry) {
	for i := range entries {
		kb.Add(entries[i].Key)
		if i < len(p.ERL.Levels) && p.ERL.Levels[i].Share {
			kb.Add(p.ERL.Levels[i].Value)
			kb.Add("*")
			continue
		}
		kb.Add(entries[i].Value)
	}
}

// UnitRate is a rate in RLS terms (an RLS descriptor's own limit, and
// envoyproxy/ratelimit's): RequestsPerUnit per RLS Unit.
type UnitRate struct {
	RequestsPerUnit uint32
	Unit            int32
}

// erlUnitSeconds are the RLS units' windows, as ERL counts them.
var erlUnitSeconds = [8]uint64{1: 1, 2: 60, 3: 3600, 4: 86400, 5: 30 * 86400, 6: 365 * 86400, 7: 7 * 86400}

// UnitSeconds is the length of r's unit in seconds, as ERL counts it; r
// must be valid.
func (r UnitRate) UnitSeconds() uint64 { return erlUnitSeconds[r.Unit] }

// Valid reports whether r's unit is one of ERL's.
func (r UnitRate) Valid() bool { return r.Unit >= 1 && int(r.Unit) < len(erlUnitSeconds) }

// AtMost reports whether r allows no more requests per second than max.
// Both must be valid.
func (r UnitRate) AtMost(max UnitRate) bool {
	return uint64(r.RequestsPerUnit)*erlUnitSeconds[max.Unit] <= uint64(max.RequestsPerUnit)*erlUnitSeconds[r.Unit]
}

func (r UnitRate) String() string {
	names := [8]string{1: "second", 2: "minute", 3: "hour", 4: "day", 5: "month", 6: "year", 7: "week"}
	if !r.Valid() {
		return fmt.Sprintf("%d per unit %d", r.RequestsPerUnit, r.Unit)
	}
	return fmt.Sprintf("%d/%s", r.RequestsPerUnit, names[r.Unit])
}

// HitStatsKey is the key of the policy's hit statistics for entries, and
// whether it was built from the request's values: p's name unless it is
// an ERL policy, else ERL's stats key (domain.key_value...), as ERL's
// GetLimit builds it: with detailed_metric, every entry's key and value (a
// share_threshold level's pattern in place of its value; without any
// such level, key_value even for an empty value); else, with
// value_to_metric on a level, the request's value at that level (a
// wildcard's pattern, a key alone nothing, elsewhere); else p's full
// key, its name. A request's own limit counts under its override
// policy's name, never the client's values.
func (p *Policy) HitStatsKey(entries []Entry) (string, bool) {
	e := p.ERL
	if e == nil || e.Override || (!e.DetailedMetric && !e.ValueToMetric) || len(entries) != len(e.Levels) {
		return p.Name, false
	}
	share := false
	for i := range e.Levels {
		share = share || e.Levels[i].Share
	}
	var b strings.Builder
	b.WriteString(p.Domain)
	for i := range entries {
		en, l := &entries[i], &e.Levels[i]
		b.WriteByte('.')
		b.WriteString(en.Key)
		var v string
		switch {
		case l.Share:
			v = l.Value
		case e.DetailedMetric && !share:
			b.WriteByte('_')
			b.WriteString(en.Value)
			continue
		case e.DetailedMetric, l.Value != "" && !l.Wildcard, l.ValueToMetric:
			v = en.Value
		case l.Wildcard:
			v = l.Value
		}
		if v != "" {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	key := b.String()
	return key, key != p.Name
}
