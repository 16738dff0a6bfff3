package redis

import (
	"cmp"
	"context"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// firstLoadGrace is how long a new store's first map load waits, after
// the first answer, for the other nodes' answers: a few loopback or
// in-cluster round trips, a fraction of the map's load deadline
// (mapLoadTimeout). Only the first load waits: a store has no epoch heard
// to judge its first answer by, and a restarted old primary that cannot
// hear its cluster yet claims its old slots with its old epoch, so the
// first answer may be the stale one. A decision that loads the map itself
// (go-redis's ClusterSlots with no map yet) waits no longer than its own
// deadline: the best answer by then is taken.
const firstLoadGrace = 100 * time.Millisecond

// fresh reports that no map was taken yet.
func (ss *slotSource) fresh() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.last == nil
}

// pickFirst takes, among n answers, the map of the one that knows the
// highest config epoch, of those that came within firstLoadGrace of the
// first map (or before ctx ended); the later ones are drained as any
// fetch's are.
func (ss *slotSource) pickFirst(ctx context.Context, answers <-chan answer, n int) ([]goredis.ClusterSlot, error) {
	var got []answer
	first := errNoSlots
	var grace <-chan time.Time
	i := 0
wait:
	for ; i < n; i++ {
		select {
		case a := <-answers:
			if a.err != nil || len(a.slots) == 0 {
				ss.failed(a.addr, a.err)
				if first == errNoSlots && a.err != nil {
					first = a.err
				}
				continue
			}
			got = append(got, a)
			if grace == nil {
				t := time.NewTimer(firstLoadGrace)
				defer t.Stop()
				grace = t.C
			}
		case <-grace:
			break wait
		case <-ctx.Done():
			if len(got) == 0 {
				first = ctx.Err()
			}
			break wait
		}
	}
	if i < n {
		go ss.drain(answers, n-i) // the others, as they come
	}
	// The highest epoch first; among equals, the first to answer.
	slices.SortStableFunc(got, func(a, b answer) int { return cmp.Compare(b.epoch, a.epoch) })
	for _, a := range got {
		if ss.take(a.epoch, a.slots) {
			return a.slots, nil
		}
	}
	if len(got) > 0 {
		return nil, errStale
	}
	return nil, first
}

// forClient is go-redis's ClusterSlots: the last map fetched, or a fetch
// when there is none yet.
func (ss *slotSource) forClient(ctx context.Context) ([]goredis.ClusterSlot, error) {
	ss.mu.Lock()
	handed := ss.handed
	ss.mu.Unlock()
	if handed != nil {
		return handed, nil
	}
	slots, err := ss.fetch(ctx)
	if err == nil {
		return forGoRedis(slots), nil
	}
	// The store's own first load runs beside this one and may have taken
	// a map, or be about to: a node it heard first (gossip had given it
	// a newer config epoch) makes this fetch's answers look stale, which
	// would fail a decision on a healthy cluster. Its map is as good.
	wait := time.NewTimer(ss.timeout)
	defer wait.Stop()
	select {
	case <-ss.firstTaken:
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return ss.handed, nil
	case <-ctx.Done():
	case <-wait.C:
	}
	return nil, err
}
