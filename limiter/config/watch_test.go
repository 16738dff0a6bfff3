package config_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/limiter/config"
)

// policyFile is a one-policy file whose rate.limit is limit; comment changes
// the bytes without changing the policies.
func policyFile(limit int, comment string) string {
	return fmt.Sprintf(`# %s
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-user, namespace: shop}
spec:
  domain: shop
  descriptors: [{key: user}]
  rate: {limit: %d, period: 1m}
`, comment, limit)
}

const brokenFile = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-user, namespace: shop}
spec:
  domain: shop
  descriptors: [{key: user}]
  rate: {limit: 0, period: 1m}
`

// watcher runs config.Watch on path for the rest of the test and collects
// what it reports.
type watcher struct {
	loads chan *config.Snapshot
	errs  chan error
}

func startWatch(t *testing.T, path string) *watcher {
	t.Helper()
	w := &watcher{loads: make(chan *config.Snapshot, 100), errs: make(chan error, 100)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- config.Watch(ctx, path, func(s *config.Snapshot) { w.loads <- s }, func(err error) { w.errs <- err })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Watch returned %v after cancel, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Watch did not return after its context was cancelled")
		}
	})
	return w
}

const waitFor = 10 * time.Second

// load waits for the next onLoad; an onError first fails the test.
func (w *watcher) load(t *testing.T) *config.Snapshot {
	t.Helper()
	select {
	case s := <-w.loads:
		return s
	case err := <-w.errs:
		t.Fatalf("onError(%v), want onLoad", err)
	case <-time.After(waitFor):
		t.Fatalf("no onLoad within %v", waitFor)
	}
	return nil
}

// err waits for the next onError; an onLoad first fails the test.
func (w *watcher) err(t *testing.T) error {
	t.Helper()
	select {
	case err := <-w.errs:
		return err
	case s := <-w.loads:
		t.Fatalf("onLoad(version %s), want onError", s.Version)
	case <-time.After(waitFor):
		t.Fatalf("no onError within %v", waitFor)
	}
	return nil
}

func (w *watcher) noLoad(t *testing.T) {
	t.Helper()
	select {
	case s := <-w.loads:
		t.Fatalf("unexpected onLoad(version %s)", s.Version)
	default:
	}
}

func limitOf(t *testing.T, s *config.Snapshot) int64 {
	t.Helper()
	if len(s.Policies) != 1 {
		t.Fatalf("snapshot has %d policies, want 1", len(s.Policies))
	}
	return s.Policies[0].Limit.Limit
}

// writeAtomic writes data to a temporary file beside path and renames it
// over path, as editors and atomic writers do.
func writeAtomic(t *testing.T, path, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestWatchReloadsOnChange(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policies.yaml")
	write(t, path, policyFile(10, "first"))
	w := startWatch(t, path)

	// The first load happens once the watch is in place.
	first := w.load(t)
	if got := limitOf(t, first); got != 10 {
		t.Fatalf("first load: limit %d, want 10", got)
	}

	// Rewritten in place.
	write(t, path, policyFile(20, "in place"))
	if got := limitOf(t, w.load(t)); got != 20 {
		t.Fatalf("after rewrite: limit %d, want 20", got)
	}

	// Renamed over.
	writeAtomic(t, path, policyFile(30, "renamed over"))
	s := w.load(t)
	if got := limitOf(t, s); got != 30 {
		t.Fatalf("after rename: limit %d, want 30", got)
	}

	// Other files in the directory don't matter.
	write(t, filepath.Join(dir, "notes.txt"), "unrelated")

	// Only a comment changed: same version, no onLoad. The broken file
	// written next is reported after it, by the same goroutine, so an
	// onLoad for the comment would arrive first.
	writeAtomic(t, path, policyFile(30, "only the comment changed"))
	writeAtomic(t, path, brokenFile)
	err := w.err(t)
	w.noLoad(t)
	for _, want := range []string{path, "document 1", "shop/per-user", "spec.limit.rate.limit"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}

	// Fixed: loaded again.
	writeAtomic(t, path, policyFile(40, "fixed"))
	fixed := w.load(t)
	if got := limitOf(t, fixed); got != 40 {
		t.Fatalf("after fix: limit %d, want 40", got)
	}

	// Broken, then restored to what was loaded: the caller hears that the
	// file is good again, with the version it has.
	writeAtomic(t, path, brokenFile)
	w.err(t)
	writeAtomic(t, path, policyFile(40, "restored"))
	if got := w.load(t); got.Version != fixed.Version {
		t.Fatalf("after restore: version %s, want %s", got.Version, fixed.Version)
	}

	// Back to an earlier content: a new version relative to the last load.
	writeAtomic(t, path, policyFile(30, "back"))
	if got := w.load(t); got.Version != s.Version {
		t.Fatalf("back to limit 30: version %s, want %s", got.Version, s.Version)
	}
}

func TestWatchRemovedAndRecreated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	write(t, path, policyFile(10, ""))
	w := startWatch(t, path)
	w.load(t)

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := w.err(t); !os.IsNotExist(err) {
		t.Fatalf("after remove: error %v, want not-exist", err)
	}
	write(t, path, policyFile(11, ""))
	if got := limitOf(t, w.load(t)); got != 11 {
		t.Fatalf("after re-create: limit %d, want 11", got)
	}
}

// TestWatchConfigMapSwap replays how the kubelet updates a ConfigMap
// volume: the file is a symlink through "..data", which is itself a symlink
// to a timestamped directory; an update writes a new directory and renames a
// new "..data" symlink over the old one.
func TestWatchConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, data string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, name, "policies.yaml"), data)
	}
	swap := func(name string) {
		t.Helper()
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..2024_01_01_00_00_00.1", policyFile(10, ""))
	swap("..2024_01_01_00_00_00.1")
	path := filepath.Join(dir, "policies.yaml")
	if err := os.Symlink(filepath.Join("..data", "policies.yaml"), path); err != nil {
		t.Fatal(err)
	}

	w := startWatch(t, path)
	if got := limitOf(t, w.load(t)); got != 10 {
		t.Fatalf("first load: limit %d, want 10", got)
	}

	version("..2024_01_01_00_01_00.2", policyFile(20, ""))
	swap("..2024_01_01_00_01_00.2")
	if err := os.RemoveAll(filepath.Join(dir, "..2024_01_01_00_00_00.1")); err != nil {
		t.Fatal(err)
	}
	if got := limitOf(t, w.load(t)); got != 20 {
		t.Fatalf("after swap: limit %d, want 20", got)
	}

	version("..2024_01_01_00_02_00.3", brokenFile)
	swap("..2024_01_01_00_02_00.3")
	if err := w.err(t); !strings.Contains(err.Error(), "spec.limit.rate.limit") {
		t.Fatalf("broken swap: error %v, want one naming spec.limit.rate.limit", err)
	}
}

// TestWatchSymlinkElsewhere follows a file that is a symlink into another
// directory: edits to the target are seen.
func TestWatchSymlinkElsewhere(t *testing.T) {
	target := filepath.Join(t.TempDir(), "real.yaml")
	write(t, target, policyFile(10, ""))
	path := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, path)
	w.load(t)
	writeAtomic(t, target, policyFile(12, ""))
	if got := limitOf(t, w.load(t)); got != 12 {
		t.Fatalf("after editing the target: limit %d, want 12", got)
	}
}

func TestWatchStartErrors(t *testing.T) {
	// A missing file in an existing directory is reported, and the watch
	// goes on: the file may appear later.
	dir := t.TempDir()
	path := filepath.Join(dir, "later.yaml")
	w := startWatch(t, path)
	if err := w.err(t); !os.IsNotExist(err) {
		t.Fatalf("missing file: error %v, want not-exist", err)
	}
	writeAtomic(t, path, policyFile(5, ""))
	if got := limitOf(t, w.load(t)); got != 5 {
		t.Fatalf("after create: limit %d, want 5", got)
	}

	// A missing directory can't be watched.
	err := config.Watch(context.Background(), filepath.Join(dir, "nope", "p.yaml"), func(*config.Snapshot) {}, func(error) {})
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("missing directory: Watch returned %v, want an error naming it", err)
	}
}
