package redis

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/limiter/store"
)

// RedisKey is the prefix, then the counter's Key.String in a hash tag,
// whatever the prefix's length.
func TestRedisKeyFormat(t *testing.T) {
	var kb store.KeyBuilder
	kb.Add("policy")
	kb.Add("user-42")
	k := kb.Key()
	for _, prefix := range []string{"", "sl", strings.Repeat("p", 200)} {
		s := &Store{opts: Options{KeyPrefix: prefix}}
		if got, want := s.RedisKey(k), prefix+":{"+k.String()+"}"; got != want {
			t.Errorf("prefix of %d bytes: RedisKey %q, want %q", len(prefix), got, want)
		}
	}
}
