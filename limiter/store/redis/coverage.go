package redis

// Slot-map coverage: which CLUSTER SLOTS answers the store takes. A node
// may answer a map that knows no slot: a node not yet joined (a seed pod
// replaced with an empty disk, a node a scale-out is adding) or one just
// met that has not heard of every shard yet. go-redis, handed such a map,
// sends every command of a slot it lacks to a random node, and one that
// does not know the slot either answers CLUSTERDOWN Hash slot not served: a
// failed decision on a healthy cluster. Invariants:
//   - An answer that covers no slot is refused, and so is one that covers
//     fewer slots than an answer taken within coverageMemory; the slot
//     source (slotsource.go) then takes another node's, or keeps the map
//     it has.
//   - A cluster that really lost coverage (rebuilt from empty nodes) is
//     taken again once coverageMemory has passed since the last answer taken.
//   - The filter is a hook on every client the slot source asks; commands
//     other than CLUSTER SLOTS pass through untouched.

import (
	"context"
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// coverageMemory is how long the coverage of an answer taken bounds the
// answers taken after it.
const coverageMemory = 30 * time.Second

// partialViewError is the error of a refused CLUSTER SLOTS answer.
type partialViewError struct{ covered, want int }

func (e *partialViewError) Error() string {
	if e.covered == 0 {
		return "redis store: a node's CLUSTER SLOTS assigns no slot (a node not joined yet): asking another node"
	}
	return fmt.Sprintf("redis store: a node's CLUSTER SLOTS covers %d of %d slots, fewer than the %d of a recent answer: asking another node",
		e.covered, Slots, e.want)
}

// coverageFilter refuses CLUSTER SLOTS answers that cover fewer slots than
// a recent one (or none).
type coverageFilter struct {
	now func() time.Time

	mu      sync.Mutex
	covered int       // slots covered by the last answer taken
	at      time.Time // when it was taken
}

// take reports whether an answer covering n slots is taken, and records it.
func (f *coverageFilter) take(n int) (bool, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	want := 1
	if now.Sub(f.at) < coverageMemory {
		want = max(want, f.covered)
	}
	if n < want {
		return false, want
	}
	f.covered, f.at = n, now
	return true, want
}

// covers counts the slots an answer assigns to a node.
func covers(slots []goredis.ClusterSlot) int {
	seen := make([]bool, Slots)
	n := 0
	for _, r := range slots {
		if len(r.Nodes) == 0 || r.Start < 0 || r.End >= Slots || r.Start > r.End {
			continue
		}
		for i := r.Start; i <= r.End; i++ {
			if !seen[i] {
				seen[i] = true
				n++
			}
		}
	}
	return n
}

// DialHook implements goredis.Hook.
func (f *coverageFilter) DialHook(next goredis.DialHook) goredis.DialHook {
	return next
}

// ProcessHook implements goredis.Hook: it filters CLUSTER SLOTS answers.
func (f *coverageFilter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		cs, ok := cmd.(*goredis.ClusterSlotsCmd)
		if !ok || err != nil {
			return err
		}
		n := covers(cs.Val())
		if ok, want := f.take(n); !ok {
			err = &partialViewError{covered: n, want: want}
			cs.SetErr(err)
		}
		return err
	}
}

// ProcessPipelineHook implements goredis.Hook.
func (f *coverageFilter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

var _ goredis.Hook = (*coverageFilter)(nil)
