package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-dev/sluice/hack/funclen/check"
)

var limits = check.Limits{MaxFunc: 80, MaxFile: 400}

// No non-test file in controllers/ or limiter/ is over 400 lines, and no
// function there over 80 (issues 26 and 41).
func TestCodeSize(t *testing.T) {
	for _, tc := range []struct {
		dir           string
		enforce, file bool
	}{{"controllers", true, true}, {"limiter", true, true}} {
		offenders, err := check.Dir(filepath.Join("..", "..", tc.dir), limits)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range offenders {
			if tc.enforce && (o.Name != "" || tc.file) {
				t.Errorf("%s: split it", o)
			} else {
				t.Logf("info: %s", o)
			}
		}
	}
}

// The check finds a long function and a long file, and passes short ones.
func TestCheckFindsOffenders(t *testing.T) {
	dir := t.TempDir()
	long := "package x\n\nfunc Long() {\n"
	for range 80 {
		long += "\t_ = 1\n"
	}
	long += "}\n\nfunc Short() {}\n"
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(long), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x_test.go"), []byte(long), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := check.Dir(dir, check.Limits{MaxFunc: 80, MaxFile: 50})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "" || got[0].Lines != 86 || got[1].Name != "Long" || got[1].Lines != 82 {
		t.Fatalf("want the file (86 lines) and Long (82 lines), not the test file nor Short; got %v", got)
	}
}
