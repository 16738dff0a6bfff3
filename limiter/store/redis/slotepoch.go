package redis

// The epoch judgement of a slot source's answers (slotsource.go): an
// answer is judged by the highest config epoch its node's CLUSTER NODES
// names, and judged and taken in one step.

import (
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// take makes slots the last map when an answer that knew epoch may be
// taken: none higher was heard within coverageMemory, or, for an epoch not
// known (-1), none at all. Judged and taken under one lock: a fetch beside
// this one that takes a newer map between the two steps would otherwise
// be overwritten by this older one (a store seeded with a stale node alone
// took the stale map back after the heir's that way).
func (ss *slotSource) take(epoch int64, slots []goredis.ClusterSlot) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := time.Now()
	if !ss.mayTake(epoch, now) {
		return false
	}
	if epoch >= 0 {
		ss.epoch, ss.epochAt, ss.taken = epoch, now, epoch
	}
	ss.setLast(slots)
	return true
}

// mayTake reports whether an answer that knew epoch may be taken; ss.mu
// is held. An epoch not known (its CLUSTER NODES failed: a node too busy
// to answer both in time is as likely a stale one as any) is taken only
// while no epoch heard judges it.
func (ss *slotSource) mayTake(epoch int64, now time.Time) bool {
	recent := !ss.epochAt.IsZero() && now.Sub(ss.epochAt) < coverageMemory
	if epoch < 0 {
		return !recent
	}
	return !recent || epoch >= ss.epoch
}

// heard records the epoch of an answer not taken (a fetch's others, as
// they come) and calls onNewer when it knew more than the map taken.
func (ss *slotSource) heard(epoch int64) {
	ss.mu.Lock()
	now := time.Now()
	if epoch < 0 || !ss.mayTake(epoch, now) {
		ss.mu.Unlock()
		return
	}
	ss.epoch, ss.epochAt = epoch, now
	newer := epoch > ss.taken
	onNewer := ss.onNewer
	ss.mu.Unlock()
	if newer && onNewer != nil {
		onNewer()
	}
}

// maxConfigEpoch is the highest config epoch of a CLUSTER NODES reply
// (each line: id addr flags master ping pong config-epoch link slots...),
// or -1 when it names none.
func maxConfigEpoch(nodes string) int64 {
	most := int64(-1)
	for line := range strings.SplitSeq(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		if e, err := strconv.ParseInt(f[6], 10, 64); err == nil && e > most {
			most = e
		}
	}
	return most
}
