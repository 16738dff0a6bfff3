// Package memory is the embedded counter store: sharded in-process maps with
// expiry and a bound on the number of keys (and on the number of idempotency
// records). It is the limiter's default store, for standalone use and for
// tests, and every limiter's fallback for failureMode Local.
package memory

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

const shardCount = 64

// Options configure a Store.
type Options struct {
	// MaxKeys bounds the number of live counters; 0 means 1,000,000. When a
	// shard is full, the least recently used counter is evicted, of the
	// writer's tenant (store.Request.Tenant) when it holds its share of the
	// shard (an even split among the tenants with counters there), else of
	// the tenant that holds the most (lru.go).
	MaxKeys int
	// MaxBytes bounds the memory of the live counters and penalty states,
	// as estimated by entryBytes, penaltyBytes and tenantBytes: keys,
	// states, a SlidingLog's entries, Concurrency's leases, the tenants'
	// lists and the maps' slots; 0
	// means DefaultMaxBytes. Each of the 64 shards holds at most its 64th
	// share; past it, a counter is evicted as when MaxKeys is reached, by
	// the tenants' shares of bytes, but never the key just written.
	MaxBytes int64
	// MaxIdempotencyRecords bounds the stored idempotency records; 0 means
	// 100,000. When a shard is full, expired records are evicted first, then
	// the sampled record closest to expiry: a retry after that is decided
	// afresh.
	MaxIdempotencyRecords int
	// MaxHolds bounds the stored reservations (store.Request.Hold); 0
	// means 100,000. When a shard is full, expired ones are evicted first,
	// then the sampled one closest to expiry: it is settled at its
	// estimate. Concurrency leases live in their counters.
	MaxHolds int
	// Clock is the time source; nil means time.Now.
	Clock store.Clock
	// SweepInterval is how often expired keys are removed in the
	// background; 0 means 10s, negative disables the sweeper.
	SweepInterval time.Duration
}

// DefaultMaxBytes is Options.MaxBytes when unset.
const DefaultMaxBytes = 256 << 20

// Estimated sizes, in bytes. A map slot holds a key and a value; Go's maps
// keep spare slots (up to 1/8 at full load, half after growing), so a slot
// is counted twice. A counter is a slot of key and pointer, the entry it
// points to, and the arrays of its state.
const (
	entryFixed   = 2*int64(unsafe.Sizeof(store.Key{})+unsafe.Sizeof(&entry{})) + int64(unsafe.Sizeof(entry{}))
	penaltyBytes = 2 * int64(unsafe.Sizeof(store.Key{})+unsafe.Sizeof(penaltyEntry{}))
	logEntrySize = int64(unsafe.Sizeof(algo.LogEntry{}))
	leaseSize    = int64(unsafe.Sizeof(algo.Lease{}))
)

// entryBytes is the estimated memory of a counter whose state is st.
func entryBytes(st *algo.State) int64 {
	return entryFixed + int64(cap(st.Log))*logEntrySize + int64(cap(st.Leases))*leaseSize
}

// Store is an in-memory store.Store. It is safe for concurrent use.
type Store struct {
	shards     [shardCount]shard
	perShard   int
	perBytes   int64
	perRecords int
	perHolds   int
	clock      store.Clock
	evicted    atomic.Uint64
	stop       chan struct{}
	done       chan struct{}
}

type shard struct {
	mu      sync.Mutex
	entries map[store.Key]*entry
	// records are the idempotency records of this shard's counters, by
	// counter then by the request's Idempotency, as in Redis, so that one
	// lock covers a decision and its record; nrecords counts them.
	records  map[store.Key]map[store.Key]record
	nrecords int
	// holds are the reservations of this shard's counters.
	holds map[holdKey]hold
	// penalties are the penalty states of this shard's counters
	// (algo.Penalty), beside them under the same lock.
	penalties map[store.Key]penaltyEntry
	// penaltiesOf counts the penalty states of each tenant (penalty.go).
	penaltiesOf map[string]int
	// bytes is the estimated memory of entries, penalties and tenants
	// (entryBytes, penaltyBytes, tenantBytes).
	bytes int64
	// tenants hold the entries by tenant, each in LRU order (lru.go);
	// over is the tenant last found over its share, or nil.
	tenants map[string]*tenant
	over    *tenant
}

// penaltyEntry is a counter's penalty state, its expiry (Unix µs) and
// its tenant.
type penaltyEntry struct {
	tenant    string
	state     algo.PenaltyState
	expiresAt int64
}

