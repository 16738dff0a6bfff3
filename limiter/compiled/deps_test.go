package compiled_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The request path links no API type and nothing of Kubernetes: the
// limiter's packages that answer requests read compiled policies only
// (limiter/config compiles them from the API types).
func TestRequestPathLinksNoKubernetes(t *testing.T) {
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goTool, "list", "-deps",
		"github.com/sluice-dev/sluice/limiter/service",
		"github.com/sluice-dev/sluice/limiter/server",
		"github.com/sluice-dev/sluice/limiter/store/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	var bad []string
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "k8s.io/") || strings.HasPrefix(pkg, "sigs.k8s.io/") ||
			strings.HasPrefix(pkg, "github.com/sluice-dev/sluice/api/v1") || pkg == "github.com/sluice-dev/sluice/limiter/config" {
			bad = append(bad, pkg)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("the request path (limiter/service, limiter/server, limiter/store/...) links %d packages it must not: %s",
			len(bad), strings.Join(bad, " "))
	}
}
