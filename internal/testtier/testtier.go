// Package testtier names Sluice's test tiers and lets a test say which one it
// belongs to (docs/development/testing.md):
//
//   - unit: pure functions, no process and no listener beyond httptest; every
//     package's tests under `go test -short` (make test-unit), in seconds.
//   - integration: real redis-server processes (internal/redistest), a real
//     API server (envtest, bin/k8s) and real limiter processes (make
//     test-integration, which runs the unit tier too).
//   - e2e: test/e2e on a one-node Kubernetes built on this machine (make e2e).
//
// -short is the switch: a test of the integration tier calls Integration
// before it starts anything, and is skipped, saying why, under -short. It is
// never skipped otherwise: a missing redis-server or envtest fails the test,
// because a skipped store test proves nothing.
package testtier

import "testing"

// Integration skips t under -short, the unit tier: it needs the real
// process named by needs (e.g. "redis-server", "envtest").
func Integration(t testing.TB, needs string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("integration tier (needs %s): not run with -short; make test-integration runs it", needs)
	}
}
