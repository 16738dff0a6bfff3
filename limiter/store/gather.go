package store

import (
	"context"
	"sync"
)

// Gatherer is a Store whose calls made under a Gather (WithGather) share
// round trips: a call of the gather waits, queued, until every other party
// of it has queued a call too or finished, then they are sent together.
type Gatherer interface {
	Store
	// GathersCalls marks the store; it does nothing.
	GathersCalls()
}

// Kicker is told, by the last party of a Gather to queue a call or
// finish, to send the calls queued in it.
type Kicker interface {
	Kick()
}

// A Gather is a barrier over the store calls of n parties (goroutines)
// that decide one request: each call of a party is queued, and the calls
// are sent once no party is running anything but store calls. A party
// that never calls the store, or calls a store that does not gather,
// only delays the others until it is done, so a gather never deadlocks.
// Its zero value is not ready: see Reset.
type Gather struct {
	mu      sync.Mutex
	running int // parties neither queued in a store nor done
	kicks   []Kicker
}

// Reset readies g for n parties.
func (g *Gather) Reset(n int) {
	g.mu.Lock()
	g.running, g.kicks = n, g.kicks[:0]
	g.mu.Unlock()
}

// Park is called by a store that queued a call of a party, holding no
// lock: k is kicked, now or when the last party parks or is done.
func (g *Gather) Park(k Kicker) {
	g.mu.Lock()
	g.running--
	if !containsKicker(g.kicks, k) {
		g.kicks = append(g.kicks, k)
	}
	g.fire()
}

// Unpark is called by the store when the party's call is done.
func (g *Gather) Unpark() {
	g.mu.Lock()
	g.running++
	g.mu.Unlock()
}

// Done is called by each party when it has made its last store call.
func (g *Gather) Done() {
	g.mu.Lock()
	g.running--
	g.fire()
}

// fire kicks every parked store once no party runs, and unlocks g.mu.
func (g *Gather) fire() {
	if g.running > 0 || len(g.kicks) == 0 {
		g.mu.Unlock()
		return
	}
	var buf [4]Kicker
	kicks := append(buf[:0], g.kicks...)
	clear(g.kicks)
	g.kicks = g.kicks[:0]
	g.mu.Unlock()
	for _, k := range kicks {
		k.Kick()
	}
}

func containsKicker(ks []Kicker, k Kicker) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

type gatherKey struct{}

// WithGather returns ctx carrying g: the store calls made under it are
// gathered.
func WithGather(ctx context.Context, g *Gather) context.Context {
	return context.WithValue(ctx, gatherKey{}, g)
}

// GatherFrom returns the Gather ctx carries, or nil.
func GatherFrom(ctx context.Context) *Gather {
	g, _ := ctx.Value(gatherKey{}).(*Gather)
	return g
}
