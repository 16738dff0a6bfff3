package rediscluster

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	goredis "github.com/redis/go-redis/v9"
)

// slotBatch is how many slots move together: their SETSLOT commands are
// pipelined.
const slotBatch = 64

// migrate moves slots to spread them evenly over the shards, one batch of
// slots at a time, until the plan is done or the pass's migration budget is
// spent. It first finishes any slot left open (MIGRATING or IMPORTING) by
// a pass that was cut short. Result.Migration is the plan still to do.
func (p *pass) migrate(ctx context.Context) error {
	masters := p.masters()
	if masters == nil {
		return nil
	}
	if err := p.closeOpenSlots(ctx, masters); err != nil || len(p.res.Actions) > 0 {
		return err
	}
	owner, ok := p.shardOwners()
	if !ok {
		return nil
	}
	var moves []SlotMove
	if p.spec.Migration != nil {
		moves = slices.Clone(p.spec.Migration.Moves)
	} else {
		moves = PlanMoves(owner, p.spec.Shards)
	}
	p.res.Migration = nil
	if len(moves) == 0 {
		return nil
	}
	p.res.Status.Operation = OperationMigrating
	p.res.Migration = &Migration{Moves: moves}
	deadline := p.o.now().Add(p.o.migrateFor)
	for len(moves) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		if p.o.now().After(deadline) {
			return nil
		}
		mv := moves[0]
		last := min(mv.First+slotBatch-1, mv.Last)
		var batch []int
		for s := mv.First; s <= last; s++ {
			if owner[s] == mv.FromShard {
				batch = append(batch, s)
			}
		}
		if len(batch) > 0 {
			keys, err := p.moveSlots(ctx, batch, masters[mv.FromShard], masters[mv.ToShard])
			if err != nil {
				return err
			}
			p.note("%s -> %s: moved slots %d-%d (%d keys)", masters[mv.FromShard].m.Pod, masters[mv.ToShard].m.Pod, mv.First, last, keys)
			for _, s := range batch {
				owner[s] = mv.ToShard
			}
		}
		if last == mv.Last {
			moves = moves[1:]
		} else {
			moves[0].First = last + 1
		}
		p.res.Migration = &Migration{Moves: slices.Clone(moves)}
	}
	p.res.Migration = nil
	return nil
}

// masters returns each shard's master when every shard has one, each
// knows the others at their addresses, and each reports cluster_state ok
// (a new master refuses MIGRATE with CLUSTERDOWN until then); nil
// otherwise.
func (p *pass) masters() []*view {
	ms := make([]*view, p.spec.Shards)
	for s := range ms {
		if ms[s] = p.shardMaster(s); ms[s] == nil || ms[s].info["cluster_state"] != "ok" {
			return nil
		}
	}
	for _, a := range ms {
		for _, b := range ms {
			if a != b && !knowsAt(a, b) {
				return nil
			}
		}
	}
	return ms
}

// shardOwners maps each slot to the shard serving it, as the anchor sees
// it; false unless a member serves every slot.
func (p *pass) shardOwners() ([]int, bool) {
	owner := make([]int, SlotCount)
	for s, id := range p.owners(p.anchor) {
		if owner[s] = p.shardOf(id); owner[s] < 0 {
			return nil, false
		}
	}
	return owner, true
}

// closeOpenSlots finishes every slot a master has MIGRATING or IMPORTING:
// its keys go to the importing side, which then owns it. Finishing, not
// aborting, keeps every key that already moved reachable.
func (p *pass) closeOpenSlots(ctx context.Context, masters []*view) error {
	type open struct{ src, dst *view }
	slots := map[int]open{}
	for _, m := range masters {
		me := m.self()
		for s, id := range me.Migrating {
			if dst := p.masterOf(id); dst != nil && dst != m {
				slots[s] = open{m, dst}
			}
		}
		for s, id := range me.Importing {
			if _, seen := slots[s]; seen {
				continue
			}
			src := p.masterOf(id)
			if owner := p.byID[p.owners(p.anchor)[s]]; owner != nil {
				src = owner
			}
			if src != nil && src != m {
				slots[s] = open{src, m}
			}
		}
	}
	keys := slices.Sorted(mapKeys(slots))
	for _, s := range keys {
		o := slots[s]
		n, err := p.moveSlots(ctx, []int{s}, o.src, o.dst)
		if err != nil {
			return err
		}
		p.note("%s -> %s: finished slot %d left open (%d keys)", o.src.m.Pod, o.dst.m.Pod, s, n)
	}
	return nil
}

