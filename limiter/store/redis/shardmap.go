package redis

// Shard map: which breaker guards each hash slot. Invariants:
//   - A shard is the set of slots one primary owns (unassigned slots form
//     one more); its breaker is named by its slot ranges ("0-5460"), or
//     "standalone", and a map that keeps a shard's ranges keeps its breaker
//     (a failover moves no slot, so it keeps every breaker).
//   - The map is read without locks (an atomic pointer) and replaced whole;
//     installs are serialized. A breaker whose shard left the map is
//     retired, and its metrics removed.
//   - Until a cluster's map is loaded, and always for a standalone server,
//     one breaker guards every slot.
//   - A cluster's map is loaded at start, every mapRefreshEvery (slots move
//     when shards are added), every mapOpenEvery while a breaker is open (a
//     failover is found when Redis completes it), and at once when a round
//     trip fails or a breaker asks (reload): one load at a time, at most
//     one per mapMinGap, so a burst of failures costs one load. A failed
//     load keeps the last map and retries every mapRetryEvery.
//   - A load that finds a new primary for a shard whose breaker is open
//     kicks its probe: the breaker closes on the new primary at once, not
//     after its cool-down.
//   - go-redis is handed a load's map when it differs from the last load's,
//     or when go-redis does not route by it, and takes it at once (see
//     Store.handMap), not after its own reloads' 200ms pacing.

import (
	"context"
	"log/slog"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/limiter/store"
)

const (
	mapRefreshEvery = 10 * time.Second
	mapRetryEvery   = time.Second
	mapOpenEvery    = 100 * time.Millisecond
	mapMinGap       = 100 * time.Millisecond
	mapLoadTimeout  = time.Second
)

// Triggers of a slot map load, the "trigger" label of
// sluice_redis_slotmap_loads_total; a failed round trip's trigger is its
// FailureClass, or "moved".
const (
	triggerTimer   = "timer"   // start, mapRefreshEvery
	triggerRetry   = "retry"   // mapRetryEvery after a failed load
	triggerOpen    = "open"    // a breaker is open: mapOpenEvery
	triggerBreaker = "breaker" // a breaker opened, or its probe failed
	triggerMoved   = "moved"   // a MOVED reply: slots moved
	triggerStale   = "stale"   // a node knew a later epoch than the map taken
)

// shardMap maps every hash slot to its shard's breaker.
type shardMap struct {
	index    [Slots]uint16
	breakers []*breaker
}

// shards holds the current shardMap and the breakers it uses.
type shards struct {
	env    *breakerEnv
	prefix string // of probe keys: the store's KeyPrefix
	log    *slog.Logger

	current atomic.Pointer[shardMap]
	loaded  atomic.Bool // a cluster's map was installed once
	refresh chan string // asks the map loop to reload now, and why
	every   time.Duration

	mu     sync.Mutex          // installs maps one at a time
	byName map[string]*breaker // the breakers of the current map
	owners map[string]string   // the primary of each, by breaker name
	// primaries are the current map's, with their probe keys; warm is
	// handed them after each load (warm.go).
	primaries []primary
	warm      func([]primary)
}

// newShards starts with one breaker, name, for every slot.
func newShards(env *breakerEnv, prefix, name string, log *slog.Logger) *shards {
	b := newBreaker(env, name, prefix+":{probe}")
	sh := &shards{env: env, prefix: prefix, log: log, refresh: make(chan string, 1), every: mapRefreshEvery,
		byName: map[string]*breaker{name: b}, owners: map[string]string{}}
	sh.current.Store(&shardMap{breakers: []*breaker{b}})
	return sh
}

// breakerFor returns the breaker of k's shard.
func (sh *shards) breakerFor(k store.Key) *breaker {
	m := sh.current.Load()
	if len(m.breakers) == 1 {
		return m.breakers[0]
	}
	return m.breakers[m.index[keySlot(k)]]
}