type entry struct {
	state     algo.State
	expiresAt int64 // Unix µs
	bytes     int64 // entryBytes(&state) when last stored
	key       store.Key
	// tenant's list links its entries, most recently used first.
	tenant     *tenant
	prev, next *entry
}

// New returns a memory store. Close stops its sweeper.
func New(opts Options) *Store {
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = 1_000_000
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxIdempotencyRecords <= 0 {
		opts.MaxIdempotencyRecords = 100_000
	}
	if opts.MaxHolds <= 0 {
		opts.MaxHolds = 100_000
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = 10 * time.Second
	}
	s := &Store{
		perShard:   max(1, opts.MaxKeys/shardCount),
		perBytes:   max(1, opts.MaxBytes/shardCount),
		perRecords: max(1, opts.MaxIdempotencyRecords/shardCount),
		perHolds:   max(1, opts.MaxHolds/shardCount),
		clock:      opts.Clock,
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].entries = make(map[store.Key]*entry)
		s.shards[i].records = make(map[store.Key]map[store.Key]record)
		s.shards[i].holds = make(map[holdKey]hold)
		s.shards[i].penalties = make(map[store.Key]penaltyEntry)
		s.shards[i].penaltiesOf = make(map[string]int)
		s.shards[i].tenants = make(map[string]*tenant)
	}
	if opts.SweepInterval > 0 {
		go s.sweepLoop(opts.SweepInterval)
	} else {
		close(s.done)
	}
	return s
}

// Take implements store.Store.
func (s *Store) Take(_ context.Context, req store.Request) (algo.Result, error) {
	now := s.clock()
	n := now.UnixMicro()
	sh := &s.shards[req.Key[0]%shardCount]

	sh.mu.Lock()
	defer sh.mu.Unlock()
	if req.Limit.Algorithm == algo.Concurrency || req.HasHold() {
		return s.takeHold(sh, now, req)
	}
	// A penalized key is denied whatever it asks, replays included.
	pen := req.Limit.Penalty
	pe, penOK := sh.penalties[req.Key]
	penPresent := penOK && pe.expiresAt > n
	if !pen.IsZero() {
		if r, ok := pen.Penalized(pe.state, penPresent, now); ok {
			return r, nil
		}
	}
	idem := req.HasIdempotency()
	live := false // a live record, whose replays may be spent
	if idem {
		var r algo.Result
		if r, live = replay(sh, req, n); r.Replayed {
			return r, nil
		}
	}
	e, ok := sh.entries[req.Key]
	present := ok && e.expiresAt > n
	if ok {
		touch(e)
	}
	// Decide on a copy: a decision that writes nothing leaves the entry as
	// it was. An expired entry lends its log's backing array.
	var st algo.State
	if present {
		st = e.state
	} else if ok {
		st.Log = e.state.Log[:0]
	}
	r, write, ttl := req.Limit.Take(&st, present, now, req.Cost)
	switch {
	case !write:
	case ttl <= 0:
		sh.deleteEntry(req.Key, e)
	case ok:
		sh.setEntry(e, st, n+ttl.Microseconds())
		s.fit(sh, n, req.Key)
	default:
		s.makeRoom(sh, n, req.Tenant)
		s.addEntry(sh, req.Key, req.Tenant, st, n, n+ttl.Microseconds())
	}
	if !pen.IsZero() && req.Limit.Strikes(req.Cost, r) {
		st := algo.PenaltyState{}
		if penPresent {
			st = pe.state
		}
		ttl := pen.Strike(&st, penPresent, now, &r)
		if !penOK {
			s.makePenaltyRoom(sh, n, req.Tenant)
			sh.bytes += penaltyBytes
			sh.penaltiesOf[req.Tenant]++
		}
		sh.penalties[req.Key] = penaltyEntry{state: st, expiresAt: n + ttl.Microseconds(), tenant: req.Tenant}
		s.fit(sh, n, req.Key)
	}
	if idem && !live && r.Allowed && req.Cost > 0 {
		s.record(sh, req, n, r)
	}
	return r, nil
}

// state returns a copy of the counter's state to decide on, and whether it
// is live: a decision that writes nothing leaves the entry as it was. An
// expired entry lends its log's backing array. Caller holds sh.mu.
func state(sh *shard, k store.Key, n int64) (st algo.State, e *entry, present bool) {
	e, ok := sh.entries[k]
	present = ok && e.expiresAt > n
	if present {
		st = e.state
	} else if ok {
		st.Log = e.state.Log[:0]
	}
	if ok {
		touch(e)
	}
	return st, e, present
}

