package compiled

import (
	"bytes"
	"fmt"
	"math"

	"github.com/sluice-dev/sluice/limiter/store"
)

// ERL is what a policy compiled from envoyproxy/ratelimit (ERL)
// configuration answers beside its Limit (limiter/config/erl.go compiles
// it): ERL's own name and unit for current_limit, and the modes ERL
// decides by. Its Limit is a FixedWindow aligned to the epoch that counts
// denied hits (algo.Limit.CountDenied), as ERL counts.
type ERL struct {
	// Name is rate_limit.name, told as current_limit.name ("" when unset);
	// Replaces are the names of the limits it replaces in a request.
	Name     string
	Replaces []string
	// Unit is the RLS unit (envoy.service.ratelimit.v3
	// RateLimitResponse.RateLimit.Unit: 1 SECOND to 7 YEAR), and
	// RequestsPerUnit the limit as written.
	Unit            int32
	RequestsPerUnit uint32
	// Unlimited: the descriptor is answered OK with no limit, and counts
	// nothing.
	Unlimited bool
	// QuotaMode: over the limit is answered OK with the limit and what
	// remains, and no time to reset (the policy is Shadow too: it never
	// denies).
	QuotaMode bool
	// Override: the policy of a request's own limit (ERLTree.Overrides).
	Override bool
	// Levels are the configuration's levels the policy is matched at, one
	// per entry of a matching descriptor (ERL finds a limit only at a
	// descriptor's last entry).
	Levels []ERLLevel
}

// ERLLevel is one level of an ERL policy's path.
type ERLLevel struct {
	// Name is ERL's name of the level: "key", "key_value", or either
	// ending in '*' for a wildcard (a prefix of the request's
	// "key_value").
	Name string
	Key  string
	// Value is the value the level names ("" for a key alone); with
	// Wildcard it is the prefix before the trailing '*'.
	Value    string
	Wildcard bool
	// Share is share_threshold: every value the wildcard matches shares
	// one counter, keyed by the pattern.
	Share bool
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
	// children by "key", "key_value", or "key_prefix*".
	children map[string]*erlNode
	// wildcards are the children whose name ends in '*', in file order:
	// their names without the '*', and the names.
	prefixes [][]byte
	wildKeys []string
	policy   *Policy
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
				n.prefixes = append(n.prefixes, []byte(name[:len(name)-1]))
				n.wildKeys = append(n.wildKeys, name)
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
// key_value, else the first wildcard child whose prefix key_value has (in
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
			for j, prefix := range n.prefixes {
				if bytes.HasPrefix(b, prefix) {
					next = n.children[n.wildKeys[j]]
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
// the snapshot given to New) are matched by t alone. Call it while the
// snapshot is built, before it is used.
func (s *Snapshot) SetERL(name string, t *ERLTree) {
	d := s.domains[name]
	if d == nil {
		d = &Domain{Name: name, byKey: map[string][]*Policy{}, minMaxCost: math.MaxInt64}
		s.domains[name] = d
	}
	d.erl = t
}

// ERLOverride is the domain's policy of a request's own limit in RLS unit
// unit, or nil when the domain is no ERL domain or the unit is not one.
func (d *Domain) ERLOverride(unit int32) *Policy {
	if d == nil || d.erl == nil || unit < 0 || int(unit) >= len(d.erl.Overrides) {
		return nil
	}
	return d.erl.Overrides[unit]
}

// ERL reports whether the domain is an ERL domain.
func (d *Domain) ERL() bool { return d != nil && d.erl != nil }

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

// ERLRate is a rate in ERL's terms: RequestsPerUnit per RLS Unit.
type ERLRate struct {
	RequestsPerUnit uint32
	Unit            int32
}

// erlUnitSeconds are the RLS units' windows, as ERL counts them.
var erlUnitSeconds = [8]uint64{1: 1, 2: 60, 3: 3600, 4: 86400, 5: 30 * 86400, 6: 365 * 86400, 7: 7 * 86400}

// Valid reports whether r's unit is one of ERL's.
func (r ERLRate) Valid() bool { return r.Unit >= 1 && int(r.Unit) < len(erlUnitSeconds) }

// AtMost reports whether r allows no more requests per second than max.
// Both must be valid.
func (r ERLRate) AtMost(max ERLRate) bool {
	return uint64(r.RequestsPerUnit)*erlUnitSeconds[max.Unit] <= uint64(max.RequestsPerUnit)*erlUnitSeconds[r.Unit]
}

func (r ERLRate) String() string {
	names := [8]string{1: "second", 2: "minute", 3: "hour", 4: "day", 5: "month", 6: "year", 7: "week"}
	if !r.Valid() {
		return fmt.Sprintf("%d per unit %d", r.RequestsPerUnit, r.Unit)
	}
	return fmt.Sprintf("%d/%s", r.RequestsPerUnit, names[r.Unit])
}