// reload asks the map loop to load the map now, without waiting; a load
// already asked for keeps its trigger.
func (sh *shards) reload(trigger string) {
	select {
	case sh.refresh <- trigger:
	default:
	}
}

// loop keeps the cluster's map until stop is closed: it loads it with
// fetch, then calls loaded.
func (sh *shards) loop(fetch func(context.Context) ([]goredis.ClusterSlot, error), loaded func(), stop <-chan struct{}) {
	t := time.NewTimer(0)
	defer t.Stop()
	var last time.Time
	var prev []goredis.ClusterSlot
	onTimer := triggerTimer
	for {
		trigger := onTimer
		select {
		case <-stop:
			return
		case <-t.C:
			if sh.anyOpen() {
				trigger = triggerOpen
			}
		case trigger = <-sh.refresh:
			t.Stop()
			if !sh.wait(time.Until(last.Add(mapMinGap)), stop) {
				return
			}
		}
		last = time.Now()
		sh.env.metrics.loads.WithLabelValues(trigger).Inc()
		ctx, cancel := context.WithTimeout(context.Background(), mapLoadTimeout)
		slots, err := fetch(ctx)
		cancel()
		next := sh.every
		onTimer = triggerTimer
		if err != nil || len(slots) == 0 {
			if sh.loaded.Load() {
				sh.log.Debug("Could not reload the Redis Cluster slot map; keeping the last one", "error", err)
			}
			next, onTimer = mapRetryEvery, triggerRetry
		} else {
			handed := sh.install(slots)
			// A new go-redis state per load is garbage: only a new map,
			// or one go-redis does not route by (a reload of its own that
			// read the map before this one stored last), is handed.
			if !reflect.DeepEqual(slots, prev) || !sh.routed() {
				loaded()
			}
			prev = slots
			if sh.warm != nil {
				sh.mu.Lock()
				ps := sh.primaries
				sh.mu.Unlock()
				sh.warm(ps)
			}
			for _, h := range handed {
				sh.log.Info("Redis shard has a new primary", "shard", h.b.name, "primary", realAddr(h.addr), "trigger", trigger)
				h.b.kick(h.addr) // its probe waits until go-redis routes there
			}
		}
		if sh.anyOpen() {
			next = min(next, mapOpenEvery)
		}
		t.Reset(next)
	}
}

// routed reports whether go-redis routes each shard of the current map
// to its primary (no command is sent).
func (sh *shards) routed() bool {
	sh.mu.Lock()
	ps := sh.primaries
	sh.mu.Unlock()
	for _, p := range ps {
		if sh.env.routes != nil && !sh.env.routes(p.key, p.addr) {
			return false
		}
	}
	return true
}

// wait sleeps d, or returns false when stop is closed first.
func (sh *shards) wait(d time.Duration, stop <-chan struct{}) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}

// anyOpen reports whether a breaker of the current map is not closed.
func (sh *shards) anyOpen() bool {
	for _, b := range sh.current.Load().breakers {
		if b.State() != BreakerClosed {
			return true
		}
	}
	return false
}

