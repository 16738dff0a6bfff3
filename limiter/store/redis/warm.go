package redis

// Warm-up: a store decides its first calls as fast as its thousandth.
// Invariants:
//   - Warm reports true once the store knows its shards (a cluster's slot
//     map loaded; a standalone server's from the start) and every primary
//     of its map (the standalone server) was warmed: one connection of the
//     pool the round trips use dialled, authenticated and left in the pool,
//     and every script the store sends loaded there (SCRIPT LOAD, in one
//     pipeline on that connection). The first decisions then pay neither a
//     dial nor a NOSCRIPT and its EVAL: script caches are per node, a
//     promoted replica's is empty.
//   - A primary is warmed as soon as a map names it: at start, and after a
//     failover or a handover, in the background. One warm-up is in flight
//     per node, each bounded by warmTimeout; one that failed is tried
//     again when a map names the node again (each load: every
//     mapRetryEvery to mapRefreshEvery, mapOpenEvery while a breaker is
//     open), so a flapping map costs no more than its loads. A node that
//     leaves the primaries is forgotten: named again (back from a restart,
//     as a replica promoted), it is warmed again. A node whose warm-up
//     failed, that the slot source knows dead (it did not answer a map
//     load) and whose shard's breaker is open is not dialled again for a
//     warm-up: nothing but the breaker's probe dials it then. Its breaker
//     closed (it answers decisions), or named a primary anew, it is.
//   - Nothing waits for a warm-up: a decision that comes first sends
//     EVALSHA, and EVAL after NOSCRIPT, as before. The app bounds how long
//     a new limiter stays unready for it (a dead primary never warms).
//   - go-redis's MinIdleConns would dial a connection per node too, but in
//     the background with no sign of when, and would keep dialling one more
//     each time a round trip takes the idle one; it loads no script.

import (
	"context"
	"slices"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// warmTimeout bounds one node's warm-up: its dial, the wait for go-redis
// to route to a new primary, and the scripts' loads.
const warmTimeout = 2 * time.Second

// primary is a node the store's map routes decisions to, with a key it
// owns (its shard's probe key), by which go-redis's node client is found.
type primary struct {
	addr, key string
	brk       *breaker // its shard's
}

// warmth tracks the warm-up of each primary of the store's map.
type warmth struct {
	mu     sync.Mutex
	want   []string        // the primaries of the last map, by address
	done   map[string]bool // warmed (true) or warming (false), by address
	failed map[string]bool // whose last warm-up failed, by address
}

func newWarmth() *warmth { return &warmth{done: map[string]bool{}, failed: map[string]bool{}} }

// Warm says whether the store is ready to decide: it knows its shards and
// has warmed every primary of its map (see above).
func (s *Store) Warm() bool {
	if s.opts.Cluster && !s.shards.loaded.Load() {
		return false
	}
	w := s.warm
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.want) == 0 {
		return false
	}
	for _, a := range w.want {
		if !w.done[a] {
			return false
		}
	}
	return true
}

// warmPrimaries makes ps the primaries the store must have warmed, and
// starts a warm-up of each that is neither warmed nor warming.
func (s *Store) warmPrimaries(ps []primary) {
	w := s.warm
	w.mu.Lock()
	defer w.mu.Unlock()
	w.want = w.want[:0]
	for _, p := range ps {
		w.want = append(w.want, p.addr)
	}
	for a, ok := range w.done {
		if ok && !slices.Contains(w.want, a) {
			delete(w.done, a) // no longer a primary: warmed again when named
		}
	}
	for a := range w.failed {
		if !slices.Contains(w.want, a) {
			delete(w.failed, a)
		}
	}
	for _, p := range ps {
		if _, known := w.done[p.addr]; known || w.failed[p.addr] && s.slots.knownDead(p.addr) && p.brk.State() != BreakerClosed {
			continue
		}
		select {
		case <-s.stop:
			return
		default:
		}
		w.done[p.addr] = false
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			err := s.warmNode(p)
			w.mu.Lock()
			defer w.mu.Unlock()
			if err != nil {
				delete(w.done, p.addr) // tried again at the next map
				w.failed[p.addr] = true
				s.log.Debug("Could not warm up a Redis primary", "primary", p.addr, "error", err)
				return
			}
			if !slices.Contains(w.want, p.addr) {
				delete(w.done, p.addr) // left the map meanwhile
				return
			}
			w.done[p.addr] = true
			delete(w.failed, p.addr)
		}()
	}
}

// warmNode dials a pooled connection of the client the round trips use to
// reach p, and loads every script the store sends there, in one pipeline.
func (s *Store) warmNode(p primary) error {
	ctx, cancel := context.WithTimeout(context.Background(), warmTimeout)
	defer cancel()
	go func() { // Close does not wait out a dead node's warm-up
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	c, err := s.nodeClient(ctx, p)
	if err != nil {
		return err
	}
	pipe := c.Pipeline()
	for _, sc := range sentScripts {
		pipe.ScriptLoad(ctx, sc.src)
	}
	_, err = pipe.Exec(ctx)
	return err
}

// warmStandalone warms a standalone server, again every mapRetryEvery
// until it is warm (it may be down at start), or the store closes.
func (s *Store) warmStandalone() {
	t := time.NewTicker(mapRetryEvery)
	defer t.Stop()
	for {
		s.warmPrimaries([]primary{{addr: s.opts.Addrs[0], brk: s.shards.current.Load().breakers[0]}})
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if s.Warm() {
			return
		}
	}
}

// nodeClient is the client decisions reach p with: the standalone
// client, or the cluster client's node for p's key once go-redis routes it
// to p (it takes a new map shortly after the store: see kickRetry).
func (s *Store) nodeClient(ctx context.Context, p primary) (goredis.Cmdable, error) {
	cc, ok := s.client.(*goredis.ClusterClient)
	if !ok {
		return s.client, nil
	}
	t := time.NewTicker(kickRetry)
	defer t.Stop()
	for {
		c, err := cc.MasterForKey(ctx, p.key)
		if err == nil && realAddr(c.Options().Addr) == p.addr {
			return c, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return nil, err
		case <-t.C:
		}
	}
}

// knownDead reports that addr did not answer a map load and no map has
// brought it back since; a standalone store's source (nil) knows none.
func (ss *slotSource) knownDead(addr string) bool {
	if ss == nil {
		return false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	_, dead := ss.dead[addr]
	return dead
}

// sentScripts are the scripts the store runs, each once.
var sentScripts = func() []script {
	var out []script
	all := append(append([]script{grantScript, multiScript}, scripts[:]...), holdScripts[:]...)
	for _, sc := range all {
		if sc.src != "" && !slices.ContainsFunc(out, func(o script) bool { return o.sha == sc.sha }) {
			out = append(out, sc)
		}
	}
	return out
}()