// masterOf is the member that is master of the shard of the member holding
// id, or nil.
func (p *pass) masterOf(id string) *view {
	if s := p.shardOf(id); s >= 0 && s < p.spec.Shards {
		return p.shardMaster(s)
	}
	return nil
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// moveSlots moves slots from src to dst as redis-cli --cluster does: dst
// IMPORTING, src MIGRATING, MIGRATE the keys in batches, then SETSLOT NODE
// on dst, src and every other master. Empty slots move together in
// pipelines (counted again once MIGRATING, for a key written meanwhile); a
// slot with keys is opened and closed on its own, so that it
// stays MIGRATING (where a script over a present and an absent key gets
// TRYAGAIN) for a few round trips only. Each step is skipped when the nodes
// already are past it, so a cut migration is finished, not restarted.
func (p *pass) moveSlots(ctx context.Context, slots []int, src, dst *view) (int, error) {
	n, err := countKeys(ctx, src, slots)
	if err != nil {
		return 0, err
	}
	var empty []int
	for i, s := range slots {
		if n[i] == 0 {
			empty = append(empty, s)
		}
	}
	if err := p.openSlots(ctx, empty, src, dst); err != nil {
		return 0, err
	}
	// A client may have written a key into an empty slot after it was
	// counted and before src was told MIGRATING (from then on src sends
	// new keys to dst). Counted again, such a slot moves its keys too:
	// assigned as it is, that key would stay on src, out of every client's
	// reach.
	late, err := countKeys(ctx, src, empty)
	if err != nil {
		return 0, err
	}
	moved := 0
	for i, s := range empty {
		if late[i] == 0 {
			continue
		}
		k, err := p.migrateKeys(ctx, s, src, dst)
		moved += k
		if err != nil {
			return moved, err
		}
	}
	if err := p.assignSlots(ctx, empty, src, dst); err != nil {
		return moved, err
	}
	for i, s := range slots {
		if n[i] == 0 {
			continue
		}
		if err := p.openSlots(ctx, []int{s}, src, dst); err != nil {
			return moved, err
		}
		k, err := p.migrateKeys(ctx, s, src, dst)
		moved += k
		if err != nil {
			return moved, err
		}
		if err := p.assignSlots(ctx, []int{s}, src, dst); err != nil {
			return moved, err
		}
	}
	return moved, nil
}

// countKeys is CLUSTER COUNTKEYSINSLOT on v for each slot, in one round
// trip.
func countKeys(ctx context.Context, v *view, slots []int) ([]int64, error) {
	var counts []any
	for _, s := range slots {
		counts = append(counts, []any{"CLUSTER", "COUNTKEYSINSLOT", s})
	}
	return pipelineInts(ctx, v, counts)
}

// openSlots sets slots IMPORTING on dst, then MIGRATING on src, where
// they are not already.
func (p *pass) openSlots(ctx context.Context, slots []int, src, dst *view) error {
	srcMe, dstMe := src.self(), dst.self()
	var importing, migrating []any
	for _, s := range slots {
		if !serves(dstMe, s) && dstMe.Importing[s] != src.id {
			importing = append(importing, []any{"CLUSTER", "SETSLOT", s, "IMPORTING", src.id})
		}
		if serves(srcMe, s) && srcMe.Migrating[s] != dst.id {
			migrating = append(migrating, []any{"CLUSTER", "SETSLOT", s, "MIGRATING", dst.id})
		}
	}
	if err := pipeline(ctx, dst, importing); err != nil {
		return err
	}
	return pipeline(ctx, src, migrating)
}

// assignSlots sends SETSLOT NODE dst for slots to dst, then src, then every
// other master.
func (p *pass) assignSlots(ctx context.Context, slots []int, src, dst *view) error {
	var assign []any
	for _, s := range slots {
		assign = append(assign, []any{"CLUSTER", "SETSLOT", s, "NODE", dst.id})
	}
	order := []*view{dst, src}
	for _, m := range p.masters() {
		if m != dst && m != src {
			order = append(order, m)
		}
	}
	for _, m := range order {
		if err := pipeline(ctx, m, assign); err != nil {
			return err
		}
	}
	return nil
}

// migrateKeys MIGRATEs every key of slot from src to dst, a batch at a
// time, and returns how many moved.
func (p *pass) migrateKeys(ctx context.Context, slot int, src, dst *view) (int, error) {
	host, port := hostPort(dst.m.Addr)
	moved := 0
	for {
		v, err := src.c.do(ctx, "CLUSTER", "GETKEYSINSLOT", slot, migrateBatch)
		if err != nil {
			return moved, fmt.Errorf("%s: CLUSTER GETKEYSINSLOT %d: %w", src.m.Pod, slot, err)
		}
		keys, _ := v.([]any)
		if len(keys) == 0 {
			return moved, nil
		}
		args := []any{"MIGRATE", host, port, "", 0, strconv.Itoa(int(p.o.timeout.Milliseconds())), "REPLACE"}
		switch {
		case p.spec.Password == "":
		case p.spec.Username != "":
			args = append(args, "AUTH2", p.spec.Username, p.spec.Password)
		default:
			args = append(args, "AUTH", p.spec.Password)
		}
		args = append(append(args, "KEYS"), keys...)
		if _, err := src.c.do(ctx, args...); err != nil && err != goredis.Nil {
			return moved, fmt.Errorf("%s: MIGRATE %d keys of slot %d to %s: %w", src.m.Pod, len(keys), slot, dst.m.Pod, err)
		}
		moved += len(keys)
	}
}

// pipeline sends cmds to v in one round trip, failing on the first error.
func pipeline(ctx context.Context, v *view, cmds []any) error {
	_, err := pipelineInts(ctx, v, cmds)
	return err
}

// pipelineInts is pipeline for commands that answer integers, which it
// returns (0 for other replies).
func pipelineInts(ctx context.Context, v *view, cmds []any) ([]int64, error) {
	if len(cmds) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, v.c.o.timeout)
	defer cancel()
	res, err := v.c.c.Pipelined(ctx, func(pipe goredis.Pipeliner) error {
		for _, c := range cmds {
			pipe.Do(ctx, c.([]any)...)
		}
		return nil
	})
	if err != nil {
		for _, r := range res {
			if r.Err() != nil {
				return nil, fmt.Errorf("%s: %v: %w", v.m.Pod, r.Args(), r.Err())
			}
		}
		return nil, fmt.Errorf("%s: %w", v.m.Pod, err)
	}
	out := make([]int64, len(res))
	for i, r := range res {
		if c, ok := r.(*goredis.Cmd); ok {
			out[i], _ = c.Int64()
		}
	}
	return out, nil
}

// serves reports whether n's own line lists slot.
func serves(n Node, slot int) bool {
	for _, r := range n.Slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// migrateBatch is how many keys one MIGRATE moves.
const migrateBatch = 100
