package service

import (
	"math"
	"slices"

	"github.com/sluice-dev/sluice/limiter/algo"
)

// erlUnlimited is the result of an ERL limit marked unlimited: allowed,
// with ERL's limit_remaining (the largest uint32), nothing counted.
var erlUnlimited = algo.Result{Allowed: true, Remaining: math.MaxUint32}

// replace drops, in an ERL domain's plan, the limits that another limit
// the request matched replaces (rate_limit.replaces by name), as ERL
// does: every matched limit's names are collected first, an unlimited
// one's too, so that the order of the descriptors does not matter. The
// work is the descriptors' matches (at most one each) times the names
// their limits replace, which the configuration bounds.
func (pl *plan) replace() {
	var drop uint64 // MaxDescriptors is below 64
	for i := range pl.steps {
		st := &pl.steps[i]
		if len(st.matches) == 0 || st.matches[0].ERL == nil || st.matches[0].ERL.Name == "" {
			continue
		}
		name := st.matches[0].ERL.Name
		for j := range pl.steps {
			other := pl.steps[j].matches
			if len(other) > 0 && other[0].ERL != nil && slices.Contains(other[0].ERL.Replaces, name) {
				drop |= 1 << i
				break
			}
		}
	}
	for i := range pl.steps {
		if drop&(1<<i) != 0 {
			pl.steps[i].matches = pl.steps[i].matches[:0]
		}
	}
}
