package rediscluster

import (
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