// install groups slots by the primary that owns them (unassigned slots
// form a group of their own) and installs a breaker per group, keeping the
// breakers of groups whose slots did not change. It returns the breakers
// whose shard has a new primary (a failover).
func (sh *shards) install(slots []goredis.ClusterSlot) (handed []handover) {
	owner := make([]string, Slots) // "" is unassigned
	addrs := map[string]string{}   // of each owner
	for _, r := range slots {
		if len(r.Nodes) == 0 || r.Start < 0 || r.End >= Slots || r.Start > r.End {
			continue
		}
		id := r.Nodes[0].ID
		if id == "" {
			id = r.Nodes[0].Addr
		}
		addrs["node:"+id] = r.Nodes[0].Addr
		for i := r.Start; i <= r.End; i++ {
			owner[i] = "node:" + id
		}
	}
	// Ranges per owner, in slot order.
	ranges := map[string][]string{}
	var order []string
	for i := 0; i < Slots; {
		j := i
		for j+1 < Slots && owner[j+1] == owner[i] {
			j++
		}
		o := owner[i]
		if _, ok := ranges[o]; !ok {
			order = append(order, o)
		}
		if i == j {
			ranges[o] = append(ranges[o], strconv.Itoa(i))
		} else {
			ranges[o] = append(ranges[o], strconv.Itoa(i)+"-"+strconv.Itoa(j))
		}
		i = j + 1
	}
	m := &shardMap{}
	idx := map[string]uint16{}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	byName, owners := map[string]*breaker{}, map[string]string{}
	for _, o := range order {
		name := strings.Join(ranges[o], ",")
		idx[o] = uint16(len(m.breakers))
		b := sh.byName[name]
		if b == nil {
			b = newBreaker(sh.env, name, "")
		}
		if was := sh.owners[name]; was != "" && was != o && o != "" {
			handed = append(handed, handover{b, addrs[o]})
		}
		byName[name], owners[name] = b, o
		m.breakers = append(m.breakers, b)
	}
	for i := range m.index {
		m.index[i] = idx[owner[i]]
	}
	for _, b := range m.breakers {
		if b.probeKey == "" {
			b.probeKey = sh.probeKey(m, b)
		}
	}
	for name, b := range sh.byName {
		if byName[name] == nil {
			b.retire()
		}
	}
	sh.byName, sh.owners = byName, owners
	sh.primaries = primariesOf(m, order, idx, addrs)
	prev := sh.current.Swap(m)
	sh.loaded.Store(true)
	if len(prev.breakers) != len(m.breakers) || !slices.Equal(prev.index[:], m.index[:]) {
		names := make([]string, len(m.breakers))
		for i, b := range m.breakers {
			names[i] = b.name
		}
		sh.log.Info("Redis Cluster shards", "shards", names)
	}
	return handed
}

// primariesOf lists the primaries of m, the owners in order, each with
// its shard's probe key; idx is each owner's breaker, addrs its address.
func primariesOf(m *shardMap, order []string, idx map[string]uint16, addrs map[string]string) []primary {
	var ps []primary
	for _, o := range order {
		if o != "" {
			b := m.breakers[idx[o]]
			ps = append(ps, primary{addr: addrs[o], key: b.probeKey, brk: b})
		}
	}
	return ps
}

// handover is a shard whose slots a new primary, at addr, took over.
type handover struct {
	b    *breaker
	addr string
}

// probeKey finds a key in b's slots, for its probes.
func (sh *shards) probeKey(m *shardMap, b *breaker) string {
	for i := 0; ; i++ {
		tag := "probe-" + strconv.Itoa(i)
		slot := int(crc16([]byte(tag)) % Slots)
		if m.breakers[m.index[slot]] == b {
			return sh.prefix + ":{" + tag + "}"
		}
	}
}

// BreakerStatus is one shard's breaker, for readiness detail and tests.
type BreakerStatus struct {
	// Shard names the shard by its slot ranges ("0-5460"), or "standalone".
	Shard string
	State BreakerState
	// Since is when the breaker entered State.
	Since time.Time
}

// Breakers lists the breakers of the shards the store knows, by shard.
func (s *Store) Breakers() []BreakerStatus {
	m := s.shards.current.Load()
	out := make([]BreakerStatus, len(m.breakers))
	for i, b := range m.breakers {
		out[i] = BreakerStatus{Shard: b.name, State: b.State(), Since: time.Unix(0, b.since.Load())}
	}
	slices.SortFunc(out, func(a, b BreakerStatus) int { return firstSlot(a.Shard) - firstSlot(b.Shard) })
	return out
}

// firstSlot is the first slot of a shard name such as "5461-10921", or 0.
func firstSlot(name string) int {
	end := strings.IndexAny(name, "-,")
	if end < 0 {
		end = len(name)
	}
	n, _ := strconv.Atoi(name[:end])
	return n
}
