// Package regions shares the limits of scope Global (spec.limit.rate.scope)
// among the regions of a fleet (spec.regions), each of which has its own
// store, without a cross-region call per decision.
//
// # Homes and grants
//
// Every Global counter has a home region: the region name with the highest
// rendezvous hash of (counter, name) among the sorted region names, so every
// region computes the same home from the key alone, and adding or removing
// a region moves only the counters that region wins or held. The home's
// store holds the counter. Every region, the home included, spends locally
// from a grant taken out of that counter: the two-tier grant of
// limiter/store/localtier with the region as the pod, the home's Granter
// (grant.lua on Redis) taking the grant out of the counter and registering
// it as that region's reserve. Another region takes its grants over the
// peer endpoint (POST /v1/peer/grant); the home takes its own from its own
// store, with no message, so its decisions no more wait on its store than
// the others' on the link. A region asks for its next grant when what it holds falls to
// half a grant, in the background, so no decision waits; unspent units go
// back (credit) with its next grant call, or when the grant expires (at
// most the grant TTL, and never past the end of a window). A home whose
// store is memory, which grants nothing, decides its keys in it.
//
// # The bound
//
// Let N be the number of regions and g the grant size, max(1,
// limit / (GrantDivisor·N)). Units leave the home's counter before a region
// spends them, so grants change only when a unit counts, as in two-tier
// mode; a region holds at most g at once, and the home's grant script never
// lets the regions hold more than N·g together. A key no region has an
// answer for yet (cold) is admitted from at most g units while its first
// grant is fetched, charged to the counter by that grant call. So per
// period the regions admit at most
//
//	B = 2·N·g  units above the limit  (≤ limit / GrantDivisor · 2)
//
// while every region reaches every home: g held outside the counter (0 for
// window algorithms, whose grants never outlive their window) and g of cold
// advance per region.
//
// # Partitions
//
// A region that can't reach a key's home (a failed or refused grant call,
// or, at the home, its own store failing) spends what it holds, then decides from its partition share of the limit
// (PartitionSharePercent, by default 100/N percent), counted in memory per
// key. It never admits more than the grant it held plus that share per
// period, so region r cut off from a home adds at most share_r above
// limit + B; the home, cut off from all the others, keeps admitting from
// its counter while each of them admits its share, and a home whose store
// is down admits its own share too. So with partitions the regions admit
// per period at most limit + B + the sum of every region's share: Bound,
// which counts a peer's share as the peer last said it in a grant call or
// answer (SharePercent), and 100% until it has. When the
// home answers again (a grant call succeeds, tried at most every
// ProbeInterval while the peer is down) the units the region admitted from
// its share are charged to the home's counter with that call, as far as the
// counter admits them, and grants resume. Peers' reachability, since when
// and the last exchange are reported by Status and the metrics.
//
// # Trust
//
// Peers talk mutual TLS (tls.go): a caller's region is the Common Name of
// its certificate, verified against the regions' CA, and a call whose body
// names another region is refused; a caller requires the home's
// certificate to name the region it called. Only in the lab
// (--peer-insecure-lab) do bearer tokens over plain HTTP stand in, each at
// least 32 bytes and compared in constant time. The home believes no limit a peer sends: a
// call names a policy, and the home grants from its own compiled limit of
// that policy, only when the policy is Global there and the home is the
// key's home; the counter is derived from the policy and the key, so a
// policy's limit always meets its own counters. A grant is at most g, a
// charge at most the capacity, and a credit at most what the home granted
// that region on that key and has not had back. Request bodies are at most
// MaxBodyBytes. The home's ledger of grants is bounded (MaxLedger).
package regions
