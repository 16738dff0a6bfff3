package redis

// Slots: Redis Cluster's hash of keys to slots, computed here so that a
// decision finds its shard's breaker without asking the client. Invariant:
// Slot agrees with CLUSTER KEYSLOT, hash tags included.

import (
	"encoding/base64"
	"strings"

	"github.com/sluice-dev/sluice/limiter/store"
)

// Slots is the number of Redis Cluster hash slots.
const Slots = 16384

// crcTable is CRC-16/XMODEM (polynomial 0x1021, initial value 0, no
// reflection), the checksum Redis Cluster hashes keys with, one entry per
// byte value.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

func crc16(b []byte) uint16 {
	var c uint16
	for _, x := range b {
		c = c<<8 ^ crcTable[byte(c>>8)^x]
	}
	return c
}

// Slot returns the Redis Cluster hash slot of key: of its hash tag, the
// part between the first '{' and the next '}' when that part is not empty,
// else of the whole key.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16([]byte(key)) % Slots)
}

// keyEncoding is store.Key.String's encoding.
var keyEncoding = base64.RawURLEncoding

// keySlot is the hash slot of RedisKey(k): the CRC of the key's hash tag,
// its base64 form, computed without allocating.
func keySlot(k store.Key) int {
	var tag [22]byte
	keyEncoding.Encode(tag[:], k[:])
	return int(crc16(tag[:]) % Slots)
}
