package docs_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/sluice-dev/sluice/"

// v1alpha1Importers are the packages outside api/ that import
// api/v1alpha1: only the operator's webhook wiring, whose scheme the
// conversion webhook converts with. The operator reads, reconciles and
// writes v1beta1 only (issue 41). Never add a package.
var v1alpha1Importers = []string{"cmd/operator"}

// TestLayers checks every package's imports against the layers of
// docs/architecture.md: a package imports only from lower layers.
func TestLayers(t *testing.T) {
	layers := readLayers(t)
	for pkg, imports := range moduleImports(t) {
		if skipLayering(pkg) {
			continue
		}
		mine, ok := layers[pkg]
		if !ok {
			t.Errorf("package %s is in no layer of docs/architecture.md's table", pkg)
			continue
		}
		for _, imp := range imports {
			if skipLayering(imp) {
				continue
			}
			if theirs, ok := layers[imp]; ok && theirs >= mine {
				t.Errorf("%s (layer %d) imports %s (layer %d): a package imports only from lower layers", pkg, mine, imp, theirs)
			}
		}
	}
}

// TestV1alpha1StaysInAPI: outside api/, only the operator's webhook wiring
// imports api/v1alpha1 (test helpers under internal/ may too), and it
// still does (else it comes off the list).
func TestV1alpha1StaysInAPI(t *testing.T) {
	var importers []string
	for pkg, imports := range moduleImports(t) {
		if !strings.HasPrefix(pkg, "api/") && !skipLayering(pkg) && slices.Contains(imports, "api/v1alpha1") {
			importers = append(importers, pkg)
		}
	}
	for _, pkg := range importers {
		if !slices.Contains(v1alpha1Importers, pkg) {
			t.Errorf("%s imports api/v1alpha1: outside api/, the model is v1beta1", pkg)
		}
	}
	for _, pkg := range v1alpha1Importers {
		if !slices.Contains(importers, pkg) {
			t.Errorf("%s no longer imports api/v1alpha1: take it off v1alpha1Importers", pkg)
		}
	}
	t.Logf("%d packages outside api/ import api/v1alpha1: %v", len(importers), importers)
}

// skipLayering leaves out test helpers and checks: they may import anything.
func skipLayering(pkg string) bool {
	for _, p := range []string{"internal/", "hack/", "test/", "docs", "charts/"} {
		if strings.HasPrefix(pkg, p) {
			return true
		}
	}
	return false
}

// readLayers parses the Layers table of docs/architecture.md: package
// (relative to the module) to layer.
func readLayers(t *testing.T) map[string]int {
	t.Helper()
	f, err := os.Open("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "## Layers":
			in = true
		case in && strings.HasPrefix(line, "## "):
			in = false
		case in && strings.HasPrefix(line, "| "):
			cells := strings.Split(line, "|")
			n, err := strconv.Atoi(strings.TrimSpace(cells[1]))
			if err != nil || len(cells) < 3 {
				continue // the header and its rule
			}
			for _, p := range strings.Split(cells[2], ",") {
				out[strings.Trim(strings.TrimSpace(p), "`")] = n
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("docs/architecture.md has no Layers table")
	}
	return out
}

// moduleImports lists each package of the module (not its tests) with the
// module's packages it imports, relative to the module.
func moduleImports(t *testing.T) map[string][]string {
	t.Helper()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(goTool, "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module)
		var imps []string
		for _, imp := range f[1:] {
			if rel, ok := strings.CutPrefix(imp, module); ok {
				imps = append(imps, rel)
			}
		}
		m[pkg] = imps
	}
	return m
}
