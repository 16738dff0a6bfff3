/*
Copyright 2026 The Sluice Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package check measures non-test Go files and functions for hack/funclen.
package check

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
)

// Limits are the largest sizes allowed, in lines (a function counts from its
// func keyword to its closing brace; a file counts every line).
type Limits struct {
	MaxFunc int
	MaxFile int
}

// Offender is a file or function over its limit.
type Offender struct {
	Pos   string // file:line
	Name  string // the function's name, or "" for a file
	Lines int
	Limit int
}

func (o Offender) String() string {
	if o.Name == "" {
		return fmt.Sprintf("%s: file has %d lines (limit %d)", o.Pos, o.Lines, o.Limit)
	}
	return fmt.Sprintf("%s: %s has %d lines (limit %d)", o.Pos, o.Name, o.Lines, o.Limit)
}

// Dir walks dir and returns every non-test .go file and function over its
// limit, sorted by position. testdata directories are skipped.
func Dir(dir string, l Limits) ([]Offender, error) {
	var out []Offender
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		found, err := File(path, l)
		out = append(out, found...)
		return err
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Pos < out[j].Pos })
	return out, err
}

// File returns path itself when it has more than l.MaxFile lines, and each
// function in it with more than l.MaxFunc lines.
func File(path string, l Limits) ([]Offender, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []Offender
	if n := fset.File(f.Pos()).LineCount(); n > l.MaxFile {
		out = append(out, Offender{Pos: path + ":1", Lines: n, Limit: l.MaxFile})
	}
	span := func(from, to token.Pos) int { return fset.Position(to).Line - fset.Position(from).Line + 1 }
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Body == nil {
				continue
			}
			if n := span(d.Pos(), d.End()); n > l.MaxFunc {
				out = append(out, Offender{Pos: fmt.Sprintf("%s:%d", path, fset.Position(d.Pos()).Line),
					Name: funcName(d), Lines: n, Limit: l.MaxFunc})
			}
		case *ast.GenDecl:
			// func literals bound at package level (var x = func() {...}).
			ast.Inspect(d, func(n ast.Node) bool {
				lit, ok := n.(*ast.FuncLit)
				if !ok {
					return true
				}
				if n := span(lit.Pos(), lit.End()); n > l.MaxFunc {
					out = append(out, Offender{Pos: fmt.Sprintf("%s:%d", path, fset.Position(lit.Pos()).Line),
						Name: "func literal", Lines: n, Limit: l.MaxFunc})
				}
				return false
			})
		}
	}
	return out, nil
}

func funcName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return d.Name.Name
	}
	t := d.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if g, ok := t.(*ast.IndexExpr); ok {
		t = g.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + d.Name.Name
	}
	return d.Name.Name
}
