package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMemoryMaxBytesDefault: --memory-max-bytes defaults to half the
// container's memory limit, cgroup v2 first, then v1, at least
// MinMemoryMaxBytes; without a limit ("max", v1's huge number, no file),
// to DefaultMemoryMaxBytes.
func TestMemoryMaxBytesDefault(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	orig := cgroupMemoryFiles
	t.Cleanup(func() { cgroupMemoryFiles = orig })
	for _, tc := range []struct {
		name   string
		v2, v1 string // "" for no file
		want   int64
	}{
		{"v2 limit", "268435456\n", "", 128 << 20},
		{"v2 unlimited, v1 limit", "max\n", "1073741824\n", 512 << 20},
		{"v1 unlimited", "", "9223372036854771712\n", DefaultMemoryMaxBytes},
		{"none", "", "", DefaultMemoryMaxBytes},
		{"small limit", "20971520\n", "", MinMemoryMaxBytes},
	} {
		files := []string{filepath.Join(dir, "absent-v2"), filepath.Join(dir, "absent-v1")}
		if tc.v2 != "" {
			files[0] = write(tc.name+"-v2", tc.v2)
		}
		if tc.v1 != "" {
			files[1] = write(tc.name+"-v1", tc.v1)
		}
		cgroupMemoryFiles = files
		if got, src := MemoryMaxBytesDefault(); got != tc.want {
			t.Errorf("%s: %d (%s), want %d", tc.name, got, src, tc.want)
		}
	}
}

// TestMemoryMaxBytesTooSmall: a --memory-max-bytes below the least the
// store works with is refused, naming the flag and the least.
func TestMemoryMaxBytesTooSmall(t *testing.T) {
	_, _, _, err := openStore(Config{Store: "memory", MemoryMaxBytes: 1 << 20})
	if err == nil || !strings.Contains(err.Error(), "--memory-max-bytes 1048576") || !strings.Contains(err.Error(), "16777216") {
		t.Fatalf("openStore with 1MiB: %v, want an error naming --memory-max-bytes and 16777216", err)
	}
	st, _, _, err := openStore(Config{Store: "memory", MemoryMaxBytes: MinMemoryMaxBytes})
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
}
