// Package redis is the shared counter store: the Lua cores of
// limiter/algo's algorithms, run with EVALSHA (falling back to EVAL on
// NOSCRIPT) against a standalone Redis or a Redis Cluster.
//
// A decision (Take, or Grant in two-tier mode) goes through four parts,
// one file each, with its invariants at the top:
//
//   - shardmap.go: the breaker of the key's shard (a shard is the slots of
//     one primary; a standalone server is one shard). While it is open the
//     decision fails in microseconds with store.ErrUnavailable, without
//     touching Redis, and the caller's failure mode decides.
//   - batcher.go: concurrent decisions are batched with no goroutine of the
//     store's own. A caller that finds fewer than Workers round trips in
//     flight sends every pending decision as one pipelined round trip, and
//     hands over to a waiting caller, who sends the next. No decision waits
//     longer than Timeout for its turn.
//   - roundtrip.go: one pipeline of script runs with a deadline of Timeout
//     (split per node by go-redis in cluster mode), NOSCRIPT and TRYAGAIN
//     sent again, each shard's outcome told to its breaker. On a standalone
//     server the round trip's exact decisions share one run of the multi
//     script (multi.go): one EVALSHA for all of them, each decided by its
//     algorithm's exact script, and failing alone.
//   - scripts.go and scripts/: the scripts, one core per algorithm shared by
//     the exact and the granting entry points.
//
// breaker.go is the breaker itself: timeouts, connection errors,
// CLUSTERDOWN, TRYAGAIN, MASTERDOWN and LOADING (errors.go) open it;
// a probe closes it as soon as the shard answers, at once when the slot
// map names a new primary. slotsource.go fetches the cluster's slot map
// from every node at once, for the shard map (shardmap.go) and go-redis
// alike; a failed call or a breaker open reloads it, so a promoted replica
// is found at once; slotfirst.go has a new store's first map be the
// answer that knows the highest config epoch. warm.go warms every primary
// a map names (a pooled connection dialled, every script loaded), so that
// Warm, and a new primary's first decisions, pay neither a dial nor a
// NOSCRIPT. coverage.go keeps go-redis from taking the slot map of a node that has
// not joined (or not heard of every shard) yet. store.go
// wires the parts; options.go parses store addresses; slot.go hashes keys
// to slots; grant.go is two-tier mode's call; hold.go takes and settles
// holdings (Concurrency leases, reservations) with scripts/hold.lua.
package redis
