// Package erlcompat holds the differential tests of Sluice's drop-in for
// envoyproxy/ratelimit (ERL): the same ERL configuration is loaded by ERL
// itself (bin/erl, built by hack/build-erl.sh from the Go module proxy, on
// a real redis-server) and by a real limiter process
// (`limiter --policies DIR`, on its memory store and on Redis), the same
// RLS requests are sent to both, and the answers are compared field by
// field. It has no non-test code.
package erlcompat
