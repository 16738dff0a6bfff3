package main

import "net"

// strictLookups makes r fail a lookup when one of its queries fails for
// a while (a timeout, a SERVFAIL) rather than answer from the others.
//
// A name's A and AAAA queries go out together. When the A query times out
// (for a DNS server on a lost node, which kube-proxy still sends every
// other query to until the node is NotReady) and the AAAA query gets its
// usual empty answer, Go's resolver reports "no such host". gRPC's
// dns:/// resolver reads that as a name with no address at all, drops
// every pod it balanced over and fails every call ("no children to pick
// from") until it looks again. A timeout, it reports as an error and
// keeps the pods it had.
func strictLookups(r *net.Resolver) {
	r.StrictErrors = true
}
