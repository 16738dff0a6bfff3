package config

import (
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/limiter/compiled"
)

// Priority and PriorityLevel are package compiled's.
type (
	Priority      = compiled.Priority
	PriorityLevel = compiled.PriorityLevel
)

// compilePriority compiles spec.priority for a counter of capacity, or
// returns nil without one.
func compilePriority(ps *v1alpha1.PriorityShedding, capacity int64) *Priority {
	if ps == nil {
		return nil
	}
	out := &Priority{Key: ps.Key, Levels: make([]PriorityLevel, len(ps.Levels))}
	for i, l := range ps.Levels {
		out.Levels[i] = PriorityLevel{Value: l.Value, Share: l.Share, Headroom: l.Reserve(capacity)}
		if l.Value == ps.Default {
			out.Default = i
		}
	}
	return out
}
