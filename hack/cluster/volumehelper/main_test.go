package main

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

func env(base, owner string) func(string) string {
	return func(k string) string {
		switch k {
		case "VOL_BASE":
			return base
		case "VOL_OWNER":
			return owner
		}
		return ""
	}
}

func TestCreateAndDelete(t *testing.T) {
	base := t.TempDir()
	p := filepath.Join(base, "pvc-1_ns_data")
	owner := os.Getuid() // root in make test; chown to oneself elsewhere
	if err := run([]string{"-p", p, "-s", "1073741824", "-m", "Filesystem", "-a", "create"}, env(base, itoa(owner)), io.Discard); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 || !fi.IsDir() {
		t.Errorf("%s is %v, want a 0700 directory", p, fi.Mode())
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != owner || int(st.Gid) != owner {
		t.Errorf("%s is owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, owner, owner)
	}
	// Again: a helper pod that ran twice.
	if err := run([]string{"-p", p, "-a", "create"}, env(base, itoa(owner)), io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "appendonly.aof"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"-p", p, "-a", "delete"}, env(base, ""), io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("%s after delete: %v, want it gone", p, err)
	}
	if err := run([]string{"-p", p, "-a", "delete"}, env(base, ""), io.Discard); err != nil {
		t.Errorf("delete of a volume that is gone: %v, want nothing to do", err)
	}
}

// TestAttackHelperActsOutsideItsBase: the provisioner's arguments (a
// pathPattern, a node path map) or a planted link point the helper at
// another directory: it refuses, and the directory stays.
func TestAttackHelperActsOutsideItsBase(t *testing.T) {
	base := t.TempDir()
	victim := t.TempDir()
	if err := os.WriteFile(filepath.Join(victim, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(base, "pvc-link")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-p", victim, "-a", "delete"},
		{"-p", base, "-a", "delete"},
		{"-p", filepath.Join(base, "pvc-x", "..", "..", filepath.Base(victim)), "-a", "delete"},
		{"-p", filepath.Join(base, "pvc-x", "deeper"), "-a", "create"},
		{"-p", filepath.Join(base, "not-a-claim"), "-a", "create"},
		{"-p", filepath.Join(base, "pvc-link"), "-a", "delete"},
		{"-p", filepath.Join(base, "pvc-link"), "-a", "create"},
		{"-p", filepath.Join(base, "pvc-x"), "-a", "chmod"},
		{"-p", filepath.Join(base, "pvc-x"), "-m", "Block", "-a", "create"},
	} {
		if err := run(args, env(base, "999"), io.Discard); err == nil {
			t.Errorf("%q: no error", args)
		} else {
			t.Logf("%q: %v", args, err)
		}
	}
	if _, err := os.Stat(filepath.Join(victim, "keep")); err != nil {
		t.Errorf("the victim's file: %v", err)
	}
	for _, e := range []func(string) string{env("", "999"), env("relative", "999"), env("/", "999"), env(base, ""), env(base, "-1")} {
		if err := run([]string{"-p", filepath.Join(base, "pvc-y"), "-a", "create"}, e, io.Discard); err == nil {
			t.Errorf("VOL_BASE=%q VOL_OWNER=%q: no error", e("VOL_BASE"), e("VOL_OWNER"))
		}
	}
	if _, err := os.Stat(filepath.Join(base, "pvc-y")); !os.IsNotExist(err) {
		t.Errorf("pvc-y made under a bad environment: %v", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
