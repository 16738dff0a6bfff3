package memory

// Sampled eviction, nearest to expiry: of reservations and idempotency
// records (penalty states by namespace share, penalty.go; counters by
// LRU, lru.go).

// evictionSample is how many items sampled eviction looks at.
const evictionSample = 16

// sampleVictim is sampled eviction, for every map of the store: among up
// to evictionSample items of m other than *skip's (nil skips none; in map
// order, which Go randomizes), the first expired at now, else the one
// closest to expiry. expired says which; ok is false when m holds nothing
// else.
func sampleVictim[K comparable, V any](m map[K]V, now int64, skip *K, expiresAt func(V) int64) (victim K, expired, ok bool) {
	soonest, sampled := int64(-1), 0
	for k, v := range m {
		if skip != nil && k == *skip {
			continue
		}
		at := expiresAt(v)
		if at <= now {
			return k, true, true
		}
		if soonest < 0 || at < soonest {
			victim, soonest = k, at
		}
		if sampled++; sampled == evictionSample {
			break
		}
	}
	return victim, false, soonest >= 0
}

func holdExpiry(h hold) int64 { return h.expiresAt }
