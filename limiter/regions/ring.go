package regions

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/sluice-dev/sluice/limiter/store"
)

// home returns the home region of the counter key among names (sorted,
// unique): the name with the highest rendezvous hash of (key, name).
func home(key store.Key, names []string) string {
	var best string
	var bestScore uint64
	for _, n := range names {
		h := sha256.New()
		h.Write(key[:])
		h.Write([]byte(n))
		var sum [32]byte
		score := binary.BigEndian.Uint64(h.Sum(sum[:0]))
		if best == "" || score > bestScore {
			best, bestScore = n, score
		}
	}
	return best
}

// globalKey is the counter of a Global policy's key: derived from the
// policy's ID and the request's counter key, so that a peer naming one
// policy can only reach that policy's counters.
func globalKey(policyID string, k store.Key) store.Key {
	var b store.KeyBuilder
	b.Add("sluice-global")
	b.Add(policyID)
	b.Add(string(k[:]))
	return b.Key()
}
