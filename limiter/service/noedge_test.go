package service_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoERLBranch: the service decides by the compiled model's general
// properties alone (compiled.Behaviours, Domain.HasQuotas and the like):
// no file of it (tests aside) names envoyproxy/ratelimit's compiled data
// (Policy.ERL, an ERL domain) or anything of its own after ERL. ERL's
// behaviours are compiled into those properties by limiter/config/erl.go,
// and ERL-only output is the edge's (limiter/server erl.go).
func TestNoERLBranch(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && erlNamed(id.Name) {
				t.Errorf("%s: identifier %s: an ERL branch in limiter/service; make it a general property of the compiled model (limiter/compiled properties.go) that limiter/config/erl.go sets", fset.Position(id.Pos()), id.Name)
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no file of limiter/service was checked")
	}
}

// erlNamed reports whether an identifier is named after
// envoyproxy/ratelimit: it holds "ERL", or starts with "erl".
func erlNamed(name string) bool {
	return strings.Contains(name, "ERL") || strings.HasPrefix(name, "erl")
}

// TestERLNamed: the guard above catches what the service used to branch on.
func TestERLNamed(t *testing.T) {
	for name, want := range map[string]bool{
		"ERL": true, "ERLOverride": true, "erlStats": true, "newERLStats": true, "ERLRate": true,
		"HitStats": false, "overrideLimit": false, "Quota": false, "err": false, "clearly": false,
	} {
		if got := erlNamed(name); got != want {
			t.Errorf("erlNamed(%q) = %v, want %v", name, got, want)
		}
	}
}
