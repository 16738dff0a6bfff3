package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseLdd(t *testing.T) {
	out := "\tlinux-vdso.so.1 (0x00007ffd)\n" +
		"\tlibssl.so.3 => /lib/x86_64-linux-gnu/libssl.so.3 (0x00007f94)\n" +
		"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f94)\n" +
		"\t/lib64/ld-linux-x86-64.so.2 (0x00007f94)\n"
	got, err := parseLdd(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/lib/x86_64-linux-gnu/libssl.so.3", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if !slices.Equal(got, want) {
		t.Errorf("parseLdd = %q, want %q", got, want)
	}
	if _, err := parseLdd("\tlibfoo.so.1 => not found\n"); err == nil || !strings.Contains(err.Error(), "libfoo.so.1") {
		t.Errorf("a missing library: err = %v, want one naming it", err)
	}
	if _, err := parseLdd("\tnot a dynamic executable\n"); err == nil {
		t.Error("a static binary: no error")
	}
}

// TestHostExecutableImage makes the redis image from Debian's redis-server
// (hack/install-deps.sh installs it) and checks that its layers alone run
// it: extracted into a directory, redis-server starts there under chroot
// (as root; elsewhere the test stops after checking the files).
func TestHostExecutableImage(t *testing.T) {
	exe := components["redis"].HostExecutables[0]
	if _, err := os.Stat(exe); err != nil {
		t.Skipf("%s is not installed (hack/install-deps.sh): %v", exe, err)
	}
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	opts := Options{Component: components["redis"], Registry: "e2e.sluice.local", Version: "7", Arch: "amd64", Created: created}
	img, ref, err := Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "redis.tar")
	if err := WriteArchive(archive, img, ref, created); err != nil {
		t.Fatal(err)
	}
	loaded := readLayout(t, archive, ref.String())
	layers, err := loaded.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Fatalf("%d layers, want 2 (base, executables)", len(layers))
	}
	libs, err := lddLibraries(exe)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, l := range layers {
		for name, f := range files(t, l) {
			p := filepath.Join(root, name)
			if f.hdr.FileInfo().IsDir() {
				if err := os.MkdirAll(p, 0o755); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, f.data, os.FileMode(f.hdr.Mode)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, want := range append([]string{exe}, libs...) {
		fi, err := os.Stat(filepath.Join(root, want))
		if err != nil {
			t.Errorf("%s is not in the image: %v", want, err)
			continue
		}
		if want == exe && fi.Mode()&0o111 == 0 {
			t.Errorf("%s is not executable: %v", want, fi.Mode())
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: can't chroot into the image to run it")
	}
	out, err := exec.Command("chroot", root, exe, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Redis server v=") {
		t.Fatalf("redis-server --version in the image: %v\n%s", err, out)
	}
}
