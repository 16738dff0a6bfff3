package config

import (
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/limiter/compiled"
)

// Priority and PriorityLevel are package compiled's.
type (
	Priority      = compiled.Priority
	PriorityLevel = compiled.PriorityLevel
)

// compilePriority compiles a limit's priority levels, read from the entry
// key, for a counter of capacity, or returns nil without them.
func compilePriority(ps *v1beta1.PriorityShedding, key string, capacity int64) *Priority {
	if ps == nil {
		return nil
	}
	out := &Priority{Key: key, Levels: make([]PriorityLevel, len(ps.Levels))}
	for i, l := range ps.Levels {
		// A level's headroom: the part of the capacity it leaves to higher levels.
		out.Levels[i] = PriorityLevel{Value: l.Value, Share: l.Share, Headroom: capacity - capacity*int64(l.Share)/100}
		if l.Value == ps.Default {
			out.Default = i
		}
	}
	return out
}
