package rediscluster

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// Tracker remembers, between passes, since when each master node ID has
// been seen failed, and when each terminating master's hand-over was
// asked for. It is safe for concurrent use.
type Tracker struct {
	mu     sync.Mutex
	failed map[string]time.Time
	// handOvers maps a terminating master's node ID to when CLUSTER
	// FAILOVER was last sent to its replica.
	handOvers map[string]time.Time
	// lostPrimaries maps a lost master's node ID to what became of it.
	lostPrimaries map[string]LostPrimary
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker { return &Tracker{failed: map[string]time.Time{}} }

// failedSince records that id is failed at now and returns since when.
func (t *Tracker) failedSince(id string, now time.Time) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.failed[id]; ok {
		return s
	}
	t.failed[id] = now
	return now
}

// keepOnly forgets every node ID not in ids.
func (t *Tracker) keepOnly(ids map[string]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id := range t.failed {
		if !ids[id] {
			delete(t.failed, id)
		}
	}
}

// handOverDue reports whether a hand-over of master id may be asked for
// at now: never asked, or asked longer than within ago (a manual failover
// Redis gave up on). Asking again sooner would restart one in progress.
// When due, it records now.
func (t *Tracker) handOverDue(id string, now time.Time, within time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.handOvers == nil {
		t.handOvers = map[string]time.Time{}
	}
	if at, ok := t.handOvers[id]; ok && now.Sub(at) < within {
		return false
	}
	t.handOvers[id] = now
	return true
}

// keepHandOvers forgets the hand-overs of every node ID not in ids.
func (t *Tracker) keepHandOvers(ids map[string]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id := range t.handOvers {
		if !ids[id] {
			delete(t.handOvers, id)
		}
	}
}

// lost returns the record of lost master id.
func (t *Tracker) lost(id string) (LostPrimary, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	lp, ok := t.lostPrimaries[id]
	return lp, ok
}

// setLost records lp.
func (t *Tracker) setLost(lp LostPrimary) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lostPrimaries == nil {
		t.lostPrimaries = map[string]LostPrimary{}
	}
	t.lostPrimaries[lp.NodeID] = lp
}

// failedOverBy records the CLUSTER FAILOVER mode sent for lost master id.
func (t *Tracker) failedOverBy(id, mode string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if lp, ok := t.lostPrimaries[id]; ok {
		lp.By = mode
		t.lostPrimaries[id] = lp
	}
}

// keepLost forgets the lost masters not in ids: they answer again, or no
// member knows them any more.
func (t *Tracker) keepLost(ids map[string]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id := range t.lostPrimaries {
		if !ids[id] {
			delete(t.lostPrimaries, id)
		}
	}
}

// lostList is the lost masters by shard, then pod.
func (t *Tracker) lostList() []LostPrimary {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]LostPrimary, 0, len(t.lostPrimaries))
	for _, lp := range t.lostPrimaries {
		out = append(out, lp)
	}
	slices.SortFunc(out, func(a, b LostPrimary) int {
		if a.Shard != b.Shard {
			return a.Shard - b.Shard
		}
		return strings.Compare(a.Pod+a.NodeID, b.Pod+b.NodeID)
	})
	return out
}
