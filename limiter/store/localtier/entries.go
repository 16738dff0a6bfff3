package localtier

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// entry returns k's entry, creating it unless k's shard is full (nil).
func (t *Tier) entry(k store.Key) *entry {
	sh := &t.shards[k[0]%shardCount]
	sh.mu.RLock()
	e := sh.m[k]
	sh.mu.RUnlock()
	if e != nil {
		return e
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e = sh.m[k]; e != nil {
		return e
	}
	if len(sh.m) >= t.perShard {
		return nil
	}
	e = &entry{}
	sh.m[k] = e
	return e
}

// Keys is the number of keys tracked.
func (t *Tier) Keys() int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}

// credit is a grant's unspent units to give back.
type credit struct {
	key    store.Key
	limit  algo.Limit
	ttl    time.Duration
	units  int64
	window int64
	c      *counters
}

// collect takes the unspent units of expired grants (all grants with all),
// and drops keys idle for idleAfter. held is how many keys still hold a
// grant, or have one in flight.
func (t *Tier) collect(all bool) (out []credit, held int) {
	now := t.now()
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			e.mu.Lock()
			switch {
			case e.busy:
			case e.tokens > 0 && (all || now >= e.expires):
				out = append(out, credit{key: k, limit: e.limit, ttl: e.ttl, units: e.tokens, window: e.window, c: e.c})
				e.tokens, e.expires = 0, 0
			case e.tokens == 0 && now-e.lastUsed > int64(idleAfter) && now >= e.deniedUntil:
				e.dead = true
				delete(sh.m, k)
			}
			if e.busy || e.tokens > 0 {
				held++
			}
			e.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	return out, held
}

// credit gives units back, a few calls at a time.
func (t *Tier) credit(cs []credit) {
	if len(cs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), creditTimeout)
	defer cancel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, c := range cs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			_, err := t.granter.Grant(ctx, store.GrantRequest{Key: c.key, Limit: c.limit, Credit: c.units,
				CreditWindow: c.window, Pod: t.pod, Bound: -1, TTL: c.ttl})
			if err != nil {
				t.log.Debug("Credit back failed: the units are lost", "units", c.units, "error", err)
				return
			}
			c.c.credited.Add(c.units)
		}()
	}
	wg.Wait()
}

// sweepLoop credits expired grants back every tick, and drops idle keys
// every idleScan. A tick scans the keys only while some hold a grant or
// were granted one since the last scan (grants moved): a tier of cold keys,
// all decided exactly, is scanned once per idleScan, not once per tick.
func (t *Tier) sweepLoop(every time.Duration) {
	defer close(t.done)
	tick := time.NewTicker(every)
	defer tick.Stop()
	lastRotate, lastScan := time.Now(), time.Now()
	held, seen := true, int64(0)
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
			if g := t.grants.Load(); held || g != seen || time.Since(lastScan) >= idleScan {
				cs, n := t.collect(false)
				t.credit(cs)
				held, seen, lastScan = n > 0, g, time.Now()
			}
			if time.Since(lastRotate) >= podsWindow {
				t.rotatePods()
				lastRotate = time.Now()
			}
		}
	}
}

// idleScan is how often the sweeper looks for idle keys when no key
// holds a grant: a key idle for idleAfter is dropped within idleScan more.
const idleScan = time.Second

// podsWindow is how long a pod count seen in a grant reply is reported.
const podsWindow = 5 * time.Second

func (t *Tier) rotatePods() {
	for _, p := range *t.policies.Load() {
		p.c.podsLast.Store(p.c.pods.Swap(0))
	}
}

// Sweep credits back expired grants and drops idle keys now.
func (t *Tier) Sweep() {
	if t.granter != nil {
		cs, _ := t.collect(false)
		t.credit(cs)
	}
}

// Close stops the sweeper and credits back every grant still held, so a
// pod that stops gracefully gives back what it did not spend.
func (t *Tier) Close() error {
	t.closing.Do(func() {
		close(t.stop)
		<-t.done
		if t.granter != nil {
			cs, _ := t.collect(true)
			t.credit(cs)
		}
	})
	return nil
}
