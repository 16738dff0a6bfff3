package redis

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// TestCoverageFilter: an answer covering no slot is refused; one covering
// fewer slots than an answer taken within coverageMemory is refused; after
// that, a smaller cluster is taken again.
func TestCoverageFilter(t *testing.T) {
	now := time.Unix(1000, 0)
	f := &coverageFilter{now: func() time.Time { return now }}
	full := []goredis.ClusterSlot{{Start: 0, End: 8191, Nodes: []goredis.ClusterNode{{Addr: "a"}}},
		{Start: 8192, End: Slots - 1, Nodes: []goredis.ClusterNode{{Addr: "b"}}}}
	half := full[:1]
	steps := []struct {
		name  string
		after time.Duration
		slots []goredis.ClusterSlot
		taken bool
	}{
		{"no slot, nothing taken yet", 0, nil, false},
		{"half, nothing taken yet", 0, half, true},
		{"full", time.Second, full, true},
		{"half after full", time.Second, half, false},
		{"no slot after full", time.Second, nil, false},
		{"a range with no node counts nothing", time.Second, []goredis.ClusterSlot{{Start: 0, End: Slots - 1}}, false},
		{"full again", time.Second, full, true},
		{"half, once the memory has passed", coverageMemory, half, true},
		{"no slot, even then", coverageMemory, nil, false},
	}
	for _, s := range steps {
		now = now.Add(s.after)
		if got, _ := f.take(covers(s.slots)); got != s.taken {
			t.Errorf("%s: taken %v, want %v", s.name, got, s.taken)
		}
	}
}
