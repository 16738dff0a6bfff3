package redis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// Slot agrees with CLUSTER KEYSLOT, hash tags included, and so does the
// slot the store computes for its own keys.
func TestSlotMatchesRedis(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: clusterAddrs(t)[0]})
	defer c.Close()
	s := realStore(t, redisstore.Options{Addrs: clusterAddrs(t), Cluster: true})
	keys := []string{"", "a", "foo", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{}", "x{", "}{y}"}
	for i := range 200 {
		keys = append(keys, s.RedisKey(storetest.KeyFor(t, fmt.Sprint(i))))
	}
	for _, k := range keys {
		want, err := c.ClusterKeySlot(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := redisstore.Slot(k); int64(got) != want {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
}

// A caller who puts hash tags in descriptor values cannot choose the slot:
// values only reach Redis hashed.
func TestKeysCannotBeSteeredToASlot(t *testing.T) {
	s := realStore(t, redisstore.Options{Addrs: clusterAddrs(t), Cluster: true})
	slots := map[int64]bool{}
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: clusterAddrs(t)})
	defer c.Close()
	for i := range 64 {
		var b store.KeyBuilder
		b.Add("policy")
		b.Add(fmt.Sprintf("{victim}%d", i)) // an attacker's value
		k := s.RedisKey(b.Key())
		if strings.Contains(k, "victim") || strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
			t.Fatalf("key %q leaks the value or has extra braces", k)
		}
		slot, err := c.ClusterKeySlot(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
	}
	if len(slots) < 50 {
		t.Fatalf("64 values sharing a {victim} tag landed in only %d slots", len(slots))
	}
}
