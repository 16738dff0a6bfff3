package config

import "github.com/sluice-dev/sluice/api/v1alpha1"

// Priority is a policy's compiled priority shedding (spec.priority): the
// entry that carries a request's priority, and the reserve each priority
// leaves in the counter for the ones above it.
type Priority struct {
	// Key is the descriptor entry that carries a request's priority.
	Key string
	// Levels are the priorities, highest first.
	Levels []PriorityLevel
	// Default is the index in Levels of a request whose priority entry is
	// missing or names no level.
	Default int
}

// PriorityLevel is one compiled priority.
type PriorityLevel struct {
	Value string
	// Share is the percentage of the capacity it may use.
	Share int32
	// Reserve is the capacity less Share% of it, rounded down: what its
	// requests must leave (algo.Limit.Reserve).
	Reserve int64
}

// Level returns the index in Levels of the priority entries carry: the
// first entry with Key whose value names a level, else Default.
func (p *Priority) Level(entries []Entry) int {
	if v, ok := lookup(entries, p.Key); ok {
		for i := range p.Levels {
			if p.Levels[i].Value == v {
				return i
			}
		}
	}
	return p.Default
}

// compilePriority compiles spec.priority for a counter of capacity, or
// returns nil without one.
func compilePriority(ps *v1alpha1.PriorityShedding, capacity int64) *Priority {
	if ps == nil {
		return nil
	}
	out := &Priority{Key: ps.Key, Levels: make([]PriorityLevel, len(ps.Levels))}
	for i, l := range ps.Levels {
		out.Levels[i] = PriorityLevel{Value: l.Value, Share: l.Share, Reserve: l.Reserve(capacity)}
		if l.Value == ps.Default {
			out.Default = i
		}
	}
	return out
}
