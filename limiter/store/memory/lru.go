package memory

import (
	"unsafe"

	"github.com/sluice-dev/sluice/limiter/store"
)

// A shard's counters are kept per tenant (store.Request.Tenant: the
// policy's namespace), each tenant's in a list from most to least
// recently used. A full shard evicts the least recently used counter of
// the writer's tenant when it holds its share of the shard (the shard's
// bound split evenly among the tenants with counters in it), else of the
// tenant that holds the most: one tenant's many long-lived counters can't
// push out another's few, and a busy counter outlives an idle one.
// Eviction is O(1) but for a scan of the shard's tenants when the tenant
// last found over its share no longer is.

// tenant is one tenant's counters in a shard.
type tenant struct {
	name string
	// lru is the list's sentinel: lru.next is the most recently used
	// counter, lru.prev the least.
	lru   entry
	keys  int
	bytes int64
}

// tenantBytes is the estimated memory of a tenant in a shard: its struct,
// its name's bytes aside, and its map slot (counted twice, as entryFixed).
const tenantBytes = int64(unsafe.Sizeof(tenant{})) + 2*int64(unsafe.Sizeof("")+unsafe.Sizeof(&tenant{}))

// tenantOf is the shard's tenant named name, made when new. Caller holds
// sh.mu, and links a counter to it before unlocking.
func (sh *shard) tenantOf(name string) *tenant {
	t := sh.tenants[name]
	if t == nil {
		t = &tenant{name: name}
		t.lru.next, t.lru.prev = &t.lru, &t.lru
		sh.tenants[name] = t
		sh.bytes += tenantBytes + int64(len(name))
	}
	return t
}

// link puts e, new to t, first in t's list.
func (t *tenant) link(e *entry) {
	e.tenant = t
	e.prev, e.next = &t.lru, t.lru.next
	e.next.prev, t.lru.next = e, e
	t.keys++
	t.bytes += e.bytes
}

// unlink takes e out of its tenant's list, and the tenant out of sh when
// it has no counter left. Caller holds sh.mu.
func (sh *shard) unlink(e *entry) {
	t := e.tenant
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	t.keys--
	t.bytes -= e.bytes
	if t.keys == 0 {
		delete(sh.tenants, t.name)
		sh.bytes -= tenantBytes + int64(len(t.name))
		if sh.over == t {
			sh.over = nil
		}
	}
}

// touch makes e its tenant's most recently used counter.
func touch(e *entry) {
	t := e.tenant
	if t.lru.next == e {
		return
	}
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = &t.lru, t.lru.next
	e.next.prev, t.lru.next = e, e
}

// oldest is t's least recently used counter other than keep's, or nil.
func (t *tenant) oldest(keep store.Key) *entry {
	e := t.lru.prev
	if e != &t.lru && e.key == keep {
		e = e.prev
	}
	if e == &t.lru {
		return nil
	}
	return e
}

// usage is what a tenant holds of the bound being enforced: keys or bytes.
type usage func(t *tenant) int64

func byKeys(t *tenant) int64  { return int64(t.keys) }
func byBytes(t *tenant) int64 { return t.bytes }

// victim is the counter to evict from a full shard of bound limit, never
// keep's: the least recently used of w, the writer's tenant, when w holds
// its share or more; else of the tenant last found over its share, while
// it still is; else of the tenant that holds the most. nil when no
// counter but keep's is left. Caller holds sh.mu.
func (sh *shard) victim(w *tenant, keep store.Key, used usage, limit int64) *entry {
	n := len(sh.tenants)
	if w == nil {
		n++ // the writer's first counter here
	}
	share := limit / int64(n)
	if w != nil && used(w) >= share {
		if e := w.oldest(keep); e != nil {
			return e
		}
	}
	if t := sh.over; t != nil && used(t) > share {
		if e := t.oldest(keep); e != nil {
			return e
		}
	}
	var most *entry
	sh.over = nil
	for _, t := range sh.tenants {
		if e := t.oldest(keep); e != nil && (sh.over == nil || used(t) > used(sh.over)) {
			sh.over, most = t, e
		}
	}
	return most
}
