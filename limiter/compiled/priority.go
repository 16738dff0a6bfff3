package compiled

// Priority is a policy's compiled priority shedding (spec.priority): the
// entry that carries a request's priority, and the headroom each priority
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
	// requests must leave (algo.Limit.Headroom), the level's headroom for
	// the priorities above it.
	Headroom int64
}

// Level returns the index in Levels of the priority entries carry: the
// first entry with Key whose value names a level, else Default.
func (p *Priority) Level(entries []Entry) int {
	if v, ok := Lookup(entries, p.Key); ok {
		for i := range p.Levels {
			if p.Levels[i].Value == v {
				return i
			}
		}
	}
	return p.Default
}
