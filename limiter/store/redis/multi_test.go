package redis_test

import (
	"testing"

	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// newStandaloneMulti is newStandalone sending every Take through the
// multi script.
func newStandaloneMulti(t *testing.T, clock store.Clock) store.Store {
	s := newStandalone(t, clock)
	redisstore.MultiFromOne(s.(*redisstore.Store))
	return s
}

// The multi script decides as the exact scripts do, one decision at a
// time: the conformance table, idempotency, and the differential runs
// against the memory store, with every Take sent through it.
func TestMultiConformance(t *testing.T) {
	t.Run("conformance", func(t *testing.T) { storetest.Run(t, newStandaloneMulti) })
	t.Run("idempotency", func(t *testing.T) { storetest.RunIdempotency(t, newStandaloneMulti) })
	t.Run("differential", func(t *testing.T) { storetest.RunDifferential(t, newMemory, newStandaloneMulti, 400) })
	t.Run("features together", func(t *testing.T) { storetest.RunFeaturesTogether(t, newMemory, newStandaloneMulti, 300) })
}
