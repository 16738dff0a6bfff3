package observe

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// hotSum is one policy's hottest values of one interval, summed over the
// pods read in a collection.
type hotSum struct {
	since  time.Time
	k      int // the longest list a pod reported: the fleet's K
	values map[string]*v1beta1.HotDescriptor
}

// add merges one pod's list; a pod still on an older interval is left out.
func (h *hotSum) add(since time.Time, vs []limiterwire.HotValue) {
	switch {
	case since.Before(h.since):
		return
	case since.After(h.since):
		*h = hotSum{since: since, values: map[string]*v1beta1.HotDescriptor{}}
	}
	h.k = max(h.k, min(len(vs), maxHottest))
	for _, v := range vs[:min(len(vs), maxHottest)] {
		v.Value = boundMessage(v.Value, maxHotValue)
		if cur := h.values[v.Value]; cur != nil {
			cur.Requests += v.Requests
			cur.Limited += v.Limited
		} else {
			h.values[v.Value] = &v1beta1.HotDescriptor{Value: v.Value, Requests: v.Requests, Limited: v.Limited}
		}
	}
}

// top is the k most requested values, most first, then by value.
func (h *hotSum) top() []v1beta1.HotDescriptor {
	out := make([]v1beta1.HotDescriptor, 0, len(h.values))
	for _, v := range h.values {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b v1beta1.HotDescriptor) int {
		if a.Requests != b.Requests {
			return cmp.Compare(b.Requests, a.Requests)
		}
		return strings.Compare(a.Value, b.Value)
	})
	return out[:min(len(out), h.k, maxHottest)]
}

// counts are the decision counts the collector sums.
type counts struct {
	allowed, limited, shadowLimited         int64
	failedOpen, failedClosed, localFallback int64
	softLimited, released, penalized        int64
	refused                                 int64
}

func (c counts) add(o counts) counts {
	return counts{c.allowed + o.allowed, c.limited + o.limited, c.shadowLimited + o.shadowLimited,
		c.failedOpen + o.failedOpen, c.failedClosed + o.failedClosed, c.localFallback + o.localFallback,
		c.softLimited + o.softLimited, c.released + o.released, c.penalized + o.penalized, c.refused + o.refused}
}

// since is c minus an earlier reading prev of the same process; a count
// that went down started again from zero (the policy left the pod's
// snapshot and came back), so all of it is new.
func (c counts) since(prev counts) counts {
	d := func(now, before int64) int64 {
		if now < before {
			return now
		}
		return now - before
	}
	return counts{d(c.allowed, prev.allowed), d(c.limited, prev.limited), d(c.shadowLimited, prev.shadowLimited),
		d(c.failedOpen, prev.failedOpen), d(c.failedClosed, prev.failedClosed), d(c.localFallback, prev.localFallback),
		d(c.softLimited, prev.softLimited), d(c.released, prev.released), d(c.penalized, prev.penalized), d(c.refused, prev.refused)}
}
