package redis_test

import (
	"testing"

	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/store"
)

func holder(newStore storetest.NewStore) storetest.NewHolder {
	return func(t *testing.T, clock store.Clock) store.Holder { return newStore(t, clock).(store.Holder) }
}

func TestHoldsStandalone(t *testing.T) { storetest.RunHolds(t, holder(newStandalone)) }

func TestHoldsCluster(t *testing.T) { storetest.RunHolds(t, holder(newCluster)) }

func TestMemoryAndStandaloneHoldAlike(t *testing.T) {
	storetest.RunHoldsDifferential(t, holder(newMemory), holder(newStandalone), 400)
}

func TestMemoryAndClusterHoldAlike(t *testing.T) {
	storetest.RunHoldsDifferential(t, holder(newMemory), holder(newCluster), 150)
}