// put stores what a decision of lim that wrote left. A state that is fresh
// already (ttl 0) goes when the script's key goes too (Concurrency's last
// lease released); a bucket's (TokenBucket, GCRA refilled by a credit) is
// kept, expired at n, as the script keeps its key: a clock that goes back
// before n decides from it, as Redis does. Caller holds sh.mu.
func (s *Store) put(sh *shard, k store.Key, tenant string, e *entry, st algo.State, n int64, ttl time.Duration, lim algo.Limit) {
	switch {
	case ttl <= 0 && !lim.Algorithm.UsesBurst():
		sh.deleteEntry(k, e)
	case e != nil:
		sh.setEntry(e, st, n+ttl.Microseconds())
		s.fit(sh, n, k)
	default:
		s.makeRoom(sh, n, tenant)
		s.addEntry(sh, k, tenant, st, n, n+ttl.Microseconds())
	}
}

// addEntry stores a new counter of tenant, within the shard's bytes.
// Caller holds sh.mu.
func (s *Store) addEntry(sh *shard, k store.Key, tenant string, st algo.State, now, expiresAt int64) {
	e := &entry{state: st, expiresAt: expiresAt, bytes: entryBytes(&st), key: k}
	sh.entries[k] = e
	sh.tenantOf(tenant).link(e)
	sh.bytes += e.bytes
	s.fit(sh, now, k)
}

// setEntry stores a counter's new state. Caller holds sh.mu.
func (sh *shard) setEntry(e *entry, st algo.State, expiresAt int64) {
	b := entryBytes(&st)
	sh.bytes += b - e.bytes
	e.tenant.bytes += b - e.bytes
	e.state, e.expiresAt, e.bytes = st, expiresAt, b
}

// deleteEntry removes counter k, whose entry is e (nil: none). Caller
// holds sh.mu.
func (sh *shard) deleteEntry(k store.Key, e *entry) {
	if e == nil {
		return
	}
	delete(sh.entries, k)
	sh.unlink(e)
	sh.bytes -= e.bytes
}

// deletePenalty removes counter k's penalty state. Caller holds sh.mu.
func (sh *shard) deletePenalty(k store.Key) {
	if p, ok := sh.penalties[k]; ok {
		delete(sh.penalties, k)
		sh.bytes -= penaltyBytes
		if sh.penaltiesOf[p.tenant]--; sh.penaltiesOf[p.tenant] == 0 {
			delete(sh.penaltiesOf, p.tenant)
		}
	}
}

// fit evicts from a shard over its bytes, as makeRoom does from a shard
// over its keys (a counter, or failing that a penalty state), but never
// keep's, the key just written. Caller holds sh.mu.
func (s *Store) fit(sh *shard, now int64, keep store.Key) {
	for sh.bytes > s.perBytes {
		if !s.evictOne(sh, now, keep) {
			return
		}
	}
}

// evictOne evicts one counter other than keep, by the tenants' shares
// of bytes (shard.victim; keep's tenant is the writer's); when keep's is
// the only one, one penalty state other than keep's. It reports whether
// it evicted anything. Caller holds sh.mu.
func (s *Store) evictOne(sh *shard, now int64, keep store.Key) bool {
	var w *tenant
	if e := sh.entries[keep]; e != nil {
		w = e.tenant
	}
	victim := sh.victim(w, keep, byBytes, s.perBytes)
	if victim == nil {
		for k := range sh.penalties {
			if k != keep {
				sh.deletePenalty(k)
				s.evicted.Add(1)
				return true
			}
		}
		return false
	}
	s.evict(sh, victim, now)
	return true
}

// evict removes e, a victim of a full shard, counting it when live.
// Caller holds sh.mu.
func (s *Store) evict(sh *shard, e *entry, now int64) {
	if e.expiresAt > now {
		s.evicted.Add(1)
	}
	sh.deleteEntry(e.key, e)
}

// makeRoom evicts from a full shard before tenant writes a new counter:
// the least recently used counter of the tenant over its share
// (shard.victim). Caller holds sh.mu.
func (s *Store) makeRoom(sh *shard, now int64, tenant string) {
	if len(sh.entries) < s.perShard {
		return
	}
	if victim := sh.victim(sh.tenants[tenant], store.Key{}, byKeys, int64(s.perShard)); victim != nil {
		s.evict(sh, victim, now)
	}
}

var _ store.Holder = (*Store)(nil)
