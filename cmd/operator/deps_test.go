package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The operator talks to limiter pods over HTTP (api/limiterwire) and to
// Redis with go-redis; it links none of the limiter's Envoy or gRPC
// packages. A package of controllers/ that imports limiter/server or
// limiter/store/redis for an identifier brings them back: move the
// identifier to api/limiterwire or api/redisacl instead.
func TestOperatorLinksNoEnvoyOrGRPC(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	var bad []string
	for _, pkg := range strings.Fields(string(out)) {
		if strings.Contains(pkg, "envoyproxy") || strings.HasPrefix(pkg, "google.golang.org/grpc") {
			bad = append(bad, pkg)
		}
	}
	if len(bad) > 0 {
		t.Errorf("cmd/operator links %d Envoy or gRPC packages, e.g. %s; find the import with `go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./cmd/operator`", len(bad), strings.Join(bad[:min(len(bad), 5)], ", "))
	}
}
