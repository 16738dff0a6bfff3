package redis_test

import (
	"slices"
	"testing"

	"github.com/sluice-dev/sluice/api/redisacl"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// The operator writes redisacl.LimiterRules into the ACL file of the Redis
// it runs, without linking the store: the list it holds must be the one the
// store reads from its scripts.
func TestOperatorACLMatchesTheStore(t *testing.T) {
	if got, want := redisacl.LimiterCommands, redisstore.ACLCommands(); !slices.Equal(got, want) {
		t.Fatalf("api/redisacl.LimiterCommands is stale:\n got  %q\n want %q (limiter/store/redis.ACLCommands, read from the scripts)", got, want)
	}
	for _, prefix := range []string{"", "tenant-a"} {
		if got, want := redisacl.LimiterRules(prefix), redisstore.ACLRules(prefix); got != want {
			t.Errorf("prefix %q: redisacl.LimiterRules %q, the store's ACLRules %q", prefix, got, want)
		}
	}
}
