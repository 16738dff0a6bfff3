package rediscluster

import (
	"sync"
	"time"
)

// Tracker remembers, between passes, since when each master node ID has
// been seen failed. It is safe for concurrent use.
type Tracker struct {
	mu     sync.Mutex
	failed map[string]time.Time
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
