package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/controllers/resources"
)

// The fleet reconciler keeps a little state between passes, each piece
// owned by one of the types below and touched only through its methods.
// None of it is the truth: each is a memo that saves a read or a write, or
// remembers what the last pass saw, and an operator restart starts it
// afresh. (The Redis Cluster's trackers and health are redisfleet's:
// Provisioner.)

// keyed is a map guarded by a mutex.
type keyed[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]V
}

func (k *keyed[K, V]) load(key K) (V, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	v, ok := k.m[key]
	return v, ok
}

func (k *keyed[K, V]) store(key K, v V) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[K]V{}
	}
	k.m[key] = v
}

func (k *keyed[K, V]) delete(key K) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, key)
}

// appliedObjects remembers what the operator last applied to each object
// (by type, namespace and name): the resourceVersion the apply returned and
// a hash of the content sent.
type appliedObjects struct{ keyed[string, appliedState] }

// appliedState is what the operator last applied to one object.
type appliedState struct {
	resourceVersion string
	content         [32]byte
}

// unchanged reports whether the operator applied content to the object at
// key and nobody changed it since (it is still at resourceVersion).
func (a *appliedObjects) unchanged(key, resourceVersion string, content [32]byte) bool {
	last, ok := a.load(key)
	return ok && last == appliedState{resourceVersion, content}
}

// record notes an apply of content that left the object at resourceVersion.
func (a *appliedObjects) record(key, resourceVersion string, content [32]byte) {
	a.store(key, appliedState{resourceVersion, content})
}

// topKKeysMade remembers the fleets (by UID) whose hottest-values key
// Secret this operator has created or found.
type topKKeysMade struct{ keyed[types.UID, struct{}] }

func (t *topKKeysMade) has(uid types.UID) bool { _, ok := t.load(uid); return ok }
func (t *topKKeysMade) mark(uid types.UID)     { t.store(uid, struct{}{}) }

// adminCertsSeen remembers, per fleet UID, when the operator last read the
// fleet's admin certificate and when that certificate expires.
type adminCertsSeen struct {
	keyed[types.UID, adminCertState]
}

// adminCertState is what the operator last saw of a fleet's admin TLS.
type adminCertState struct {
	checked  time.Time
	notAfter time.Time
}

// fresh reports whether the fleet's certificate was read less than
// adminCertRecheck before now and is not due for renewal.
func (a *adminCertsSeen) fresh(uid types.UID, now time.Time) bool {
	st, ok := a.load(uid)
	return ok && now.Sub(st.checked) < adminCertRecheck && now.Add(resources.RedisCertRenewBefore).Before(st.notAfter)
}

// record notes that the fleet's certificate, read at now, expires at
// notAfter.
func (a *adminCertsSeen) record(uid types.UID, now, notAfter time.Time) {
	a.store(uid, adminCertState{checked: now, notAfter: notAfter})
}
